"""SIGMA in the kernel: register it, read the grant feed, its counters and a flow's state.

``Sigma.load`` runs the suite's struct_ops loader (``build/bin/meld-loader``, from
``pep/bpf/loader.c``), which registers ``sigma_reno`` and ``sigma_cubic`` (suffixed per
instance: the kernel's list is global) through BPF links pinned in ``<pin root>/<instance>``
and pins the maps there. The UE's modem driver (the RAN emulator's grant feed, a
bearer's ``grant_feed`` = that directory) then writes every TTI's grant into
``sigma_grant``; ``read_grant`` is the user-space read API of that map. ``close`` unpins
everything, which unregisters both congestion controls.

The ctypes layouts mirror ``ue/bpf/sigma.h``; a test checks them against the object's BTF.
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from mec_common.bpf import (
    BpfMap,
    BpfProgram,
    StructOpsUnavailableError,
    ipv4_key,
    register_struct_ops,
    remove_pins,
    unregister_struct_ops,
)

BASE_NAMES = ("sigma_reno", "sigma_cubic")
MCS_MAX, PRB_MAX = 28, 275  # SIGMA_MCS_MAX, SIGMA_PRB_MAX
RAT_LTE, RAT_NR = 0, 1
_U32, _U64 = ctypes.c_uint32, ctypes.c_uint64


class Phase(enum.IntEnum):
    FALLBACK = 0
    MAX_START = 1
    PROPORTIONAL = 2
    SAFE_INCREASE = 3


class Verdict(enum.IntEnum):
    OK = 0
    NONE = 1
    STALE = 2
    INVALID = 3
    NO_RTT = 4


class Grant(ctypes.Structure):
    """struct sigma_grant: one TTI of the UE's cell uplink, as its DCI decoder reads it."""

    _fields_ = (
        ("tti_start_ns", _U64),  # CLOCK_MONOTONIC
        ("tti", _U64),
        ("tti_ns", _U32),
        ("p_cell", _U32),
        ("n_users", _U32),
        ("p_unused", _U32),
        ("p_current", _U32),
        ("mcs", _U32),
        ("rat", _U32),
        ("buffer_bytes", _U32),
    )

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name, *_ in self._fields_}


class SigmaConfig(ctypes.Structure):
    _fields_ = (("stale_ns", _U64), ("min_cwnd", _U32), ("pad", _U32))


def _all(ctype: type[ctypes._SimpleCData[int]], names: str) -> tuple[tuple[str, type], ...]:
    return tuple((name, ctype) for name in names.split())


class Counters(ctypes.Structure):
    _fields_ = _all(
        _U64,
        "acks sigma_acks fallback_acks no_grant stale invalid max_starts proportional losses",
    )

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name, *_ in self._fields_}


class Flow(ctypes.Structure):
    """struct sigma_flow: one connection's SIGMA state (segments, µs, PRBs)."""

    _fields_ = _all(
        _U32,
        "phase iw_segs acked_segs rtt_min_us rtt_last_us w_max_segs p_max safe_milli cuts "
        "cut_cwnd cut_w_max_segs cut_rtt_min_us cut_rtt_last_us pacing_Bps",
    )


class CapacityArgs(ctypes.Structure):
    _fields_ = (
        ("grant", Grant),
        ("now_ns", _U64),
        ("stale_ns", _U64),
        ("has_grant", _U32),
        ("rtt_min_us", _U32),
        ("mss", _U32),
        ("verdict", _U32),
        ("p_max", _U32),
        ("tbs_bytes", _U32),
        ("c_max_Bps", _U64),
        ("w_max_bytes", _U64),
        ("w_max_segs", _U32),
        ("pad", _U32),
    )


LAYOUTS: dict[str, type[ctypes.Structure]] = {
    "sigma_grant": Grant,
    "sigma_config": SigmaConfig,
    "sigma_counters": Counters,
    "sigma_flow": Flow,
    "capacity_args": CapacityArgs,
}
_MAPS = {
    "sigma_grant": Grant,
    "sigma_tbs": _U32,
    "sigma_config": SigmaConfig,
    "sigma_counters": Counters,
    "sigma_flow": Flow,
}


def ca_names(instance: str) -> dict[str, str]:
    """Congestion control name per base name: unsuffixed for the default instance."""
    if instance in ("", "default"):
        return {base: base for base in BASE_NAMES}
    tag = hashlib.sha256(instance.encode()).hexdigest()[:4]  # within TCP_CA_NAME_MAX
    return {"sigma_reno": f"sigma_r_{tag}", "sigma_cubic": f"sigma_c_{tag}"}


def build_paths() -> tuple[Path, Path]:
    """The struct_ops loader and SIGMA's object in the repo's build/ (``make build``)."""
    root = Path(os.environ.get("MTS_BUILD_DIR", Path(__file__).resolve().parents[3] / "build"))
    return root / "bin" / "meld-loader", root / "bpf" / "sigma.bpf.o"


