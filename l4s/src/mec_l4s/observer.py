"""The on-path observer: ``efm_observer.bpf.o`` on the MEC host's interfaces, and the
per-flow RTT figures built from its samples.

The kernel program emits one record per RTT sample (``struct obs_sample``) into a ring
buffer; ``Observer.poll`` drains it into a ``FlowTable``: per flow, per method (spin or
delay, raw or filtered) and per measurement (end to end, the client's side of the
observer, the server's side), the latest sample and a window of recent ones for
percentiles. Both tables are capped: the kernel's is an LRU hash of 16,384 flows, this
one evicts the flow seen least recently beyond ``max_flows``.
"""

from __future__ import annotations

import collections
import ctypes
import enum
import socket
import statistics
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address
from pathlib import Path

from mec_common.bpf import BPF_TCX_EGRESS, BPF_TCX_INGRESS, RingBuffer
from mec_common.bus.flowrtt import MAX_NEW_SAMPLES, FlowRttSummary, Rtt, RulesRtt
from mec_l4s.efm import EfmObject

DELAY_CUTOFF_MS = 225.0  # Spindump's spindump_delaybit_tmax (research 001 §3.3)
MIN_GAP_PCT = 50  # filtered mode: an edge sooner than half the RTT is not believed
WINDOW = 512  # samples kept per series for percentiles


class ObsKey(ctypes.Structure):
    _fields_ = (
        ("addr_a", ctypes.c_uint32),
        ("addr_b", ctypes.c_uint32),
        ("port_a", ctypes.c_uint16),
        ("port_b", ctypes.c_uint16),
    )


class ObsSample(ctypes.Structure):
    _fields_ = (
        ("t_ns", ctypes.c_uint64),
        ("key", ObsKey),
        ("rtt_ns", ctypes.c_uint32),
        ("kind", ctypes.c_uint8),
        ("mode", ctypes.c_uint8),
        ("dir", ctypes.c_uint8),
        ("client_dir", ctypes.c_uint8),
    )


class ObsConfig(ctypes.Structure):
    _fields_ = (
        ("delay_cutoff_ns", ctypes.c_uint64),
        ("min_gap_pct", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class Kind(enum.IntEnum):
    """``enum obs_kind``."""

    SPIN_E2E = 0
    SPIN_HALF = 1
    DELAY_E2E = 2
    DELAY_HALF = 3

    @property
    def method(self) -> str:
        return "spin" if self in (Kind.SPIN_E2E, Kind.SPIN_HALF) else "delay"


class Rules(enum.IntEnum):
    """The observer's two rule sets, applied to the same packets side by side (``enum
    obs_mode`` of efm_observer.bpf.c): RAW is Spindump's, as the research measured; FILTERED
    adds the reordering guard and the minimum-gap rule."""

    RAW = 0
    FILTERED = 1


class ObsCounter(enum.IntEnum):
    """``enum obs_counter``."""

    PACKETS = 0
    TCP = 1
    MALFORMED = 2
    FLOWS = 3
    NO_FLOW = 4
    DISAGREED = 5
    SAMPLES = 6
    RING_FULL = 7
    REORDERED = 8
    TOO_SOON = 9
    RUN_CONTINUED = 10


def _endpoint(addr: int, port: int) -> str:
    """An address and port as the kernel stored them (network order) -> 'a.b.c.d:port'."""
    return f"{socket.inet_ntoa(addr.to_bytes(4, 'little'))}:{socket.ntohs(port)}"


@dataclass(frozen=True)
class Sample:
    t_ns: int
    client: str
    server: str
    rtt_ms: float
    kind: Kind
    rules: Rules
    from_client: bool

    @property
    def measurement(self) -> str:
        """'e2e', or which side of the observer a half RTT covers."""
        if self.kind in (Kind.SPIN_E2E, Kind.DELAY_E2E):
            return "e2e"
        # the other direction's mark came back from this packet's sender: its side
        return "client_side" if self.from_client else "server_side"

    @classmethod
    def decode(cls, raw: bytes) -> Sample:
        s = ObsSample.from_buffer_copy(raw)
        a = _endpoint(s.key.addr_a, s.key.port_a)
        b = _endpoint(s.key.addr_b, s.key.port_b)
        client, server = (a, b) if s.client_dir == 0 else (b, a)
        return cls(
            t_ns=s.t_ns,
            client=client,
            server=server,
            rtt_ms=s.rtt_ns / 1e6,
            kind=Kind(s.kind),
            rules=Rules(s.mode),
            from_client=s.dir == s.client_dir,
        )


@dataclass
class Series:
    """One measurement of one method: the latest sample and a window of recent ones."""

    count: int = 0
    last_ms: float = 0.0
    window: collections.deque[float] = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW)
    )

    def add(self, rtt_ms: float) -> None:
        self.count += 1
        self.last_ms = rtt_ms
        self.window.append(rtt_ms)

    def percentiles(self) -> dict[str, float]:
        """p50, p90, p99 of the window (inclusive method: never beyond the extremes)."""
        data = sorted(self.window)
        if len(data) == 1:
            return {"p50": data[0], "p90": data[0], "p99": data[0]}
        q = statistics.quantiles(data, n=100, method="inclusive")
        return {"p50": q[49], "p90": q[89], "p99": q[98]}


def _new_samples() -> dict[Rules, collections.deque[float]]:
    return {rules: collections.deque(maxlen=MAX_NEW_SAMPLES) for rules in Rules}


