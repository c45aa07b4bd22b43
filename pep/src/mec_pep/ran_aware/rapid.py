"""RAPID (thesis §5.2): share a UE's RAN capacity among its flows, per flow, on both legs.

WAN leg: each flow's receive window toward its server is clamped (``TCP_WINDOW_CLAMP``:
the kernel's own flow control, window scaling included, no packet rewriting) to

    RW_ij = C_i / N · RTTmin_WAN,ij                                              (Eq. 5.4)

then re-evaluated every categorisation period of ``K = log2(RW/MSS) + 1`` WAN RTTs
(Eq. 5.6), from one arrival-rate sample per RTT smoothed with ``r̂ = α·r̂ + (1-α)·r``
(α = 1/8, Eq. 5.9) against the expected rate ``R = RW / RTT_WAN`` (Eq. 5.8):

- slow (``r̂ < 0.8·R``): ``RW ← r̂/R · RW`` (Eq. 5.10); it releases bandwidth (Eq. 5.11);
- fast: ``RW ← RW(Eq. 5.4, current C_i and N) + A_i/(N − Z)·RTTmin`` (Eq. 5.13), with
  ``A_i`` the bandwidth released by the UE's ``Z`` slow flows (Eq. 5.12).

We keep the released bandwidth as a *rate* (``C_i/N − r̂``) rather than a window
difference: the two are equal for flows with the same RTT (the thesis's setting), and the
rate stays meaningful when a slow flow's window has already shrunk to its demand (the
window difference would then drop to 0 although the flow still leaves its share unused)
and when the UE's flows have different WAN RTTs.

RAN leg: the flow's allocated rate ``RW/RTTmin`` goes to the kernel (``flow_ctl`` map),
where the congestion control sets cwnd = rate · smoothed RAN RTT_min, loss-agnostic.
"""

from __future__ import annotations

import contextlib
import math
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from mec_common.logging import get_logger

if TYPE_CHECKING:
    from mec_pep.flows import Flow, PepContext
    from mec_pep.ran_aware.kernel import MeldKernel

log = get_logger(__name__)


class FlowClass(StrEnum):
    INIT = "init"  # first period after the flow started (or after C_i became known)
    FAST = "fast"
    SLOW = "slow"


@dataclass
class RapidFlow:
    flow_id: int
    ue: str
    mss: int
    rtt_min: float  # s, WAN RTT_min
    rtt: float  # s, smoothed WAN RTT
    window: float | None = None  # RW_ij, bytes; None = no capacity known, no clamp
    rate_hat: float | None = None  # r̂_ij, bytes/s
    klass: FlowClass = FlowClass.INIT
    released: float = 0.0  # bytes/s this slow flow leaves unused
    backlogged: bool = False  # data waits at the PEP toward the UE (last reading)
    period_end: float = 0.0
    sample_time: float = 0.0
    sample_bytes: int = 0

    @property
    def expected_rate(self) -> float:
        """R_ij = RW / RTT_WAN (Eq. 5.8)."""
        return (self.window or 0.0) / self.rtt

    @property
    def allocated_rate(self) -> float:
        """The flow's share of C_i: what its window lets through at RTT_min."""
        return (self.window or 0.0) / self.rtt_min


def period_rtts(window: float, mss: int) -> int:
    """K = log2(RW/MSS) + 1 (Eq. 5.6), at least one RTT."""
    return max(1, math.ceil(math.log2(max(window / mss, 1.0)) + 1))


