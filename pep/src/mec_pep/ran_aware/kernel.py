"""The MELD/RAPID congestion control in the kernel: register, feed, read, unregister.

``MeldKernel.load`` runs the C loader (``meld-loader``), which registers ``meld_reno`` and
``meld_cubic`` (suffixed per PEP instance: the kernel's list is global) through BPF links
pinned under ``<pin root>/<instance>/``, and pins the maps there. Python then opens the
pinned maps and talks to them with bpf(2) directly (``bpf.py``). ``close`` unpins
everything, which unregisters the congestion controls; ``load`` first removes what a
crashed predecessor left behind.

The ctypes layouts below mirror ``pep/bpf/meld.h``; a test checks them against the BTF
of the built object.
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from mec_common.bpf import (
    BpfMap,
    BpfProgram,
    RingBuffer,
    StructOpsUnavailableError,
    register_struct_ops,
    remove_pins,
    unregister_struct_ops,
)
from mec_common.bpf import ipv4_key as ue_key
from mec_common.logging import get_logger

log = get_logger(__name__)

BASE_NAMES = ("meld_reno", "meld_cubic")
CA_NAME_MAX = 15  # TCP_CA_NAME_MAX - 1


class CcaMode(enum.IntEnum):
    """MELD/RAPID's congestion-control mode of a flow: the twin of ``enum meld_mode`` (meld.h)."""

    OFF = 0
    MELD_DE = 1
    MELD_ME = 2
    RAPID = 3
    MELD_OVERFLOW = 4  # ours: congestion iff the RLC buffer was full while the data was out
    IGNORE_LOSS = 5  # every loss kept from the growth function: the goodput upper bound

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @classmethod
    def parse(cls, label: str) -> CcaMode:
        try:
            return cls[label.upper().replace("-", "_")]
        except KeyError:
            choices = ", ".join(m.label for m in cls)
            raise ValueError(f"unknown mode {label!r} (one of {choices})") from None


class Verdict(enum.IntEnum):
    OFF = 0
    NO_DATA = 1
    STALE = 2
    NOTIFY = 3
    SUPPRESS = 4
    RAPID = 5