@dataclass
class FlowRtt:
    client: str
    server: str
    method: str
    last_t_ns: int = 0
    series: dict[tuple[Rules, str], Series] = field(default_factory=dict)
    # end-to-end samples not yet in a feed message (FlowTable.take_updated)
    new_e2e: dict[Rules, collections.deque[float]] = field(default_factory=_new_samples)

    @property
    def flow_id(self) -> str:
        return f"{self.client}-{self.server}"

    def rtt(self, rules: Rules, measurement: str) -> Rtt | None:
        series = self.series.get((rules, measurement))
        if series is None or not series.count:
            return None
        p = series.percentiles()
        return Rtt(
            samples=series.count,
            current_ms=series.last_ms,
            p50_ms=p["p50"],
            p90_ms=p["p90"],
            p99_ms=p["p99"],
        )

    def under(self, rules: Rules) -> RulesRtt:
        return RulesRtt(
            e2e=self.rtt(rules, "e2e"),
            client_side=self.rtt(rules, "client_side"),
            server_side=self.rtt(rules, "server_side"),
        )

    def summary(self, ts_ns: int) -> FlowRttSummary:
        """The feed's message; takes the new samples (they go out once)."""
        client, client_port = self.client.rsplit(":", 1)
        server, server_port = self.server.rsplit(":", 1)
        new = {rules: list(self.new_e2e[rules]) for rules in Rules}
        for pending in self.new_e2e.values():
            pending.clear()
        return FlowRttSummary(
            flow_id=self.flow_id,
            client=IPv4Address(client),
            client_port=int(client_port),
            server=IPv4Address(server),
            server_port=int(server_port),
            method="spin" if self.method == "spin" else "delay",
            ts_ns=ts_ns,
            raw=self.under(Rules.RAW),
            filtered=self.under(Rules.FILTERED),
            new_raw_e2e_ms=new[Rules.RAW],
            new_filtered_e2e_ms=new[Rules.FILTERED],
        )


class FlowTable:
    """Per-flow RTT from the observer's samples; at most ``max_flows`` flows."""

    def __init__(self, max_flows: int = 4096) -> None:
        self.max_flows = max_flows
        self._flows: collections.OrderedDict[str, FlowRtt] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._updated: set[str] = set()  # flows with samples since take_updated
        self.evicted = 0

    def add(self, samples: Iterable[Sample]) -> None:
        with self._lock:
            for s in samples:
                fid = f"{s.client}-{s.server}"
                flow = self._flows.get(fid)
                if flow is None:
                    flow = self._flows[fid] = FlowRtt(s.client, s.server, s.kind.method)
                    if len(self._flows) > self.max_flows:
                        self._updated.discard(self._flows.popitem(last=False)[0])
                        self.evicted += 1
                else:
                    self._flows.move_to_end(fid)
                flow.last_t_ns = s.t_ns
                flow.series.setdefault((s.rules, s.measurement), Series()).add(s.rtt_ms)
                if s.measurement == "e2e":
                    flow.new_e2e[s.rules].append(s.rtt_ms)
                self._updated.add(fid)

    def take_updated(self, ts_ns: int) -> list[FlowRttSummary]:
        """A summary of every flow with samples since the previous call."""
        with self._lock:
            updated, self._updated = self._updated, set()
            return [self._flows[fid].summary(ts_ns) for fid in updated if fid in self._flows]

    def flows(self) -> list[FlowRtt]:
        with self._lock:
            return list(self._flows.values())

    def get(self, flow_id: str) -> FlowRtt | None:
        with self._lock:
            return self._flows.get(flow_id)


class Observer:
    """``efm_observer.bpf.o`` loaded once, attached to the interfaces of one namespace."""

    def __init__(self, obj: EfmObject) -> None:
        self.obj = obj
        self.ring = RingBuffer(obj.maps["obs_samples"])

    @classmethod
    def load(cls, obj: Path, name: str) -> Observer:
        return cls(EfmObject.load(obj, name))

    def configure(
        self, delay_cutoff_ms: float = DELAY_CUTOFF_MS, min_gap_pct: int = MIN_GAP_PCT
    ) -> None:
        if delay_cutoff_ms <= 0 or not 0 <= min_gap_pct <= 100:
            raise ValueError("delay_cutoff_ms must be > 0 and min_gap_pct in 0..100")
        cfg = ObsConfig(delay_cutoff_ns=round(delay_cutoff_ms * 1e6), min_gap_pct=min_gap_pct)
        self.obj.maps["obs_config"].update(ctypes.c_uint32(0), cfg)

    def attach(self, ifname: str, netns: str | None = None, *, egress: bool = False) -> None:
        """Observe the packets arriving on ``ifname`` (and leaving it, with ``egress``)."""
        self.obj.attach("efm_observe", BPF_TCX_INGRESS, ifname, netns)
        if egress:
            self.obj.attach("efm_observe", BPF_TCX_EGRESS, ifname, netns)

    def poll(self) -> list[Sample]:
        return [Sample.decode(raw) for raw in self.ring.drain()]

    def counters(self) -> dict[str, int]:
        m = self.obj.maps["obs_counters"]
        return {c.name.lower(): m.lookup_percpu_sum(ctypes.c_uint32(c)) for c in ObsCounter}

    def kernel_flows(self) -> int:
        """Flows in the kernel's table now (at most its cap)."""
        return sum(1 for _ in self.obj.maps["obs_flows"].keys(ObsKey))

    def close(self) -> None:
        self.ring.close()
        self.obj.close()