class RapidAllocator:
    """Eq. 5.4-5.13 over the flows of every UE; pure (time is passed in), not thread-safe."""

    def __init__(self, slow_threshold: float = 0.8, alpha: float = 0.125) -> None:
        self.slow_threshold = slow_threshold
        self.alpha = alpha
        self.flows: dict[int, RapidFlow] = {}
        self.capacity: dict[str, float] = {}  # C_i, bytes/s

    def flows_of(self, ue: str) -> list[RapidFlow]:
        return [f for f in self.flows.values() if f.ue == ue]

    def set_capacity(self, ue: str, rate_Bps: float) -> None:  # noqa: N803
        if rate_Bps > 0:
            self.capacity[ue] = rate_Bps
        else:
            self.capacity.pop(ue, None)

    def fair_share(self, ue: str) -> float | None:
        """C_i / N, bytes/s."""
        c = self.capacity.get(ue)
        n = len(self.flows_of(ue))
        return c / n if c and n else None

    def released(self, ue: str) -> tuple[float, int]:
        """A_i (Eq. 5.12) and Z: bandwidth left by the UE's slow flows, and their number."""
        slow = [f for f in self.flows_of(ue) if f.klass is FlowClass.SLOW]
        return sum(f.released for f in slow), len(slow)

    def add(self, flow_id: int, ue: str, now: float, *, mss: int, rtt_min: float,
            rtt: float, bytes_received: int) -> RapidFlow:  # fmt: skip
        f = RapidFlow(flow_id, ue, mss, rtt_min, max(rtt, rtt_min))
        f.sample_time, f.sample_bytes = now, bytes_received
        self.flows[flow_id] = f
        self._start(f, now)
        return f

    def remove(self, flow_id: int) -> RapidFlow | None:
        return self.flows.pop(flow_id, None)

    def _start(self, f: RapidFlow, now: float) -> None:
        """First window of a flow: its equal share (Eq. 5.4), and a first period."""
        share = self.fair_share(f.ue)
        if share is None:
            return
        f.window = max(share * f.rtt_min, 2.0 * f.mss)
        f.klass = FlowClass.INIT
        f.period_end = now + period_rtts(f.window, f.mss) * f.rtt

    def observe(self, flow_id: int, now: float, *, bytes_received: int, rtt_min: float,
                rtt: float, backlogged: bool = False) -> bool:  # fmt: skip
        """Feed one reading of the flow's WAN socket; True if its window changed.

        ``backlogged``: the flow's data is piling up at the PEP toward the UE, so a low
        arrival rate is the RAN leg's doing, not the server's: the flow is not slow.
        """
        f = self.flows[flow_id]
        f.backlogged = backlogged
        f.rtt_min = min(f.rtt_min, rtt_min) if rtt_min > 0 else f.rtt_min
        f.rtt = max(rtt, f.rtt_min)
        if f.window is None:
            self._start(f, now)
            return f.window is not None
        elapsed = now - f.sample_time
        if elapsed >= f.rtt:  # one arrival-rate sample per RTT (Eq. 5.9)
            r = (bytes_received - f.sample_bytes) / elapsed
            f.rate_hat = r if f.rate_hat is None else self.alpha * f.rate_hat + (1 - self.alpha) * r
            f.sample_time, f.sample_bytes = now, bytes_received
        if now < f.period_end or f.rate_hat is None:
            return False
        self._categorise(f, now)
        return True

    def _categorise(self, f: RapidFlow, now: float) -> None:
        assert f.window is not None and f.rate_hat is not None
        share = self.fair_share(f.ue)
        if share is None:  # capacity gone: keep the window until it comes back
            f.period_end = now + f.rtt
            return
        expected = f.expected_rate
        if f.rate_hat < self.slow_threshold * expected and not f.backlogged:
            f.window = max(f.rate_hat / expected * f.window, 2.0 * f.mss)  # Eq. 5.10
            f.klass = FlowClass.SLOW
            f.released = max(share - f.window / f.rtt, 0.0)  # Eq. 5.11, as a rate
        else:
            f.klass = FlowClass.FAST
            f.released = 0.0
            a_i, z = self.released(f.ue)
            n = len(self.flows_of(f.ue))
            extra = a_i / (n - z) if n > z else 0.0
            f.window = max((share + extra) * f.rtt_min, 2.0 * f.mss)  # Eq. 5.4 + 5.13
        f.period_end = now + period_rtts(f.window, f.mss) * f.rtt


