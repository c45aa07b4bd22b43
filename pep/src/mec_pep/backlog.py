"""The per-UE backlog toward the UE, sampled every few ms and published on AMQP.

The message, its routing key and its units are the contract ``mec_common.bus.backlog``
(``PepBacklog``). ``received_bytes`` counts every byte the PEP took from servers for this UE
since the PEP started, over all its flows: bytes read from the WAN legs plus what waits in
their receive queues. It is the arrival count of the backlog, so the arrival rate is its
growth over time; it never decreases except by what a reset flow drops unread.

Only UEs with something buffered are sampled (flows that took bytes from the server for
the UE since their backlog was last seen at zero), plus one final message with a zero backlog when a
UE's backlog has drained, so consumers see the drop. Idle flows cost nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from ipaddress import IPv4Address
from typing import Protocol

from mec_common.amqp import AmqpPublisher
from mec_common.bus.backlog import SCHEMA_VERSION, PepBacklog
from mec_common.logging import get_logger

log = get_logger(__name__)


class BacklogSource(Protocol):
    """What the feed reads from a data plane (the Python relay's ``DataPlane``, the compiled
    core's ``CoreDataPlane``); the per-UE sums are the feed's own (``tick``)."""

    def held_toward_ue(self) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
        """(UE, ``relay.flow_view.toward_ue``) of every flow holding bytes toward its UE, and
        the bytes read from servers per UE since the start (ended flows included)."""
        ...


@dataclass
class UeBacklog:
    backlog_bytes: int = 0  # held toward the UE: server-leg queue + pipe + UE-leg send queue
    unsent_bytes: int = 0  # the part not yet sent on the UE leg
    received_bytes: int = 0  # taken from servers for this UE since start (cumulative)
    flows: int = 0  # flows holding bytes

    def add_flow(self, q: dict[str, int]) -> None:
        """One flow's bytes toward the UE (``toward_ue``); what waits in its WAN leg's
        receive queue has arrived from the server too."""
        self.backlog_bytes += q["total"]
        self.unsent_bytes += q["total"] - q["ran_send_queue"] + q["ran_send_unsent"]
        self.received_bytes += q["wan_receive_queue"]
        self.flows += 1


class BacklogFeed:
    """A thread sampling every ``interval`` seconds; ``latest`` is what it saw last."""

    def __init__(
        self, dataplane: BacklogSource, publisher: AmqpPublisher | None, interval: float
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
        held, read = self.dataplane.held_toward_ue()
        merged: dict[str, UeBacklog] = {}
        for ue, q in held:
            merged.setdefault(ue, UeBacklog()).add_flow(q)
        for ue, b in merged.items():
            b.received_bytes += read.get(ue, 0)
        drained = {ue: UeBacklog(received_bytes=read.get(ue, 0)) for ue in self.latest}
        if self.publisher is not None:
            now = time.time_ns()
            for ue, b in merged.items():
                self._publish(ue, b, now)
            for ue, b in drained.items():
                if ue not in merged:
                    self._publish(ue, b, now)
        self.latest = merged
        self.samples += 1
        return merged

    def _publish(self, ue: str, b: UeBacklog, ts_ns: int) -> None:
        assert self.publisher is not None
        if ":" in ue:
            return  # the feed's contract (and the path manager, MPTCP over IPv4) is IPv4 only
        message = PepBacklog(
            ue=IPv4Address(ue),
            ts_ns=ts_ns,
            backlog_bytes=b.backlog_bytes,
            unsent_bytes=b.unsent_bytes,
            received_bytes=b.received_bytes,
            flows=b.flows,
        )
        self.publisher.publish(message.routing_key(), message.to_json(), {"schema": SCHEMA_VERSION})
