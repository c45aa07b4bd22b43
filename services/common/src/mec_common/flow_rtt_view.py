"""The consumer's side of the flow-RTT feed (``mec_common.bus.flowrtt``): the latest RTT of
each observed flow, found by its addresses.

The PEP and the path manager feed ``FlowRttView.on_message`` from an ``AmqpConsumer`` and ask
``lookup(a, b)`` (one TCP connection's two ends, either order) or ``of_address(ip)`` (every
flow of an endpoint). A flow whose last message is older than ``max_age_s`` is unknown (the
observer stopped seeing it): its RTT is absent, never a stale figure.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from mec_common.bus.flowrtt import FlowRttSummary, RulesRtt
from mec_common.logging import get_logger

log = get_logger(__name__)

MAX_AGE_S = 5.0


class ObservedRtt(BaseModel):
    """A flow's RTT as the MEC host's observer measured it passively (spin/delay bit)."""

    flow_id: str = Field(description="<client ip>:<port>-<server ip>:<port> at the observer")
    method: Literal["spin", "delay"]
    age_s: float = Field(description="since its latest figures arrived")
    raw: RulesRtt = Field(description="Spindump's rules")
    filtered: RulesRtt = Field(description="with the reordering guard and minimum-gap rule")


def _endpoint(address: str, port: int) -> str:
    return f"{address}:{port}"


class FlowRttView:
    """Latest summary per flow, at most ``max_flows`` (least recently updated dropped)."""

    def __init__(self, max_age_s: float = MAX_AGE_S, max_flows: int = 16384) -> None:
        self.max_age_s = max_age_s
        self.max_flows = max_flows
        self._flows: collections.OrderedDict[frozenset[str], tuple[float, FlowRttSummary]] = (
            collections.OrderedDict()
        )
        self._lock = threading.Lock()
        self.rejected = 0

    def on_message(self, routing_key: str, body: bytes, headers: dict[str, Any]) -> None:
        """``AmqpConsumer`` callback; a malformed message is counted and skipped."""
        try:
            summary = FlowRttSummary.model_validate_json(body)
        except ValidationError as exc:
            self.rejected += 1
            log.warning("flow-rtt message rejected", routing_key=routing_key, error=str(exc))
            return
        self.add(summary)

    def add(self, summary: FlowRttSummary, received: float | None = None) -> None:
        key = frozenset(
            (
                _endpoint(str(summary.client), summary.client_port),
                _endpoint(str(summary.server), summary.server_port),
            )
        )
        with self._lock:
            self._flows[key] = (time.monotonic() if received is None else received, summary)
            self._flows.move_to_end(key)
            while len(self._flows) > self.max_flows:
                self._flows.popitem(last=False)

    def lookup(self, a: str | None, b: str | None) -> ObservedRtt | None:
        """The flow between endpoints ``a`` and ``b`` ("ip:port"), None if not known now."""
        if not a or not b:
            return None
        with self._lock:
            found = self._flows.get(frozenset((a, b)))
        return None if found is None else self._fresh(*found)

    def of_address(self, address: str) -> list[ObservedRtt]:
        """Every flow known now with ``address`` at either end."""
        with self._lock:
            entries = list(self._flows.values())
        text = str(address)
        return [
            observed
            for received, s in entries
            if text in (str(s.client), str(s.server))
            if (observed := self._fresh(received, s)) is not None
        ]

    def _fresh(self, received: float, s: FlowRttSummary) -> ObservedRtt | None:
        age = time.monotonic() - received
        if age > self.max_age_s:
            return None
        return ObservedRtt(
            flow_id=s.flow_id, method=s.method, age_s=age, raw=s.raw, filtered=s.filtered
        )