@dataclass
class _Applied:
    window: int | None = None  # last TCP_WINDOW_CLAMP we set
    original_clamp: int | None = None


class RapidController:
    """Drives the allocator from the flows' WAN sockets and applies its decisions.

    Socket work runs in each flow's relay thread (``PepContext.for_flows``): a flow's
    descriptors are only meaningful there. ``lock`` guards the allocator, which relay
    threads, the RNIS consumer and the API all reach.
    """

    def __init__(
        self,
        allocator: RapidAllocator,
        context: PepContext,
        kernel: MeldKernel,
        is_rapid: Callable[[str], bool],
        *,
        min_tick_s: float,
        in_use: Callable[[], bool] = lambda: True,
    ) -> None:
        self.allocator = allocator
        self._context = context
        self._kernel = kernel
        self._is_rapid = is_rapid
        self._in_use = in_use  # some UE in RAPID mode
        self._min_tick = min_tick_s
        self._applied: dict[int, _Applied] = {}
        self.lock = threading.Lock()

    def set_capacity(self, ue: str, rate_Bps: float) -> None:  # noqa: N803
        with self.lock:
            self.allocator.set_capacity(ue, rate_Bps)

    def flow_established(self, flow: Flow, now: float) -> None:
        """In the flow's relay thread: its first window right away (Eq. 5.4)."""
        if self._is_rapid(flow.ue):
            self._drive(flow, now)

    def forget(self, flow: Flow) -> None:
        with self.lock:
            self.allocator.remove(flow.id)
            self._applied.pop(flow.id, None)

    def driving(self) -> bool:
        """Whether a tick has work: flows it drives (or must release), or a UE in RAPID."""
        return bool(self.allocator.flows) or self._in_use()

    def tick(self, now: float) -> None:
        """One controller round over every established flow (from the worker thread)."""
        if not self.driving():
            return  # the flow table is not read (on the core, a copy of every flow's record)
        with self._context.flows.lock:
            flows = [f for f in self._context.flows if f.wan is not None and f.established_at]
        rapid = [f for f in flows if self._is_rapid(f.ue)]
        with self.lock:
            leaving = [
                f for f in flows if f.id in self.allocator.flows and not self._is_rapid(f.ue)
            ]
            for flow_id in set(self.allocator.flows) - {f.id for f in flows}:
                self.allocator.remove(flow_id)
                self._applied.pop(flow_id, None)
        if rapid:
            self._context.for_flows(rapid, lambda f: self._drive(f, now))
        if leaving:
            self._context.for_flows(leaving, self._release)

    def _drive(self, flow: Flow, now: float) -> None:
        """Relay thread: read the WAN socket, step the allocator, apply a new window."""
        if flow.wan is None:
            return
        info = _wan_reading(flow.wan.sock)
        if info is None:
            return
        rtt = max(info["rtt"], self._min_tick)
        rtt_min = max(info["min_rtt"], 1e-5)
        with self.lock:
            if flow.id not in self.allocator.flows:
                self.allocator.add(flow.id, flow.ue, now, mss=info["mss"], rtt_min=rtt_min,
                                   rtt=rtt, bytes_received=info["bytes_received"])  # fmt: skip
                changed = True
            else:
                f = self.allocator.flows[flow.id]
                backlog = _unsent(flow.ran.sock) > (f.window or 0)
                changed = self.allocator.observe(flow.id, now, rtt_min=rtt_min, rtt=rtt,
                                                 bytes_received=info["bytes_received"],
                                                 backlogged=backlog)  # fmt: skip
            f = self.allocator.flows[flow.id]
            window = int(f.window) if f.window is not None else None
            rate = int(f.allocated_rate)
            applied = self._applied.setdefault(flow.id, _Applied())
        if changed and window is not None:
            self._apply(flow, applied, window, rate)

    def _apply(self, flow: Flow, applied: _Applied, window: int, rate: int) -> None:
        assert flow.wan is not None
        try:
            if applied.original_clamp is None:
                applied.original_clamp = flow.wan.sock.getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP
                )
            if window != applied.window:
                flow.wan.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, window)
                applied.window = window
            self._kernel.set_flow_rate(flow.ran.sock, rate)
        except OSError as exc:  # the flow is closing; it leaves the table next
            log.debug("rapid: cannot apply", flow=flow.id, error=str(exc))

    def _release(self, flow: Flow) -> None:
        """Relay thread: the UE left RAPID mode, give the flow its original window back."""
        with self.lock:
            applied = self._applied.pop(flow.id, None)
            self.allocator.remove(flow.id)
        if applied is None or applied.original_clamp is None or flow.wan is None:
            return
        with contextlib.suppress(OSError):
            flow.wan.sock.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, applied.original_clamp
            )
            self._kernel.set_flow_rate(flow.ran.sock, 0)

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return [
                {
                    "flow_id": f.flow_id,
                    "ue": f.ue,
                    "class": f.klass.value,
                    "window_bytes": int(f.window) if f.window is not None else None,
                    "allocated_bps": int(f.allocated_rate * 8),
                    "arrival_bps": int(f.rate_hat * 8) if f.rate_hat is not None else None,
                    "released_bps": int(f.released * 8),
                    "wan_rtt_min_ms": round(f.rtt_min * 1e3, 3),
                    "wan_rtt_ms": round(f.rtt * 1e3, 3),
                }
                for f in self.allocator.flows.values()
            ]


