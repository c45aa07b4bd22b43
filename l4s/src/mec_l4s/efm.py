"""Load the EFM BPF objects (``l4s/bpf/``), attach them to interfaces, read their maps.

``bpftool prog loadall`` loads an object and pins its programs and maps under a fresh
directory of the BPF filesystem; programs are attached with tcx links whose fds this
process holds, so they go away with it (no tc filter left behind by a crash). One
loaded object serves the interfaces of one network namespace (its map of L3
interfaces is keyed by ifindex, which is per namespace).

The ctypes structures mirror ``l4s/bpf/efm.h``; ``test_efm_layouts`` checks them
against the built objects' BTF.
"""

from __future__ import annotations

import ctypes
import enum
import fcntl
import os
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from mec_common.bpf import BPF_TCX_EGRESS, BPF_TCX_INGRESS, BpfMap, obj_get, tcx_attach
from mec_common.netns import in_netns

T = TypeVar("T")

BPFFS = Path("/sys/fs/bpf")
SIOCGIFHWADDR = 0x8927
ARPHRD_ETHER = 1


class Technique(enum.IntEnum):
    """``enum efm_technique``: what the endpoints put in the time bit.

    DELAY is the research's delay bit (one marked segment per sample: GSO/TSO off on the
    marking interfaces); DELAY_RUN keeps GSO/TSO and takes a run of marked segments of one
    super-packet as one sample (``l4s/bpf/efm.h``; not the research's)."""

    OFF = 0
    SPIN = 1
    DELAY = 2
    DELAY_RUN = 3

    @property
    def keeps_gso(self) -> bool:
        """Whether ``Marker.attach`` leaves GSO on by default: only for DELAY_RUN. The
        research's delay bit needs GSO off; the spin bit would be right with GSO on
        (``make bench-l4s`` measures it so), but the lab's beds keep the research's
        offloads for it: with GSO on at the sender, this bed's Prague flow got a third of
        its throughput beside CUBIC (docs/l4s.md)."""
        return self is Technique.DELAY_RUN


class Role(enum.IntEnum):
    UNMANAGED = 0
    CLIENT = 1
    SERVER = 2


class MarkerCounter(enum.IntEnum):
    """``enum efm_counter``: the marker's per-CPU counters (segments)."""

    SEGMENTS_OUT = 0
    HANDSHAKE = 1
    SPIN_SET = 2
    SAMPLES_REFLECTED = 3
    SAMPLES_GENERATED = 4
    SACK_HELD = 5
    GSO_MARKED = 6
    SAMPLES_IN = 7
    UNPARSED = 8
    ECT1 = 9
    SPIN_GUARDED = 10
    RUN_CONTINUED = 11


class EfmConfig(ctypes.Structure):
    _fields_ = (
        ("technique", ctypes.c_uint32),
        ("t_max_us", ctypes.c_uint32),
        ("dynamic_t_max", ctypes.c_uint32),
        ("ect1", ctypes.c_uint32),
        ("spin_guard", ctypes.c_uint32),
    )


class EfmRun(ctypes.Structure):
    _fields_ = (
        ("active", ctypes.c_uint32),
        ("ack", ctypes.c_uint32),
        ("end", ctypes.c_uint32),
        ("parity", ctypes.c_uint32),
    )


