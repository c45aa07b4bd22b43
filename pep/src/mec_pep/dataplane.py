"""The PEP's data plane: a group of relay threads sharing settings, policy and flows.

``DataPlane`` is the only way into the relays from other threads (the REST API, the
backlog feed, extensions through ``for_flows``): every read of a flow's sockets runs in the
flow's relay thread, where its descriptors are valid.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any, TypeVar

from mec_common.logging import get_logger
from mec_pep.config import PepSettings
from mec_pep.flows import Flow, FlowTable, Hooks, ProxyMode
from mec_pep.policy import AccessPolicy
from mec_pep.relay import Conn, Relay, RelayCounters, Shared, Stage
from mec_pep.relay.collector import collector
from mec_pep.relay.flow_view import buffered, flow_state, held_toward_ue
from mec_pep.relay.loop import relay_cpus

log = get_logger(__name__)

T = TypeVar("T")


class DataPlane:
    """Relay threads plus what they share. Safe to call from any thread."""

    def __init__(
        self, settings: PepSettings, flows: FlowTable, hooks: Hooks, threads: int = 2
    ) -> None:
        self.shared = Shared(settings, flows, hooks)
        self.shared.cpus = relay_cpus(settings, threads)
        self.relays = [Relay(self.shared, i) for i in range(threads)]
        self.addresses: dict[ProxyMode, tuple[str, int]] = {}
        self._collecting = False

    @property
    def settings(self) -> PepSettings:
        return self.shared.settings

    @property
    def flows(self) -> FlowTable:
        return self.shared.flows

    def start(self) -> None:
        """Start the relay threads (in the caller's network namespace) and the listeners.

        Cyclic garbage is collected outside the relay threads from here on
        (``relay/collector.py``).
        """
        if not self._collecting:
            collector.acquire()
            self._collecting = True
        for relay in self.relays:
            relay.start()
        s = self.settings
        for mode, port in (
            (ProxyMode.SOCKS5, s.socks5_port),
            (ProxyMode.TLV, s.tlv_port),
            (ProxyMode.TRANSPARENT, s.transparent_port),
        ):
            if port is not None:
                self.listen(mode, port)

    def stop(self) -> None:
        for relay in self.relays:
            relay.stop()
        if self._collecting:
            collector.release()
            self._collecting = False

    def listen(self, mode: ProxyMode, port: int) -> tuple[str, int]:
        """(Re)open ``mode``'s listener on every relay thread; port 0 picks a free one."""
        s = self.settings
        host = "0.0.0.0" if mode is ProxyMode.TRANSPARENT else s.listen_host
        host6 = (
            None
            if s.listen_host6 is None
            else "::"
            if mode is ProxyMode.TRANSPARENT
            else s.listen_host6
        )
        first = self.relays[0]
        address = first.call(partial(first.open_listener, mode, host, port, host6))
        try:
            for relay in self.relays[1:]:
                relay.call(partial(relay.open_listener, mode, host, address[1], host6))
        except BaseException:
            self.unlisten(mode)
            raise
        self.addresses[mode] = address
        log.info("listening", mode=str(mode), address=f"{address[0]}:{address[1]}")
        return address

    def unlisten(self, mode: ProxyMode) -> None:
        for relay in self.relays:
            relay.call(partial(relay.close_listener, mode))
        if self.addresses.pop(mode, None) is not None:
            log.info("listener closed", mode=str(mode))

    def set_policy(self, policy: AccessPolicy) -> None:
        self.shared.policy = policy

    def set_limits(self) -> None:
        """Nothing to do: the relay threads read the limits, timeouts and buffer sizes from
        the shared settings at each flow (``CoreDataPlane.set_limits`` copies them)."""

    def resize_buffers(self) -> None:
        for relay in self.relays:
            relay.call(relay.listeners.resize_buffers)

    # ---- reading state ------------------------------------------------------------------

    def collect(self, fn: Callable[[Relay], T], timeout: float = 10.0) -> list[T]:
        """``fn(relay)`` in every relay thread, concurrently; the results in relay order."""
        futures = [relay.submit(partial(fn, relay)) for relay in self.relays]
        return [future.result(timeout) for future in futures]

    def counters(self) -> RelayCounters:
        total = RelayCounters()
        for relay in self.relays:
            c = relay.counters
            total.accepted += c.accepted
            total.established += c.established
            total.closed += c.closed
            total.bytes_to_ue += c.bytes_to_ue
            total.bytes_from_ue += c.bytes_from_ue
            for reason, n in list(c.refused.items()):
                total.refused[reason] = total.refused.get(reason, 0) + n
            for reason, n in list(c.aborted.items()):
                total.aborted[reason] = total.aborted.get(reason, 0) + n
        return total

    @property
    def private_descriptor_tables(self) -> bool:
        return all(relay.private_table for relay in self.relays)

    def pipes_in_use(self) -> int:
        return sum(relay.mover.pipes.in_use for relay in self.relays)

    @property
    def thread_count(self) -> int:
        return len(self.relays)

    @property
    def pipe_size(self) -> int:
        """The pipe size the kernel granted (F_SETPIPE_SZ may round or clamp the setting)."""
        return self.relays[0].mover.pipes.size

    def listener_buffers(self) -> tuple[int, int] | None:
        """(SO_RCVBUF, SO_SNDBUF) granted on the listeners: what new RAN legs get."""
        first = self.relays[0]
        return first.call(first.listeners.buffers)

    def flow_states(
        self, flows: Iterable[Flow], *, tcp: bool, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """The API's view of each live flow (``state.flow_state``), sorted by flow id."""
        raw = self._read(flows, lambda c: flow_state(c, tcp=tcp), timeout)
        return sorted(raw, key=lambda s: s["id"])

    def buffered(
        self, flows: Iterable[Flow], timeout: float = 10.0
    ) -> list[tuple[Flow, dict[str, dict[str, int]]]]:
        """Bytes each live flow holds per direction (``state.buffered``)."""
        return self._read(flows, lambda c: (c.flow, buffered(c)), timeout)

    def held_toward_ue(self) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
        """The backlog feed's input (``backlog.BacklogSource``), from every relay thread."""
        held: list[tuple[str, dict[str, int]]] = []
        read: dict[str, int] = {}
        for part, read_part in self.collect(held_toward_ue, timeout=5.0):
            held += part
            for ue, n in read_part.items():
                read[ue] = read.get(ue, 0) + n
        return held, read

    def reset(self, flow: Flow, reason: str) -> None:
        """Reset a flow (RST on both legs); nothing if it has closed."""
        conn = flow._relay
        if isinstance(conn, Conn):
            conn.relay.call(lambda: conn.relay.abort(conn, reason))

    def _read(self, flows: Iterable[Flow], read: Callable[[Conn], T], timeout: float) -> list[T]:
        """``read(conn)`` for each live flow, in its relay thread; the relays concurrently."""
        futures = [
            relay.submit(partial(_read_live, conns, read))
            for relay, conns in _by_relay(flows).items()
        ]
        return [x for future in futures for x in future.result(timeout)]

    # ---- RelayAccess (the extension contract) ----------------------------------------

    def for_flows(
        self, flows: Iterable[Flow], fn: Callable[[Flow], None], *, wait: bool = True
    ) -> None:
        for relay, conns in _by_relay(flows).items():
            job = _apply(conns, fn)
            if wait:
                with contextlib.suppress(FutureTimeout, RuntimeError):
                    relay.call(job)
            else:
                with contextlib.suppress(RuntimeError):
                    relay.post(job)


def _by_relay(flows: Iterable[Flow]) -> dict[Relay, list[Conn]]:
    """Live flows grouped by the relay thread that owns their sockets."""
    grouped: dict[Relay, list[Conn]] = defaultdict(list)
    for flow in flows:
        conn = flow._relay
        if isinstance(conn, Conn):
            grouped[conn.relay].append(conn)
    return grouped


def _read_live(conns: list[Conn], read: Callable[[Conn], T]) -> list[T]:
    return [read(c) for c in conns if c.alive]


def _apply(conns: list[Conn], fn: Callable[[Flow], None]) -> Callable[[], None]:
    def run() -> None:
        for conn in conns:
            if conn.stage is Stage.CLOSED:
                continue
            try:
                fn(conn.flow)
            except Exception:
                log.exception("for_flows callback failed", flow=conn.flow.id)

    return run
