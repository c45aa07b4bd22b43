"""TCP Prague as a BPF congestion control (``l4s/bpf/prague.bpf.c``), registered by the
PEP's loader (``meld-loader``: it renames the struct_ops, pins its maps and test programs,
and registers it through a BPF link pinned in the pin directory; removing the directory
unregisters it)."""

from __future__ import annotations

import ctypes
import json
import shutil
import socket
import subprocess
from pathlib import Path

from mec_common.bpf import BpfMap, BpfProgram

ALPHA_SHIFT = 20
ALPHA_MAX = 1 << ALPHA_SHIFT


class AlphaArgs(ctypes.Structure):
    _fields_ = (
        ("alpha", ctypes.c_uint32),
        ("delivered", ctypes.c_uint32),
        ("delivered_ce", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
    )


class PragueTrace(ctypes.Structure):
    """``struct prague_trace``: what one socket's Prague did so far."""

    _fields_ = (
        ("alpha", ctypes.c_uint32),  # after the last round, 2^20 = 1.0
        ("rounds", ctypes.c_uint32),
        ("marked_rounds", ctypes.c_uint32),  # rounds with a CE-marked delivered segment
        ("reductions", ctypes.c_uint32),  # ssthresh() calls: ECN reductions and losses
    )


class Prague:
    """A registered Prague: sockets select it with TCP_CONGESTION = ``name``."""

    def __init__(self, pin_dir: Path, name: str) -> None:
        self.pin_dir, self.name = pin_dir, name
        self._alpha = BpfProgram(str(pin_dir / "prog_prague_alpha"))
        self._trace = BpfMap(str(pin_dir / "prague_trace"))

    @classmethod
    def load(cls, loader: Path, obj: Path, pin_dir: Path, name: str) -> Prague:
        """Register ``obj``'s Prague as ``name`` (at most 15 characters, machine-wide)."""
        done = subprocess.run(
            [str(loader), str(obj), str(pin_dir), f"prague={name}"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{loader}: {done.stderr.strip()}")
        ops = json.loads(done.stdout)["ops"]
        return cls(pin_dir, ops["prague"])

    def alpha_step(self, alpha: int, delivered: int, delivered_ce: int) -> int:
        """The kernel's alpha update for one round (alpha scaled by 2^20)."""
        args = AlphaArgs(alpha=alpha, delivered=delivered, delivered_ce=delivered_ce)
        self._alpha.run(args)
        return int(args.alpha)

    def trace(self, sock: socket.socket) -> PragueTrace | None:
        """The socket's trace (None before its first round or reduction)."""
        return self._trace.lookup(ctypes.c_int(sock.fileno()), PragueTrace)

    def close(self) -> None:
        """Unregister (sockets using it keep it until they close) and remove the pins."""
        self._alpha.close()
        self._trace.close()
        shutil.rmtree(self.pin_dir, ignore_errors=True)