class EfmOrder(ctypes.Structure):
    """``struct efm_order``: the spin guard's view of the segments received."""

    _fields_ = (
        ("seen", ctypes.c_uint32),
        ("next", ctypes.c_uint32),
        ("hi_ack", ctypes.c_uint32),
        ("ooo_start", ctypes.c_uint32),
        ("ooo_end", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class EfmSock(ctypes.Structure):
    _fields_ = (
        ("ds_time_ns", ctypes.c_uint64),
        ("edge_ns", ctypes.c_uint64),
        ("role", ctypes.c_uint32),
        ("spin", ctypes.c_uint32),
        ("sample_pending", ctypes.c_uint32),
        ("order", EfmOrder),
        ("run_in", EfmRun),
        ("parity_out", ctypes.c_uint32),
        ("base_rtt_us", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


T_MAX_MS = 100  # research 001 §3.2: "the developers' suggested specifics"


def maybe_in_netns(netns: str | None, fn: Callable[[], T]) -> T:
    """``fn()`` in namespace ``netns``, or right here if None."""
    return fn() if netns is None else in_netns(netns, fn)


def link_is_ethernet(ifname: str) -> bool:
    """True for an Ethernet device (veth), False for one without a link layer (TUN)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16s16x", ifname.encode())
        family = struct.unpack_from("16xH", fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, req))[0]
    return bool(family == ARPHRD_ETHER)


class EfmObject:
    """One loaded BPF object: its pinned maps and programs and the links this process holds."""

    def __init__(self, pin_dir: Path) -> None:
        self.pin_dir = pin_dir
        self._links: list[int] = []
        self.maps = {p.name: BpfMap(str(p)) for p in sorted((pin_dir / "maps").iterdir())}

    @classmethod
    def load(cls, obj: Path, name: str) -> EfmObject:
        """Load ``obj`` and pin it under ``/sys/fs/bpf/<name>`` (which must not exist)."""
        pin_dir = BPFFS / name
        if pin_dir.exists():
            raise FileExistsError(f"{pin_dir} exists: another instance uses this name")
        maps = pin_dir / "maps"
        done = subprocess.run(
            ["bpftool", "prog", "loadall", str(obj), str(pin_dir), "pinmaps", str(maps)],
            capture_output=True,
            text=True,
            timeout=300,  # bpftool waited over 60 s on this machine at load 20
        )
        if done.returncode != 0:
            shutil.rmtree(pin_dir, ignore_errors=True)
            lines = [ln for ln in done.stderr.splitlines() if ln.strip()][-5:]
            raise RuntimeError(f"bpftool loadall {obj}: " + " | ".join(lines))
        return cls(pin_dir)

    def attach(self, prog: str, attach_type: int, ifname: str, netns: str | None = None) -> None:
        """Attach pinned program ``prog`` to ``ifname`` (tcx ingress or egress) in ``netns``."""
        prog_fd = obj_get(str(self.pin_dir / prog))
        try:

            def link() -> tuple[int, int, bool]:
                ifindex = socket.if_nametoindex(ifname)
                return ifindex, tcx_attach(prog_fd, ifindex, attach_type), link_is_ethernet(ifname)

            ifindex, link_fd, ethernet = maybe_in_netns(netns, link)
        finally:
            os.close(prog_fd)
        self._links.append(link_fd)
        l3 = self.maps.get("efm_l3_ifaces") or self.maps.get("obs_l3_ifaces")
        if l3 is not None and not ethernet:
            l3.update(ctypes.c_uint32(ifindex), ctypes.c_uint32(1))

    def close(self) -> None:
        """Detach every program this process attached and remove the pins."""
        for fd in self._links:
            os.close(fd)
        self._links.clear()
        for m in self.maps.values():
            m.close()
        shutil.rmtree(self.pin_dir, ignore_errors=True)


class Marker:
    """The endpoint marker (``efm_marker.bpf.o``) on one namespace's interfaces."""

    def __init__(self, obj: EfmObject) -> None:
        self.obj = obj
        self.technique = Technique.OFF

    @classmethod
    def load(cls, obj: Path, name: str) -> Marker:
        return cls(EfmObject.load(obj, name))

    def configure(
        self,
        technique: Technique,
        t_max_ms: float = T_MAX_MS,
        *,
        dynamic_t_max: bool = False,
        ect1: bool = False,
        spin_guard: bool = False,
    ) -> None:
        """``ect1``: send ECN-capable packets as ECT(1) (the sender of an L4S flow).
        ``spin_guard``: follow a received spin value only from a segment that brings
        something new, is not old and is not the first beyond a hole (``efm_follows`` in
        ``efm_packet.h``: RFC 9000 §17.4's rule with TCP's numbers), and a new value no
        sooner than 7/8 of the path's base RTT after the endpoint's own last edge
        (``spin_follows``), so neither a reordered segment nor one that overtook others
        moves the endpoint's wave; off by default, as in the research."""
        if t_max_ms <= 0:
            raise ValueError(f"t_max_ms must be > 0, got {t_max_ms}")
        cfg = EfmConfig(
            technique=int(technique),
            t_max_us=round(t_max_ms * 1000),
            dynamic_t_max=int(dynamic_t_max),
            ect1=int(ect1),
            spin_guard=int(spin_guard),
        )
        self.obj.maps["efm_config"].update(ctypes.c_uint32(0), cfg)
        self.technique = technique

    def attach(self, ifname: str, netns: str | None = None, *, gso_off: bool | None = None) -> None:
        """Mark the segments leaving ``ifname`` and read those arriving on it.

        ``gso_off``: one segment per skb on the interface (gso_max_segs 1), so that the
        research's delay sample stays on one segment (GSO would copy it to each; see
        efm_marker.bpf.c). None (the default): on for every technique but
        ``Technique.DELAY_RUN`` (``Technique.keeps_gso``); configure before attaching.
        """
        if gso_off is None:
            gso_off = not self.technique.keeps_gso
        if gso_off:
            cmd = ["ip", "link", "set", "dev", ifname, "gso_max_segs", "1"]
            if netns is not None:
                cmd[1:1] = ["-n", netns]
            subprocess.run(cmd, check=True, capture_output=True, timeout=30)
        self.obj.attach("efm_out", BPF_TCX_EGRESS, ifname, netns)
        self.obj.attach("efm_in", BPF_TCX_INGRESS, ifname, netns)

    def counters(self) -> dict[str, int]:
        m = self.obj.maps["efm_counters"]
        return {c.name.lower(): m.lookup_percpu_sum(ctypes.c_uint32(c)) for c in MarkerCounter}

    def close(self) -> None:
        self.obj.close()
