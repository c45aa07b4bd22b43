"""Linux MPTCP path control over generic netlink (family ``mptcp_pm``), no helper binaries.

The path manager acts on the RAN leg from the proxy's side. It runs as the *userspace path
manager* of the proxy's network namespace (``net.mptcp.pm_type=1``): it subscribes to the
``mptcp_pm_events`` group (which is also what lets the kernel accept the UE's MP_JOINs: with
the userspace PM, joins are accepted only while a listener is subscribed), learns every
connection (token) and subflow from the events, and switches one subflow between active and
backup with ``MPTCP_PM_CMD_SET_FLAGS`` (token + local + remote address). The kernel's packet
scheduler then stops sending on a backup subflow while an active one exists, and tells the
UE with MP_PRIO. ``ip mptcp monitor`` shows the same events (a useful cross-check).

Everything is plain ``socket``/``struct``: a generic netlink family lookup, requests with
ACKs (errors carry the kernel's extended-ack message), and the event multicast group.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID, CTRL_ATTR_FAMILY_NAME, CTRL_ATTR_MCAST_GROUPS = 1, 2, 7
CTRL_ATTR_MCAST_GRP_NAME, CTRL_ATTR_MCAST_GRP_ID = 1, 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
NLA_F_NESTED = 0x8000
SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NETLINK_EXT_ACK = 270, 1, 11
CLONE_NEWNET = 0x40000000

MPTCP_PM_NAME, MPTCP_PM_EVENTS = "mptcp_pm", "mptcp_pm_events"
MPTCP_PM_VER = 1
CMD_GET_ADDR, CMD_SET_FLAGS, CMD_SUBFLOW_CREATE, CMD_SUBFLOW_DESTROY = 3, 7, 10, 11
ATTR_ADDR, ATTR_TOKEN, ATTR_LOC_ID, ATTR_ADDR_REMOTE = 1, 4, 5, 6
ADDR_FAMILY, ADDR_ID, ADDR_ADDR4, ADDR_PORT, ADDR_FLAGS, ADDR_IF_IDX = 1, 2, 3, 5, 6, 7
FLAG_SIGNAL, FLAG_SUBFLOW, FLAG_BACKUP = 1, 2, 4

EVENTS = {
    1: "created",
    2: "established",
    3: "closed",
    6: "announced",
    7: "removed",
    10: "sub_established",
    11: "sub_closed",
    13: "sub_priority",
}
(EV_TOKEN, EV_FAMILY, EV_LOC_ID, EV_REM_ID, EV_SADDR4, _, EV_DADDR4, _, EV_SPORT, EV_DPORT,
 EV_BACKUP) = range(1, 12)  # fmt: skip


class NetlinkError(OSError):
    """A request the kernel refused; ``strerror`` carries its extended-ack message."""


@dataclass(frozen=True)
class MptcpEvent:
    kind: str
    token: int
    local: tuple[IPv4Address, int] | None = None
    remote: tuple[IPv4Address, int] | None = None
    local_id: int | None = None
    remote_id: int | None = None
    backup: bool | None = None


@dataclass(frozen=True)
class Endpoint:
    id: int
    address: IPv4Address
    flags: int
    ifindex: int | None

    @property
    def backup(self) -> bool:
        return bool(self.flags & FLAG_BACKUP)


# -- netlink attributes ------------------------------------------------------------------
def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


def _parse_attrs(data: bytes) -> dict[int, bytes]:
    out, offset = {}, 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, offset)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[offset + 4 : offset + length]
        offset += (length + 3) & ~3
    return out


def _address(ip: IPv4Address, port: int | None = None, *, flags: int | None = None) -> bytes:
    parts = _attr(ADDR_FAMILY, struct.pack("=H", socket.AF_INET)) + _attr(ADDR_ADDR4, ip.packed)
    if port is not None:
        parts += _attr(ADDR_PORT, struct.pack("=H", port))
    if flags is not None:
        parts += _attr(ADDR_FLAGS, struct.pack("=I", flags))
    return parts


# -- network namespaces --------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block in network namespace ``name`` (this thread only); None = current."""
    if name is None:
        yield
        return
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(Path("/run/netns") / name, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {name} failed")
        try:
            yield
        finally:
            if _libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back failed")
    finally:
        os.close(own)
        os.close(target)


class GenericNetlink:
    """A generic netlink socket bound to one family (opened in a given network namespace)."""

    def __init__(self, family: str, netns: str | None = None) -> None:
        with in_netns(netns):
            self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self._sock.bind((0, 0))
        with contextlib.suppress(OSError):
            self._sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
        self._seq = 0
        self.family_id, self.groups = self._resolve(family)

    def close(self) -> None:
        self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()

    def _resolve(self, family: str) -> tuple[int, dict[str, int]]:
        name = _attr(CTRL_ATTR_FAMILY_NAME, family.encode() + b"\0")
        try:
            (reply,) = self.request(CTRL_CMD_GETFAMILY, name, family_id=GENL_ID_CTRL, version=1)
        except NetlinkError as exc:
            if exc.errno == errno.ENOENT:
                raise NetlinkError(exc.errno, f"no generic netlink family {family!r}") from exc
            raise
        attrs = _parse_attrs(reply)
        groups = {}
        for group in _parse_attrs(attrs.get(CTRL_ATTR_MCAST_GROUPS, b"")).values():
            g = _parse_attrs(group)
            groups[g[CTRL_ATTR_MCAST_GRP_NAME].rstrip(b"\0").decode()] = struct.unpack(
                "=I", g[CTRL_ATTR_MCAST_GRP_ID]
            )[0]
        return struct.unpack("=H", attrs[CTRL_ATTR_FAMILY_ID])[0], groups

    def request(
        self,
        command: int,
        payload: bytes = b"",
        *,
        family_id: int | None = None,
        version: int = MPTCP_PM_VER,
        dump: bool = False,
    ) -> list[bytes]:
        """Send one request; return the attribute payloads of the replies (raise on error)."""
        self._seq += 1
        flags = NLM_F_REQUEST | NLM_F_ACK | (NLM_F_DUMP if dump else 0)
        body = struct.pack("=BBH", command, version, 0) + payload
        kind = self.family_id if family_id is None else family_id
        self._sock.send(struct.pack("=IHHII", 16 + len(body), kind, flags, self._seq, 0) + body)
        replies: list[bytes] = []
        while True:
            data = self._sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, msg_type, msg_flags, seq, _ = struct.unpack_from("=IHHII", data, offset)
                message = data[offset + 16 : offset + length]
                offset += (length + 3) & ~3
                if seq != self._seq:
                    continue
                if msg_type == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", message)[0]
                    if code:
                        raise NetlinkError(code, _error_text(code, message, msg_flags))
                    return replies
                if msg_type == NLMSG_DONE:
                    return replies
                replies.append(message[4:])  # skip the genl header

    def subscribe(self, group: str) -> None:
        self._sock.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, self.groups[group])

    def receive(self, timeout: float | None) -> list[tuple[int, bytes]]:
        """(genl command, attributes) of the messages that arrive within ``timeout``."""
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(65536)
        except TimeoutError:
            return []
        finally:
            self._sock.settimeout(None)
        out, offset = [], 0
        while offset + 16 <= len(data):
            length = struct.unpack_from("=I", data, offset)[0]
            command = data[offset + 16]
            out.append((command, data[offset + 20 : offset + length]))
            offset += (length + 3) & ~3
        return out