def ensure_bpffs(pin_root: Path) -> None:
    """Mount a bpffs on pin_root unless one is there. A pin root outside /sys/fs/bpf is
    how a modem driver in another mount namespace sees the maps: `ip netns exec` (the
    testbed's emulator runs under it) mounts a fresh /sys, without /sys/fs/bpf."""
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    if any(line.split()[1:3] == [str(pin_root), "bpf"] for line in mounts if line):
        return
    if pin_root.parent == Path("/sys/fs/bpf") and Path("/sys/fs/bpf").is_mount():
        return  # a directory on the system's bpffs
    pin_root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "bpf", "bpf", str(pin_root)], check=True, timeout=10)


@dataclass
class Sigma:
    """The registered SIGMA congestion controls of one instance and their maps."""

    pin_dir: Path
    names: dict[str, str]

    def __post_init__(self) -> None:
        self._maps: dict[str, BpfMap] = {}
        try:
            for name in _MAPS:
                self._maps[name] = BpfMap(str(self.pin_dir / name))
            self._capacity = BpfProgram(str(self.pin_dir / "prog_sigma_capacity"))
        except OSError:
            self.detach()
            raise
        for name, layout in _MAPS.items():
            if self._maps[name].value_size != ctypes.sizeof(layout):
                self.detach()
                raise StructOpsUnavailableError(
                    f"map {name} holds {self._maps[name].value_size} B values, Python expects "
                    f"{ctypes.sizeof(layout)} B: rebuild the BPF object"
                )

    @classmethod
    def load(cls, pin_root: Path, instance: str, build: tuple[Path, Path] | None = None) -> Sigma:
        """Register sigma_reno/sigma_cubic (suffixed per instance), maps in pin_root/instance."""
        loader, obj = build or build_paths()
        pin_dir = pin_root / instance
        ensure_bpffs(pin_root)
        registered = register_struct_ops(loader, obj, pin_dir, ca_names(instance))
        try:
            return cls(pin_dir, registered)
        except (OSError, StructOpsUnavailableError):
            remove_pins(pin_dir)
            raise

    def close(self) -> None:
        """Unregister (unpin the links); connections keep their CC until they close."""
        self.detach()
        unregister_struct_ops(self.pin_dir, self.names.values())

    def detach(self) -> None:
        """Close this process's map descriptors; SIGMA stays registered."""
        for m in self._maps.values():
            m.close()
        if hasattr(self, "_capacity"):
            self._capacity.close()

    @property
    def reno(self) -> str:
        return self.names["sigma_reno"]

    @property
    def cubic(self) -> str:
        return self.names["sigma_cubic"]

    # --- the grant feed: the user-space read API, and writes for tests and tools -----------

    def read_grant(self, ue: str) -> Grant | None:
        """The last grant the modem driver wrote for UE ``ue`` (IPv4), or None."""
        return self._maps["sigma_grant"].lookup(ipv4_key(ue), Grant)

    def write_grant(self, ue: str, grant: Grant) -> None:
        """Write a grant as a modem driver does (the RAN emulator writes every TTI)."""
        self._maps["sigma_grant"].update(ipv4_key(ue), grant)

    def forget_grant(self, ue: str) -> None:
        self._maps["sigma_grant"].delete(ipv4_key(ue))

    def tbs_bytes(self, rat: int, mcs: int, prb: int) -> int:
        """TBS(MCS, PRBs) as the modem driver filled the table (0: not filled)."""
        index = (rat * (MCS_MAX + 1) + mcs) * (PRB_MAX + 1) + prb
        value = self._maps["sigma_tbs"].lookup(_U32(index), _U32)
        return int(value.value) if value is not None else 0

    def set_tbs_bytes(self, rat: int, mcs: int, prb: int, tbs: int) -> None:
        index = (rat * (MCS_MAX + 1) + mcs) * (PRB_MAX + 1) + prb
        self._maps["sigma_tbs"].update(_U32(index), _U32(tbs))

    # --- knobs, counters, a connection --------------------------------------------------------

    def configure(self, stale_ms: float = 20, min_cwnd: int = 2) -> None:
        cfg = SigmaConfig(stale_ns=int(stale_ms * 1e6), min_cwnd=min_cwnd)
        self._maps["sigma_config"].update(_U32(0), cfg)

    def counters(self, ue: str) -> Counters | None:
        return self._maps["sigma_counters"].lookup(ipv4_key(ue), Counters)

    def flow(self, sock: socket.socket) -> Flow | None:
        """SIGMA's state of a connection (by its socket), None before its first decision."""
        return self._maps["sigma_flow"].lookup(ctypes.c_int(sock.fileno()), Flow)

    def capacity(self, args: CapacityArgs) -> CapacityArgs:
        """Eqs. 3.7-3.9 alone, in the kernel (the test program): fills args' outputs."""
        self._capacity.run(args)
        return args