class UeRadio(ctypes.Structure):
    _fields_ = (
        ("observed_ns", ctypes.c_uint64),
        ("capacity_Bps", ctypes.c_uint64),
        ("d_tbs", ctypes.c_uint32),
        ("txq_bytes", ctypes.c_uint32),
        ("q_th_bytes", ctypes.c_uint32),
        ("n_harq", ctypes.c_uint32),
        ("full_bytes", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


HISTORY_BUCKETS = 128  # meld.h
HISTORY_BUCKET_NS = 8_000_000
U32_MAX = 0xFFFFFFFF


class RadioBucket(ctypes.Structure):
    _fields_ = (
        ("start_ns", ctypes.c_uint64),
        ("txq_max_bytes", ctypes.c_uint32),
        ("d_tbs_min", ctypes.c_uint32),
    )


class UeHistory(ctypes.Structure):
    """A UE's radio history in time buckets (``struct ue_history``): MELD-overflow's input."""

    _fields_ = (("bucket", RadioBucket * HISTORY_BUCKETS),)

    def record(self, radio: UeRadio) -> None:
        """Add one measurement to the bucket of its time (a bucket keeps the largest queue
        and the smallest D_TBS measured in it). A measurement older than what its slot
        holds now is dropped: the slot has moved on."""
        k = radio.observed_ns // HISTORY_BUCKET_NS
        start = k * HISTORY_BUCKET_NS
        b = self.bucket[k % HISTORY_BUCKETS]
        if start < b.start_ns:
            return
        if start > b.start_ns:
            b.start_ns, b.txq_max_bytes, b.d_tbs_min = start, radio.txq_bytes, radio.d_tbs
            return
        b.txq_max_bytes = max(b.txq_max_bytes, radio.txq_bytes)
        b.d_tbs_min = min(b.d_tbs_min, radio.d_tbs)

    def window(self, from_ns: int, to_ns: int) -> RadioWindow:
        """The buckets that overlap [from_ns, to_ns]: the kernel's ``radio_window_of`` in
        Python, its test reference."""
        found = [
            b
            for b in self.bucket
            if b.start_ns and b.start_ns <= to_ns and b.start_ns + HISTORY_BUCKET_NS > from_ns
        ]
        return RadioWindow(
            txq_peak_bytes=max((b.txq_max_bytes for b in found), default=0),
            d_tbs_low=min((b.d_tbs_min for b in found), default=U32_MAX),
            buckets=len(found),
        )


class RadioWindow(ctypes.Structure):
    _fields_ = (
        ("txq_peak_bytes", ctypes.c_uint32),
        ("d_tbs_low", ctypes.c_uint32),
        ("buckets", ctypes.c_uint32),
    )


class UeCounters(ctypes.Structure):
    _fields_ = (
        ("losses", ctypes.c_uint64),
        ("notified", ctypes.c_uint64),
        ("suppressed", ctypes.c_uint64),
        ("stale", ctypes.c_uint64),
        ("no_data", ctypes.c_uint64),
        ("timeouts", ctypes.c_uint64),
        ("repaired", ctypes.c_uint64),
        ("unlogged", ctypes.c_uint64),
    )

    def as_dict(self) -> dict[str, int]:
        return {name: int(getattr(self, name)) for name, _ in self._fields_}


class MeldConfig(ctypes.Structure):
    _fields_ = (
        ("stale_ns", ctypes.c_uint64),
        ("rapid_period_ns", ctypes.c_uint64),
        ("global_mode", ctypes.c_uint32),
        ("rapid_init_cwnd", ctypes.c_uint32),
        ("rapid_min_cwnd", ctypes.c_uint32),
        ("rapid_gain_pct", ctypes.c_uint32),
        ("rapid_rtt_extra_us", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class FlowCtl(ctypes.Structure):
    _fields_ = (("rate_Bps", ctypes.c_uint64),)


class FlowPriv(ctypes.Structure):
    _fields_ = (
        ("period_end_ns", ctypes.c_uint64),
        ("period_min_us", ctypes.c_uint32),
        ("rtt_min_us", ctypes.c_uint32),
        ("target_cwnd", ctypes.c_uint32),
        ("loss_cwnd", ctypes.c_uint32),
        ("loss_ssthresh", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class DecideArgs(ctypes.Structure):
    _fields_ = (
        ("radio", UeRadio),
        ("window", RadioWindow),
        ("has_radio", ctypes.c_uint32),
        ("now_ns", ctypes.c_uint64),
        ("stale_ns", ctypes.c_uint64),
        ("span_ns", ctypes.c_uint64),
        ("mode", ctypes.c_uint32),
        ("t_pdu", ctypes.c_uint32),
        ("verdict", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class WindowArgs(ctypes.Structure):
    _fields_ = (
        ("from_ns", ctypes.c_uint64),
        ("to_ns", ctypes.c_uint64),
        ("ue", ctypes.c_uint32),
        ("window", RadioWindow),
    )


class DrainArgs(ctypes.Structure):
    _fields_ = (
        ("cwnd", ctypes.c_uint32),
        ("kept", ctypes.c_uint32),
        ("rtt_min_us", ctypes.c_uint32),
        ("srtt_us", ctypes.c_uint32),
        ("ssthresh", ctypes.c_uint32),
    )


class RapidCwndArgs(ctypes.Structure):
    _fields_ = (
        ("rate_Bps", ctypes.c_uint64),
        ("rtt_us", ctypes.c_uint32),
        ("rtt_extra_us", ctypes.c_uint32),
        ("gain_pct", ctypes.c_uint32),
        ("mss", ctypes.c_uint32),
        ("floor_cwnd", ctypes.c_uint32),
        ("clamp", ctypes.c_uint32),
        ("cwnd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class MeldDecision(ctypes.Structure):
    """One loss decision from the kernel's ``decisions`` ring (``struct meld_decision``)."""

    _fields_ = (
        ("time_ns", ctypes.c_uint64),
        ("radio_age_ns", ctypes.c_uint64),
        ("ue", ctypes.c_uint32),
        ("saddr", ctypes.c_uint32),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("snd_una", ctypes.c_uint32),
        ("snd_nxt", ctypes.c_uint32),
        ("d_tbs", ctypes.c_uint32),
        ("t_pdu", ctypes.c_uint32),
        ("n_harq", ctypes.c_uint32),
        ("txq_bytes", ctypes.c_uint32),
        ("q_th_bytes", ctypes.c_uint32),
        ("cwnd", ctypes.c_uint32),
        ("ssthresh", ctypes.c_uint32),
        ("lookback_us", ctypes.c_uint32),
        ("full_bytes", ctypes.c_uint32),
        ("window", RadioWindow),
        ("mode", ctypes.c_uint8),
        ("verdict", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 2),
    )

    def as_dict(self) -> dict[str, object]:
        """The record with units in its keys; S_TB = T_PDU / N_HARQ (bytes, fractional)."""
        verdict = Verdict(self.verdict)
        return {
            "time_ns": self.time_ns,
            "ue": key_to_ue(self.ue),
            "flow": {"src": key_to_ue(self.saddr), "sport": self.sport, "dport": self.dport},
            "snd_una": self.snd_una,
            "snd_nxt": self.snd_nxt,
            "mode": CcaMode(self.mode).label,
            "verdict": verdict.name.lower(),
            "kept": verdict in (Verdict.SUPPRESS, Verdict.RAPID),
            "d_tbs_bytes": self.d_tbs,
            "s_tb_bytes": self.t_pdu / self.n_harq if self.n_harq else None,
            "t_pdu_bytes": self.t_pdu,
            "n_harq": self.n_harq,
            "txq_bytes": self.txq_bytes,
            "q_th_bytes": self.q_th_bytes,
            "full_bytes": self.full_bytes,
            # the radio history over the episode's time in flight (one srtt back)
            "lookback_ms": self.lookback_us / 1e3,
            "window_txq_peak_bytes": self.window.txq_peak_bytes,
            "window_d_tbs_low_bytes": self.window.d_tbs_low if self.window.buckets else None,
            "window_buckets": self.window.buckets,
            "radio_age_ms": self.radio_age_ns / 1e6,
            "cwnd_segments": self.cwnd,
            "ssthresh_segments": self.ssthresh,
        }


class DecisionLog:
    """The kernel's per-event log of loss decisions (the pinned ``decisions`` ring).

    A ring has one reader: open one DecisionLog per PEP instance (the lab's experiments
    do, from the instance's pin directory). Records the ring had no room for are counted
    per UE (``unlogged``), never waited for.
    """

    def __init__(self, pin_dir: Path) -> None:
        self._map = BpfMap(str(pin_dir / "decisions"))
        self._ring = RingBuffer(self._map)

    def drain(self) -> list[MeldDecision]:
        return [MeldDecision.from_buffer_copy(r) for r in self._ring.drain()]

    def close(self) -> None:
        self._ring.close()
        self._map.close()


LAYOUTS: dict[str, type[ctypes.Structure]] = {
    "ue_radio": UeRadio,
    "radio_bucket": RadioBucket,
    "ue_history": UeHistory,
    "radio_window": RadioWindow,
    "window_args": WindowArgs,
    "ue_counters": UeCounters,
    "meld_config": MeldConfig,
    "flow_ctl": FlowCtl,
    "flow_priv": FlowPriv,
    "decide_args": DecideArgs,
    "rapid_cwnd_args": RapidCwndArgs,
    "drain_args": DrainArgs,
    "meld_decision": MeldDecision,
}


# The congestion control cannot be registered here; the message says why.
KernelUnavailableError = StructOpsUnavailableError


def key_to_ue(key: int) -> str:
    return socket.inet_ntoa(key.to_bytes(4, "little"))


def ca_names(instance: str) -> dict[str, str]:
    """Congestion control name per base name: unsuffixed for the default instance."""
    if instance in ("", "default"):
        return {base: base for base in BASE_NAMES}
    tag = hashlib.sha256(instance.encode()).hexdigest()[:4]
    return {base: f"{base}_{tag}" for base in BASE_NAMES}


@dataclass(frozen=True)
class Tuning:
    """The knobs in the ``meld_config`` map (see ``RanAwareSettings`` for their meaning)."""

    stale_ms: float
    rapid_period_ms: float
    rapid_init_cwnd: int
    rapid_min_cwnd: int
    rapid_gain_pct: int
    rapid_rtt_extra_us: int


class MeldKernel:
    """The registered congestion controls of one PEP instance and their maps."""

    def __init__(self, pin_dir: Path, names: dict[str, str]) -> None:
        self.pin_dir = pin_dir
        self.names = names
        self._maps: dict[str, BpfMap] = {}
        try:
            for name in (
                "ue_radio",
                "ue_history",
                "ue_mode",
                "ue_counters",
                "meld_config",
                "flow_ctl",
                "flow_priv",
            ):
                self._maps[name] = BpfMap(str(pin_dir / name))
            self._decide = BpfProgram(str(pin_dir / "prog_meld_decide"))
            self._rapid_cwnd = BpfProgram(str(pin_dir / "prog_meld_rapid_cwnd"))
            self._drained = BpfProgram(str(pin_dir / "prog_meld_drained"))
            self._window = BpfProgram(str(pin_dir / "prog_meld_window"))
        except OSError:
            self._close_fds()
            raise
        self._histories: dict[str, UeHistory] = {}  # what the PEP wrote to ue_history
        for name, layout in (("ue_radio", UeRadio), ("ue_history", UeHistory),
                             ("ue_counters", UeCounters),
                             ("meld_config", MeldConfig), ("flow_ctl", FlowCtl),
                             ("flow_priv", FlowPriv)):  # fmt: skip
            if self._maps[name].value_size != ctypes.sizeof(layout):
                self._close_fds()
                raise KernelUnavailableError(
                    f"map {name} holds {self._maps[name].value_size} B values, "
                    f"Python expects {ctypes.sizeof(layout)} B: rebuild the BPF object"
                )

    # --- lifecycle ----------------------------------------------------------------------------

    @classmethod
    def load(cls, loader: Path, obj: Path, pin_root: Path, instance: str) -> MeldKernel:
        """Register the congestion controls and open their maps; raises KernelUnavailableError."""
        pin_dir = pin_root / instance
        owner = pin_owner(pin_dir)
        if owner is not None and owner != os.getpid() and _alive(owner, pin_dir):
            raise KernelUnavailableError(
                f"instance {instance!r} belongs to the running process {owner}: "
                "give each PEP its own PEP_MELD_INSTANCE"
            )
        registered = register_struct_ops(loader, obj, pin_dir, ca_names(instance))
        (pin_dir / f"owner-{os.getpid()}-{_start_time(os.getpid())}").mkdir()
        log.info("congestion controls registered", ops=registered, pins=str(pin_dir))
        try:
            return cls(pin_dir, registered)
        except (OSError, KernelUnavailableError):
            remove_pins(pin_dir)
            raise

    def close(self) -> None:
        """Unregister (unpin the links) and drop the maps; flows keep their CC until closed."""
        self._close_fds()
        unregister_struct_ops(self.pin_dir, self.names.values())
        log.info("congestion controls unregistered", ops=self.names)

    def _close_fds(self) -> None:
        for m in self._maps.values():
            m.close()
        for prog in ("_decide", "_rapid_cwnd", "_drained", "_window"):
            if hasattr(self, prog):
                getattr(self, prog).close()

    # --- configuration ------------------------------------------------------------------------

    def configure(self, mode: CcaMode, tuning: Tuning) -> None:
        cfg = MeldConfig(
            stale_ns=int(tuning.stale_ms * 1e6),
            rapid_period_ns=int(tuning.rapid_period_ms * 1e6),
            global_mode=int(mode),
            rapid_init_cwnd=tuning.rapid_init_cwnd,
            rapid_min_cwnd=tuning.rapid_min_cwnd,
            rapid_gain_pct=tuning.rapid_gain_pct,
            rapid_rtt_extra_us=tuning.rapid_rtt_extra_us,
        )
        self._maps["meld_config"].update(ctypes.c_uint32(0), cfg)

    def config(self) -> MeldConfig:
        cfg = self._maps["meld_config"].lookup(ctypes.c_uint32(0), MeldConfig)
        assert cfg is not None  # an array map always has its entry
        return cfg

    def set_global_mode(self, mode: CcaMode) -> None:
        cfg = self.config()
        cfg.global_mode = int(mode)
        self._maps["meld_config"].update(ctypes.c_uint32(0), cfg)

    def set_ue_mode(self, ue: str, mode: CcaMode | None) -> None:
        """A UE's own mode; None returns it to the global mode."""
        if mode is None:
            self._maps["ue_mode"].delete(ue_key(ue))
        else:
            self._maps["ue_mode"].update(ue_key(ue), ctypes.c_uint32(int(mode)))

    def ue_modes(self) -> dict[str, CcaMode]:
        m = self._maps["ue_mode"]
        modes = {}
        for key in m:
            value = m.lookup(key, _U32)
            if value is not None:
                modes[key_to_ue(int(key.value))] = CcaMode(value.value)
        return modes

    # --- radio state and counters -------------------------------------------------------------

    def set_radio(self, ue: str, radio: UeRadio) -> None:
        """The measurement into the UE's history, then as its current state (in that order:
        the kernel's window reaches back to the current state's time, which must be in the
        history already)."""
        history = self._histories.setdefault(ue, UeHistory())
        history.record(radio)
        self._maps["ue_history"].update(ue_key(ue), history)
        self._maps["ue_radio"].update(ue_key(ue), radio)

    def radio(self, ue: str) -> UeRadio | None:
        return self._maps["ue_radio"].lookup(ue_key(ue), UeRadio)

    def forget_radio(self, ue: str) -> None:
        """Drop a UE's radio state: its flows fall back to plain behaviour ("no data")."""
        self._maps["ue_radio"].delete(ue_key(ue))
        self._maps["ue_history"].delete(ue_key(ue))
        self._histories.pop(ue, None)

    def reset_counters(self, ue: str) -> None:
        self._maps["ue_counters"].delete(ue_key(ue))

    def counters(self, ue: str) -> UeCounters | None:
        return self._maps["ue_counters"].lookup(ue_key(ue), UeCounters)

    def all_counters(self) -> dict[str, UeCounters]:
        m = self._maps["ue_counters"]
        found = {}
        for key in m:
            value = m.lookup(key, UeCounters)
            if value is not None:
                found[key_to_ue(int(key.value))] = value
        return found

    def radio_ues(self) -> list[str]:
        return [key_to_ue(int(k.value)) for k in self._maps["ue_radio"]]

    # --- per-socket state (RAN-leg sockets) ---------------------------------------------------

    def set_flow_rate(self, sock: socket.socket, rate_Bps: int) -> None:  # noqa: N803
        """RAPID's rate for this RAN-leg socket; its cwnd follows rate x RAN RTT_min."""
        self._maps["flow_ctl"].update(ctypes.c_int(sock.fileno()), FlowCtl(rate_Bps=rate_Bps))

    def flow_priv(self, sock: socket.socket) -> FlowPriv | None:
        return self._maps["flow_priv"].lookup(ctypes.c_int(sock.fileno()), FlowPriv)

    # --- the decision alone (tests) -----------------------------------------------------------

    def decide(self, args: DecideArgs) -> Verdict:
        self._decide.run(args)
        return Verdict(args.verdict)

    def rapid_cwnd(self, args: RapidCwndArgs) -> int:
        """RAPID's cwnd arithmetic alone, in segments."""
        self._rapid_cwnd.run(args)
        return int(args.cwnd)

    def drained(self, args: DrainArgs) -> int:
        """MELD-overflow's kept window at a radio loss alone, in segments."""
        self._drained.run(args)
        return int(args.ssthresh)

    def window(self, ue: str, from_ns: int, to_ns: int) -> RadioWindow:
        """The kernel's walk of the UE's history over [from_ns, to_ns]."""
        args = WindowArgs(from_ns=from_ns, to_ns=to_ns, ue=ue_key(ue).value)
        self._window.run(args)
        window: RadioWindow = args.window
        return window


_U32 = ctypes.c_uint32


def pin_owner(pin_dir: Path) -> int | None:
    """The pid recorded as ``owner-<pid>-<start time>`` in an instance's pin directory."""
    if not pin_dir.is_dir():
        return None
    for entry in pin_dir.iterdir():
        if entry.name.startswith("owner-"):
            return int(entry.name.split("-")[1])
    return None


def _alive(pid: int, pin_dir: Path) -> bool:
    """Is the recorded owner still that process (and not a reused pid)?"""
    return (pin_dir / f"owner-{pid}-{_start_time(pid)}").is_dir()


def _start_time(pid: int) -> int:
    """Start time of a process in clock ticks since boot (0 if it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[19])


def loader_paths() -> tuple[Path, Path]:
    """Default loader binary and BPF object: the repo's build/ (``make build``)."""
    root = Path(os.environ.get("MTS_BUILD_DIR", Path(__file__).resolve().parents[4] / "build"))
    return root / "bin" / "meld-loader", root / "bpf" / "meld.bpf.o"
