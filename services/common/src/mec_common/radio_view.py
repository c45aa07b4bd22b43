"""The one view of the RNIS feed that every consumer (the PEP, the path manager) reads through.

**Dispatch.** ``RadioView.on_message`` is the ``AmqpConsumer`` callback: by routing key it
reads a per-UE measurement (``rnis.v1.meas.*``), a cell batch (``rnis.v1.cell.*``: every UE
of the cell) or an event (``rnis.v1.event.*``) with the contract's models
(``mec_common.bus.rnis``) and hands each measurement or event to the consumer. A message
that is not valid is counted and logged, never raised: one bad message must not stop a feed.

**Freshness, one clock.** A measurement is as old as the RAN's measurement, not as the
message: ``measured_ns`` is the time the RAN measured it (``source_time_ns``, the adapter's
first sight of the report; the poll's ``observed_ns`` when the source gives no time). A
report repeated by later polls, or delayed in the broker, is not fresher. Every consumer
judges staleness when it *uses* a value, against that time and its own bound.

**Unknown and stale: one policy.** A value the RAN did not report (``None`` on the wire)
and a value older than the consumer's bound are the same thing: *no information* — never
zero, never "full". The consumer then does what it does without the RAN:

- the PEP (MELD/RAPID in the kernel): the plain congestion response. An unknown RLC queue
  or Q_th makes MELD-ME notify the growth function; a stale entry is the kernel's STALE
  verdict, which notifies too.
- the path manager: the reactive trigger's queue is the PEP's unsent bytes alone (no RLC
  part), and the predictor falls back to its priors.

``known()`` is that policy in one function; ``services/common/tests/test_radio_view.py``
checks that both consumers follow it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mec_common.bus.rnis import PREFIX, RnisEvent, RnisMeasurement, measurements
from mec_common.logging import get_logger

log = get_logger(__name__)

T = TypeVar("T")

MEAS_PREFIX = f"{PREFIX}.meas."
CELL_PREFIX = f"{PREFIX}.cell."
EVENT_PREFIX = f"{PREFIX}.event."


def measured_ns(m: RnisMeasurement) -> int:
    """When the RAN measured ``m`` (Unix ns): the freshness clock of every consumer."""
    return m.source_time_ns if m.source_time_ns is not None else m.observed_ns


def monotonic_ns_from_wall(wall_ns: int) -> int:
    """CLOCK_MONOTONIC (the kernel's ``bpf_ktime_get_ns``) time of a wall-clock instant."""
    return time.monotonic_ns() - (time.time_ns() - wall_ns)


def is_fresh(measured_at_ns: int, now_ns: int, stale_after_s: float) -> bool:
    """Whether a measurement taken at ``measured_at_ns`` may still be used at ``now_ns``
    (both on one clock). One from the future (a clock step) is as unusable as an old one."""
    return 0 <= now_ns - measured_at_ns <= stale_after_s * 1e9


def known(value: T | None, measured_at_ns: int, now_ns: int, stale_after_s: float) -> T | None:
    """The policy for unknown and stale values: ``value`` if the RAN reported it and it is
    fresh, else None (no information; the consumer falls back to its behaviour without RAN)."""
    if value is None or not is_fresh(measured_at_ns, now_ns, stale_after_s):
        return None
    return value


@dataclass
class ViewStats:
    received: int = 0  # messages
    rejected: int = 0  # not a valid RNIS message
    ignored: int = 0  # valid, but of a kind nobody here handles


class RadioView:
    """Routing-key dispatch of the RNIS feed to a consumer's handlers (the AMQP callback)."""

    def __init__(
        self,
        on_measurement: Callable[[RnisMeasurement], None],
        on_event: Callable[[RnisEvent], None] | None = None,
        stats: ViewStats | None = None,
    ) -> None:
        self._on_measurement = on_measurement
        self._on_event = on_event
        self.stats = ViewStats() if stats is None else stats

    def on_message(self, routing_key: str, body: bytes, headers: dict[str, Any]) -> None:
        self.stats.received += 1
        try:
            if routing_key.startswith(MEAS_PREFIX):
                self._on_measurement(RnisMeasurement.model_validate_json(body))
            elif routing_key.startswith(CELL_PREFIX):
                for m in list(measurements(body)):  # validate the whole batch first
                    self._on_measurement(m)
            elif routing_key.startswith(EVENT_PREFIX) and self._on_event is not None:
                self._on_event(RnisEvent.model_validate_json(body))
            else:
                self.stats.ignored += 1
        except ValueError as exc:  # pydantic's ValidationError, or JSON that is not a message
            self.stats.rejected += 1
            log.warning("invalid RNIS message", routing_key=routing_key, error=str(exc)[:300])