# The head of struct tcp_info (include/uapi/linux/tcp.h) up to tcpi_min_rtt.
_TCP_INFO_NAMES = [
    "state",
    "ca_state",
    "retransmits",
    "probes",
    "backoff",
    "options",
    "wscale",
    "flags",
    "rto",
    "ato",
    "snd_mss",
    "rcv_mss",
    "unacked",
    "sacked",
    "lost",
    "retrans",
    "fackets",
    "last_data_sent",
    "last_ack_sent",
    "last_data_recv",
    "last_ack_recv",
    "pmtu",
    "rcv_ssthresh",
    "rtt",
    "rttvar",
    "snd_ssthresh",
    "snd_cwnd",
    "advmss",
    "reordering",
    "rcv_rtt",
    "rcv_space",
    "total_retrans",
    "pacing_rate",
    "max_pacing_rate",
    "bytes_acked",
    "bytes_received",
    "segs_out",
    "segs_in",
    "notsent_bytes",
    "min_rtt",
]
_TCP_INFO = struct.Struct("=8B" + "I" * 24 + "Q" * 4 + "I" * 4)


def _unsent(sock: socket.socket) -> int:
    """Bytes a RAN-leg socket holds that it has not sent yet (tcpi_notsent_bytes)."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
    except OSError:
        return 0
    values = _TCP_INFO.unpack(raw.ljust(_TCP_INFO.size, b"\0"))
    return int(values[_TCP_INFO_NAMES.index("notsent_bytes")])


def _wan_reading(sock: socket.socket) -> dict[str, Any] | None:
    """The TCP_INFO fields RAPID needs from a WAN-leg socket (seconds, bytes)."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
    except OSError:
        return None
    i = dict(zip(_TCP_INFO_NAMES, _TCP_INFO.unpack(raw.ljust(_TCP_INFO.size, b"\0")), strict=True))
    # A receiving socket's srtt only moves when it sends; its receiver-side estimate
    # (rcv_rtt, from timestamps) follows the data.
    smoothed = i["rcv_rtt"] or i["rtt"]
    return {
        "rtt": smoothed / 1e6,
        "min_rtt": (i["min_rtt"] or i["rtt"]) / 1e6,
        "mss": i["rcv_mss"] or 1448,
        "bytes_received": i["bytes_received"],
    }