def _error_text(code: int, message: bytes, flags: int) -> str:
    text = os.strerror(code)
    if flags & NLM_F_ACK_TLVS:
        original_length = struct.unpack_from("=I", message, 4)[0]
        # With NLM_F_CAPPED only the header of the original message is echoed back.
        echoed = 16 if flags & 0x100 else original_length
        attrs = _parse_attrs(message[4 + echoed :])
        if NLMSGERR_ATTR_MSG in attrs:
            text += ": " + attrs[NLMSGERR_ATTR_MSG].rstrip(b"\0").decode(errors="replace")
    return text


class MptcpPm:
    """The ``mptcp_pm`` family in one network namespace: endpoints, subflow flags, events."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns
        self._nl = GenericNetlink(MPTCP_PM_NAME, netns)

    def close(self) -> None:
        self._nl.close()

    def __enter__(self) -> MptcpPm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def endpoints(self) -> list[Endpoint]:
        """The in-kernel PM's endpoints (``ip mptcp endpoint show``)."""
        out = []
        for reply in self._nl.request(CMD_GET_ADDR, dump=True):
            a = _parse_attrs(_parse_attrs(reply)[ATTR_ADDR])
            if ADDR_ADDR4 not in a:
                continue
            out.append(
                Endpoint(
                    id=a[ADDR_ID][0],
                    address=IPv4Address(a[ADDR_ADDR4]),
                    flags=struct.unpack("=I", a.get(ADDR_FLAGS, b"\0\0\0\0"))[0],
                    ifindex=struct.unpack("=i", a[ADDR_IF_IDX])[0] if ADDR_IF_IDX in a else None,
                )
            )
        return out

    def set_subflow_backup(
        self,
        token: int,
        local: tuple[IPv4Address, int],
        remote: tuple[IPv4Address, int],
        backup: bool,
    ) -> None:
        """Mark one subflow of connection ``token`` backup (True) or active (False)."""
        payload = (
            _attr(ATTR_TOKEN, struct.pack("=I", token))
            + _attr(
                ATTR_ADDR | NLA_F_NESTED,
                _address(local[0], local[1], flags=FLAG_BACKUP if backup else 0),
            )
            + _attr(ATTR_ADDR_REMOTE | NLA_F_NESTED, _address(remote[0], remote[1]))
        )
        self._nl.request(CMD_SET_FLAGS, payload)

    def subscribe_events(self) -> None:
        self._nl.subscribe(MPTCP_PM_EVENTS)

    def events(self, timeout: float | None) -> list[MptcpEvent]:
        out = []
        for command, payload in self._nl.receive(timeout):
            kind = EVENTS.get(command)
            if kind is not None:
                out.append(_event(kind, _parse_attrs(payload)))
        return out


def _event(kind: str, a: dict[int, bytes]) -> MptcpEvent:
    def endpoint(addr: int, port: int) -> tuple[IPv4Address, int] | None:
        if addr not in a:
            return None
        return IPv4Address(a[addr]), struct.unpack("!H", a[port])[0] if port in a else 0

    return MptcpEvent(
        kind=kind,
        token=struct.unpack("=I", a[EV_TOKEN])[0],
        local=endpoint(EV_SADDR4, EV_SPORT),
        remote=endpoint(EV_DADDR4, EV_DPORT),
        local_id=a[EV_LOC_ID][0] if EV_LOC_ID in a else None,
        remote_id=a[EV_REM_ID][0] if EV_REM_ID in a else None,
        backup=bool(a[EV_BACKUP][0]) if EV_BACKUP in a else None,
    )
