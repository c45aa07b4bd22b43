"""The lab's like-for-like truth for the observer: each TCP sender's own RTT samples.

``sender_rtt.bpf.o`` (``testbed/lab/bpf/``) is a sockops program attached to a cgroup of
its own; sockets created while this process is in that cgroup (``SenderRtt.sockets``)
report the RTT samples TCP's estimator takes (mrtt), with the time of the ACK that gave
them on the observer's clock (``bpf_ktime_get_ns``, CLOCK_MONOTONIC), through
``BPF_SOCK_OPS_RTT_CB``: once per round trip, since this kernel calls it only when
snd_una passes rtt_seq (why not per ACK: ``testbed/lab/bpf/sender_rtt.bpf.c``).
"""

from __future__ import annotations

import bisect
import ctypes
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mec_common.bpf import (
    BPF_CGROUP_SOCK_OPS,
    BPF_TCX_INGRESS,
    RingBuffer,
    link_create,
    obj_get,
)
from mec_l4s.efm import EfmObject


class RttRecord(ctypes.Structure):
    """``struct rtt_record`` of sender_rtt.bpf.c."""

    _fields_ = (
        ("t_ns", ctypes.c_uint64),
        ("local_addr", ctypes.c_uint32),
        ("remote_addr", ctypes.c_uint32),
        ("local_port", ctypes.c_uint16),
        ("remote_port", ctypes.c_uint16),
        ("mrtt_us", ctypes.c_uint32),
        ("srtt_us", ctypes.c_uint32),
        ("ack_wait_us", ctypes.c_uint32),
    )


COUNTERS = ("sockets", "samples", "ring_full")  # enum rtt_counter
ACK_WAIT_UNKNOWN = 0xFFFFFFFF


@dataclass(frozen=True)
class TcpRtt:
    """One RTT sample of a sender: its local and remote endpoint, 'a.b.c.d:port'."""

    t_ns: int
    local: str
    remote: str
    mrtt_ms: float
    srtt_ms: float
    ack_wait_ms: float | None  # from the ACK's arrival at the interface (watch_acks) to TCP

    @property
    def wire_ms(self) -> float | None:
        """mrtt less the time the ACK waited inside the sender: the RTT on the wire."""
        return None if self.ack_wait_ms is None else self.mrtt_ms - self.ack_wait_ms

    @classmethod
    def decode(cls, raw: bytes) -> TcpRtt:
        r = RttRecord.from_buffer_copy(raw)

        def ip(addr: int) -> str:
            return socket.inet_ntoa(addr.to_bytes(4, "little"))

        return cls(
            t_ns=r.t_ns,
            local=f"{ip(r.local_addr)}:{r.local_port}",
            remote=f"{ip(r.remote_addr)}:{r.remote_port}",
            mrtt_ms=r.mrtt_us / 1000,
            srtt_ms=r.srtt_us / 1000,
            ack_wait_ms=None if r.ack_wait_us == ACK_WAIT_UNKNOWN else r.ack_wait_us / 1000,
        )


def cgroup2_root() -> Path:
    """Where the unified (v2) cgroup hierarchy is mounted."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if fields[2] == "cgroup2":
            return Path(fields[1])
    raise RuntimeError("no cgroup2 hierarchy mounted: a sockops program needs one")


def own_cgroup() -> str:
    """This process's cgroup in the v2 hierarchy (the '0::' line), e.g. '/'."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise RuntimeError("this process is in no v2 cgroup")


class SenderRtt:
    """``sender_rtt.bpf.o`` loaded and attached to a fresh cgroup (removed at close)."""

    def __init__(self, obj: EfmObject, cgroup: Path) -> None:
        self.obj = obj
        self.cgroup = cgroup
        self.ring = RingBuffer(obj.maps["rtt_samples"])
        self._link = -1

    @classmethod
    def load(cls, obj: Path, name: str) -> SenderRtt:
        cgroup = cgroup2_root() / name
        cgroup.mkdir()
        try:
            truth = cls(EfmObject.load(obj, name), cgroup)
        except BaseException:
            cgroup.rmdir()
            raise
        try:
            truth._attach()
        except BaseException:
            truth.close()
            raise
        return truth

    def _attach(self) -> None:
        prog = obj_get(str(self.obj.pin_dir / "sender_sockops"))
        cg = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._link = link_create(prog, cg, BPF_CGROUP_SOCK_OPS)
        finally:
            os.close(cg)
            os.close(prog)

    def watch_acks(self, ifname: str, netns: str | None = None) -> None:
        """Note when ACKs arrive on the senders' interface ``ifname`` (tcx ingress), so
        each sample also tells how long TCP took to take it after its ACK arrived."""
        self.obj.attach("sender_ack_in", BPF_TCX_INGRESS, ifname, netns)

    @contextmanager
    def sockets(self) -> Iterator[None]:
        """TCP sockets created in the block (by any thread of this process) are measured:
        the process is in the cgroup for the block (a socket keeps the cgroup it was
        created in; an accepted one, its listener's)."""
        home = cgroup2_root() / own_cgroup().lstrip("/")
        (self.cgroup / "cgroup.procs").write_text(str(os.getpid()))
        try:
            yield
        finally:
            (home / "cgroup.procs").write_text(str(os.getpid()))

    def poll(self) -> list[TcpRtt]:
        return [TcpRtt.decode(raw) for raw in self.ring.drain()]

    def counters(self) -> dict[str, int]:
        m = self.obj.maps["rtt_counters"]
        return {name: m.lookup_percpu_sum(ctypes.c_uint32(i)) for i, name in enumerate(COUNTERS)}

    def close(self) -> None:
        if self._link >= 0:
            os.close(self._link)
            self._link = -1
        self.ring.close()
        self.obj.close()
        self.cgroup.rmdir()


def sender_rtt_name() -> str:
    """A pin and cgroup name no other run uses."""
    return f"mts-rtt-{secrets.token_hex(3)}"


EXCESS_MS = 5.0  # a TCP sample this far above TCP's smoothed RTT is an "excess" round


def in_excess(s: TcpRtt) -> bool:
    return s.mrtt_ms > s.srtt_ms + EXCESS_MS


def coincident_share(mine: list[int], other: list[int], within_ns: int) -> float:
    """The share of times in ``mine`` with a time of ``other`` (sorted) within ``within_ns``."""
    if not mine:
        return 0.0
    near = 0
    for t in mine:
        i = bisect.bisect_left(other, t - within_ns)
        near += i < len(other) and other[i] <= t + within_ns
    return near / len(mine)


class TcpSeries:
    """One sender's RTT samples, in time order."""

    def __init__(self, samples: list[TcpRtt]) -> None:
        self.samples = sorted(samples, key=lambda s: s.t_ns)
        self.times = [s.t_ns for s in self.samples]

    def window(self, t_ns: int, rtt_ms: float) -> list[TcpRtt]:
        """The samples TCP took during one observer sample's own round trip, [t − rtt, t]."""
        lo = bisect.bisect_left(self.times, t_ns - round(rtt_ms * 1e6))
        hi = bisect.bisect_right(self.times, t_ns)
        return self.samples[lo:hi]

    def round_to_round(self) -> list[float]:
        """TCP against itself one round trip later: mrtt minus the previous mrtt."""
        return [b.mrtt_ms - a.mrtt_ms for a, b in zip(self.samples, self.samples[1:], strict=False)]
