"""Socket options and kernel state the PEP reads: buffers, queues, TCP_INFO."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import socket
import struct
from dataclasses import dataclass
from typing import Any

from mec_common.logging import get_logger

log = get_logger(__name__)

# <asm-generic/socket.h>, <linux/sockios.h>, <linux/tcp.h>; not all are in the socket module.
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
SIOCINQ = 0x541B  # bytes in the receive queue, not read yet
SIOCOUTQ = 0x5411  # bytes in the send queue: not sent + sent but not acknowledged
SIOCOUTQNSD = 0x894B  # bytes in the send queue not sent yet
TCP_FASTOPEN_NO_COOKIE = 34
_INT = struct.Struct("i")
_ZERO_INT = bytes(_INT.size)
_LINGER_RESET = struct.pack("ii", 1, 0)
SO_ATTACH_REUSEPORT_CBPF = 51
# Classic BPF (<linux/filter.h>): load the CPU the packet is processed on, compare, return.
_BPF_LD_CPU = (0x20, 0, 0, -0x1000 + 36)  # BPF_LD|BPF_W|BPF_ABS, SKF_AD_OFF + SKF_AD_CPU
_BPF_JEQ_K, _BPF_RET_K = 0x15, 0x06
_NO_INDEX = 0xFFFFFFFF  # past the group's sockets: the kernel picks one by hash


@dataclass(frozen=True)
class BufferResult:
    """What the kernel granted (it doubles the request for bookkeeping overhead)."""

    rcvbuf: int
    sndbuf: int
    forced: bool


def set_buffers(sock: socket.socket, rcvbuf: int, sndbuf: int, *, force: bool) -> BufferResult:
    """Size a socket's buffers; 0 leaves autotuning on. Forced sizes ignore ``*mem_max``.

    Set before ``listen()``/``connect()``: the TCP window scale is chosen at the
    handshake from the receive buffer, so a late increase cannot open the window fully.
    """
    forced = apply_buffers(sock, rcvbuf, sndbuf, force=force)
    return BufferResult(
        rcvbuf=sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
        sndbuf=sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        forced=forced,
    )


def apply_buffers(sock: socket.socket, rcvbuf: int, sndbuf: int, *, force: bool) -> bool:
    """``set_buffers`` without reading the result back (per flow); True if forced."""
    forced = force
    for size, plain, forced_opt in (
        (rcvbuf, socket.SO_RCVBUF, SO_RCVBUFFORCE),
        (sndbuf, socket.SO_SNDBUF, SO_SNDBUFFORCE),
    ):
        if size <= 0:
            continue
        if forced:
            try:
                sock.setsockopt(socket.SOL_SOCKET, forced_opt, size)
                continue
            except PermissionError:
                forced = False  # no CAP_NET_ADMIN: the kernel clamps to net.core.*mem_max
        sock.setsockopt(socket.SOL_SOCKET, plain, size)
    return forced


def queued(fd: int, request: int) -> int:
    """SIOCINQ/SIOCOUTQ/SIOCOUTQNSD of a socket (0 when the socket is gone)."""
    try:
        return int(_INT.unpack(fcntl.ioctl(fd, request, _ZERO_INT))[0])
    except OSError as exc:
        if exc.errno in (errno.EBADF, errno.EINVAL, errno.ENOTCONN):
            return 0
        raise


def reset_on_close(sock: socket.socket) -> None:
    """Make ``close()`` send an RST instead of a FIN (SO_LINGER with a zero timeout)."""
    with contextlib.suppress(OSError):  # already gone: close() will do
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)


def congestion_control(sock: socket.socket) -> str:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
    return raw.split(b"\0", 1)[0].decode()


# struct tcp_info (linux/tcp.h): the fields we report, in kernel order.
_TCP_STATES = (
    "",
    "ESTABLISHED",
    "SYN_SENT",
    "SYN_RECV",
    "FIN_WAIT1",
    "FIN_WAIT2",
    "TIME_WAIT",
    "CLOSE",
    "CLOSE_WAIT",
    "LAST_ACK",
    "LISTEN",
    "CLOSING",
)
_CA_STATES = ("open", "disorder", "cwr", "recovery", "loss")
_TCP_INFO_LAYOUT = (  # (struct code, field names), in kernel order
    ("B", "state ca_state retransmits probes backoff options wscale flags"),
    ("I", "rto ato snd_mss rcv_mss unacked sacked lost retrans fackets last_data_sent"),
    ("I", "last_ack_sent last_data_recv last_ack_recv pmtu rcv_ssthresh rtt rttvar"),
    ("I", "snd_ssthresh snd_cwnd advmss reordering rcv_rtt rcv_space total_retrans"),
    ("Q", "pacing_rate max_pacing_rate bytes_acked bytes_received"),
    ("I", "segs_out segs_in notsent_bytes min_rtt data_segs_in data_segs_out"),
    ("Q", "delivery_rate busy_time rwnd_limited sndbuf_limited"),
    ("I", "delivered delivered_ce"),
    ("Q", "bytes_sent bytes_retrans"),
    ("I", "dsack_dups reord_seen rcv_ooopack snd_wnd rcv_wnd"),
)
_TCP_INFO_FIELDS = [name for _, names in _TCP_INFO_LAYOUT for name in names.split()]
_TCP_INFO = struct.Struct(
    "=" + "".join(code * len(names.split()) for code, names in _TCP_INFO_LAYOUT)
)
TCPI_OPT_SYN_DATA = 32  # the SYN carried data that was accepted (TCP Fast Open)


def tcp_info(sock: socket.socket) -> dict[str, Any]:
    """The TCP_INFO fields a PEP operator looks at (times in µs, rates in bytes/s)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
    raw = raw.ljust(_TCP_INFO.size, b"\0")  # older kernels return fewer fields
    i = dict(zip(_TCP_INFO_FIELDS, _TCP_INFO.unpack(raw), strict=True))
    state, ca_state = i["state"], i["ca_state"]
    return {
        "state": _TCP_STATES[state] if state < len(_TCP_STATES) else str(state),
        "ca_state": _CA_STATES[ca_state] if ca_state < len(_CA_STATES) else str(ca_state),
        "congestion_control": congestion_control(sock),
        "fast_open": bool(i["options"] & TCPI_OPT_SYN_DATA),
        "rtt_us": i["rtt"],
        "rttvar_us": i["rttvar"],
        "min_rtt_us": i["min_rtt"],
        "rto_us": i["rto"],
        "snd_cwnd": i["snd_cwnd"],
        "snd_ssthresh": i["snd_ssthresh"],
        "snd_mss": i["snd_mss"],
        "unacked": i["unacked"],
        "lost": i["lost"],
        "retrans": i["retrans"],
        "total_retrans": i["total_retrans"],
        "pacing_rate": i["pacing_rate"],
        "delivery_rate": i["delivery_rate"],
        "bytes_acked": i["bytes_acked"],
        "bytes_received": i["bytes_received"],
        "bytes_sent": i["bytes_sent"],
        "bytes_retrans": i["bytes_retrans"],
        "notsent_bytes": i["notsent_bytes"],
        "snd_wnd": i["snd_wnd"],
        "rcv_wnd": i["rcv_wnd"],
        "busy_time_us": i["busy_time"],
        "rwnd_limited_us": i["rwnd_limited"],
        "sndbuf_limited_us": i["sndbuf_limited"],
    }


def select_listener_by_cpu(sock: socket.socket, cpus: list[int]) -> None:
    """Give the ``SO_REUSEPORT`` group of ``sock`` a selector: a connection whose SYN is
    processed on ``cpus[i]`` goes to the group's socket ``i`` (sockets are numbered in the
    order they joined the group); on any other CPU the kernel's hash picks."""
    code = [_BPF_LD_CPU]
    for index, cpu in enumerate(cpus):
        code += [(_BPF_JEQ_K, 0, 1, cpu), (_BPF_RET_K, 0, 0, index)]
    code.append((_BPF_RET_K, 0, 0, _NO_INDEX))
    program = ctypes.create_string_buffer(
        b"".join(struct.pack("HBBI", op, jt, jf, k & 0xFFFFFFFF) for op, jt, jf, k in code)
    )
    fprog = struct.pack("HxxxxxxP", len(code), ctypes.addressof(program))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, fprog)
