"""The per-UE backlog toward the UE, sampled every few ms and published on AMQP.

The path manager's reactive trigger watches how much the PEP holds for a UE. Polling REST
for that would cost an HTTP round trip per UE per period; instead the PEP publishes one
small JSON message per UE per period on a topic exchange (default ``pep``)::

    routing key  pep.v1.backlog.<ue ipv4 with _ for .>      e.g. pep.v1.backlog.10_30_1_1
    body         {"schema": 1, "ue": "10.30.1.1", "ts_ns": ..., "backlog_bytes": ...,
                  "unsent_bytes": ..., "flows": ...}

Only UEs with something buffered are sampled (flows that moved bytes toward the UE since
their backlog was last seen at zero), plus one final message with zero when a UE's
backlog has drained, so consumers see the drop. Idle flows cost nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import orjson

from mec_common.amqp import AmqpPublisher
from mec_common.logging import get_logger
from mec_pep.dataplane import DataPlane
from mec_pep.relay import Relay
from mec_pep.state import backlog_toward_ue

log = get_logger(__name__)

SCHEMA = 1


@dataclass
class UeBacklog:
    backlog_bytes: int = 0  # held toward the UE: server-leg queue + pipe + UE-leg send queue
    unsent_bytes: int = 0  # the part not yet sent on the UE leg
    flows: int = 0  # flows holding bytes


def routing_key(ue: str) -> str:
    return "pep.v1.backlog." + ue.replace(".", "_")


def sample(relay: Relay) -> dict[str, UeBacklog]:
    """Runs in the relay thread: backlog of the flows that may hold bytes toward a UE."""
    found: dict[str, UeBacklog] = {}
    for conn in list(relay.busy):
        total, unsent = backlog_toward_ue(conn)
        if total == 0:
            relay.busy.discard(conn)
            continue
        ue = found.setdefault(conn.flow.ue, UeBacklog())
        ue.backlog_bytes += total
        ue.unsent_bytes += unsent
        ue.flows += 1
    return found


class BacklogFeed:
    """A thread sampling every ``interval`` seconds; ``latest`` is what it saw last."""

    def __init__(
        self, dataplane: DataPlane, publisher: AmqpPublisher | None, interval: float
    ) -> None:
        self.dataplane = dataplane
        self.publisher = publisher
        self.interval = interval
        self.latest: dict[str, UeBacklog] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pep-backlog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("backlog sampling failed")
            next_at += self.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # we fell behind (a slow sample): do not try to catch up
                next_at, delay = time.monotonic(), 0.0
            self._stop.wait(delay)

    def tick(self) -> dict[str, UeBacklog]:
        merged: dict[str, UeBacklog] = {}
        for part in self.dataplane.collect(sample, timeout=5.0):
            for ue, b in part.items():
                m = merged.setdefault(ue, UeBacklog())
                m.backlog_bytes += b.backlog_bytes
                m.unsent_bytes += b.unsent_bytes
                m.flows += b.flows
        drained = [ue for ue in self.latest if ue not in merged]
        if self.publisher is not None:
            now = time.time_ns()
            for ue, b in merged.items():
                self._publish(ue, b, now)
            for ue in drained:
                self._publish(ue, UeBacklog(), now)
        self.latest = merged
        self.samples += 1
        return merged

    def _publish(self, ue: str, b: UeBacklog, ts_ns: int) -> None:
        assert self.publisher is not None
        body = orjson.dumps(
            {
                "schema": SCHEMA,
                "ue": ue,
                "ts_ns": ts_ns,
                "backlog_bytes": b.backlog_bytes,
                "unsent_bytes": b.unsent_bytes,
                "flows": b.flows,
            }
        )
        self.publisher.publish(routing_key(ue), body, {"schema": SCHEMA})
