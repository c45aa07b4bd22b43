"""Actuation on the RAN leg: which of a UE's MPTCP subflows carry data.

A path is one of the UE's addresses (one per cell). ``MptcpActuator`` follows every MPTCP
connection of the proxy's namespace through the path manager events and keeps each subflow's
backup flag equal to the wanted state of its path: ``set_active(ip, False)`` marks every
subflow towards that UE address backup (the kernel stops sending on it while another subflow
is active), ``True`` makes it active again; a subflow that appears later gets the wanted
state at once.
"""

from __future__ import annotations

import re
import subprocess
import threading
from dataclasses import dataclass, field
from ipaddress import IPv4Address

from mec_common.health import Health
from mec_common.logging import get_logger
from path_manager.mptcp import MptcpEvent, MptcpPm, NetlinkError

log = get_logger(__name__)

Address = tuple[IPv4Address, int]


@dataclass
class _Connection:
    subflows: dict[Address, Address] = field(default_factory=dict)  # remote -> local


class MptcpActuator:
    """The userspace MPTCP path manager of one namespace (see the module docstring)."""

    def __init__(self, netns: str | None = None, health: Health | None = None) -> None:
        self.netns = netns
        self._health = health
        self._events = MptcpPm(netns)
        self._events.subscribe_events()
        self._commands = MptcpPm(netns)
        self._lock = threading.Lock()
        self._connections: dict[int, _Connection] = {}
        self._inactive: set[IPv4Address] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="mptcp-events", daemon=True)
        self.errors = 0
        self._report(True, f"following MPTCP connections in netns {netns or '(own)'}")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)
        self._events.close()
        self._commands.close()

    def set_active(self, path: IPv4Address, active: bool) -> int:
        """Make every subflow towards UE address ``path`` active or backup; return how many."""
        with self._lock:
            (self._inactive.discard if active else self._inactive.add)(path)
            targets = [
                (token, local, remote)
                for token, c in self._connections.items()
                for remote, local in c.subflows.items()
                if remote[0] == path
            ]
        for token, local, remote in targets:
            self._apply(token, local, remote, backup=not active)
        return len(targets)

    def subflows(self) -> list[tuple[int, Address, Address]]:
        with self._lock:
            return [
                (token, local, remote)
                for token, c in self._connections.items()
                for remote, local in c.subflows.items()
            ]

    def _apply(self, token: int, local: Address, remote: Address, *, backup: bool) -> None:
        try:
            self._commands.set_subflow_backup(token, local, remote, backup)
        except NetlinkError as exc:
            if "invalid token" in str(exc):  # the connection closed before its event came
                with self._lock:
                    self._connections.pop(token, None)
                return
            # The subflow may have closed meanwhile; anything else is worth a health note.
            self.errors += 1
            log.warning(
                "mptcp set_flags failed", token=token, remote=str(remote[0]), error=str(exc)
            )

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                events = self._events.events(timeout=0.2)
            except OSError as exc:
                self._report(False, f"reading MPTCP events failed: {exc}")
                self._stop.wait(1.0)
                continue
            for event in events:
                self._on_event(event)

    def _on_event(self, event: MptcpEvent) -> None:
        if event.kind == "closed":
            with self._lock:
                self._connections.pop(event.token, None)
            return
        if event.local is None or event.remote is None:
            return
        if event.kind in ("established", "sub_established"):
            with self._lock:
                conn = self._connections.setdefault(event.token, _Connection())
                conn.subflows[event.remote] = event.local
                wanted_backup = event.remote[0] in self._inactive
            if wanted_backup != bool(event.backup):
                self._apply(event.token, event.local, event.remote, backup=wanted_backup)
        elif event.kind == "sub_closed":
            with self._lock:
                closing = self._connections.get(event.token)
                if closing is not None:
                    closing.subflows.pop(event.remote, None)

    def _report(self, ok: bool, detail: str) -> None:
        if self._health is not None:
            self._health.set("mptcp", ok, detail)


def subflow_bytes(netns: str | None) -> dict[tuple[str, str], int]:
    """Bytes acked per TCP subflow, keyed by (local ip:port, remote ip:port), via ``ss -ti``."""
    command = ["ss", "-tinH", "state", "established"]
    if netns:
        command = ["ip", "netns", "exec", netns, *command]
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    out: dict[tuple[str, str], int] = {}
    key: tuple[str, str] | None = None
    for line in text.splitlines():
        socket_line = _SOCKET.search(line) if not line[:1].isspace() else None
        if socket_line:
            key = (socket_line[1], socket_line[2])
        elif key is not None and (acked := _ACKED.search(line)):
            out[key] = int(acked[1])
            key = None
    return out


_SOCKET = re.compile(r"(\d+\.\d+\.\d+\.\d+:\d+)\s+(\d+\.\d+\.\d+\.\d+:\d+)")
_ACKED = re.compile(r"\bbytes_acked:(\d+)")
