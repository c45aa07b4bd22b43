"""Client side of the PEP's TFO opt-in TLV (one file, standard library only).

Opt a TCP connection into the PEP: the real destination travels in the SYN (TCP Fast
Open), so the split connection costs no extra round trip::

    import pep_tlv
    sock = pep_tlv.connect(("10.10.0.2", 443), pep=("10.20.0.1", 8181))
    sock.sendall(b"...")          # then use it like any connected socket

Without a TFO cookie yet (the first connection to a PEP), the kernel sends a plain SYN
and the TLV follows the handshake: one extra RTT. With ``no_cookie=True`` (and a PEP
configured with ``PEP_TFO_NO_COOKIE``) the first connection is 0-RTT too.

Wire format (docs/pep.md): header ``01 nn EF BE`` (version 1, nn options, magic 0xBEEF
little-endian), then 8-byte options ``type, length, value(2), optional(4)``.
CONNECT (0x0A): length 6, value = port big-endian, optional = IPv4 big-endian.
BUFFER_SIZE (0x0B): length 6, value 0, optional = bytes, little-endian.
IPv6: CONNECT6 (0x0C, port + address bytes 0-3), then two ADDRESS6 (0x0D, 6 bytes each).
"""

from __future__ import annotations

import errno
import select
import socket
import struct

VERSION = 1
MAGIC = 0xBEEF
TYPE_CONNECT = 0x0A
TYPE_BUFFER_SIZE = 0x0B
TYPE_CONNECT6 = 0x0C
TYPE_ADDRESS6 = 0x0D
TCP_FASTOPEN_NO_COOKIE = 34  # linux/tcp.h; not in the socket module


def encode(destination: tuple[str, int], buffer_size: int | None = None) -> bytes:
    """The TLV asking the PEP to connect to ``destination`` (IPv4 or IPv6 address, port)."""
    host, port = destination[:2]
    if not 0 < port < 65536:
        raise ValueError(f"port {port} out of range")
    if ":" in host:
        raw = socket.inet_pton(socket.AF_INET6, host)
        options = [
            struct.pack("<BB", TYPE_CONNECT6, 6) + struct.pack("!H", port) + raw[:4],
            struct.pack("<BB", TYPE_ADDRESS6, 6) + raw[4:10],
            struct.pack("<BB", TYPE_ADDRESS6, 6) + raw[10:],
        ]
    else:
        options = [
            struct.pack("<BB", TYPE_CONNECT, 6) + struct.pack("!H", port) + socket.inet_aton(host)
        ]
    if buffer_size is not None:
        if not 0 <= buffer_size < 2**32:
            raise ValueError("buffer_size must fit in 32 bits")
        options.append(struct.pack("<BBHI", TYPE_BUFFER_SIZE, 6, 0, buffer_size))
    return struct.pack("<BBH", VERSION, len(options), MAGIC) + b"".join(options)


def send_tlv(
    sock: socket.socket,
    destination: tuple[str, int],
    pep: tuple[str, int],
    *,
    buffer_size: int | None = None,
    data: bytes = b"",
    no_cookie: bool = False,
) -> int:
    """Connect ``sock`` to the PEP, sending the TLV (and ``data``) in the SYN if possible.

    Works for blocking and non-blocking sockets: when the kernel could not put the
    bytes in the SYN (no TFO cookie yet) they are sent once the handshake completes.
    Returns how many bytes of ``data`` were sent.
    """
    message = encode(destination, buffer_size) + data
    if no_cookie:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_NO_COOKIE, 1)
    try:
        sent = sock.sendto(message, socket.MSG_FASTOPEN, pep)
    except BlockingIOError as exc:  # non-blocking, no cookie: SYN without data
        if exc.errno != errno.EINPROGRESS:
            raise
        sent = 0
    if sent < len(message):
        _send_rest(sock, memoryview(message)[sent:])
    return len(data)


def connect(
    destination: tuple[str, int],
    pep: tuple[str, int],
    *,
    buffer_size: int | None = None,
    timeout: float | None = None,
    no_cookie: bool = False,
) -> socket.socket:
    """A new TCP socket connected to ``destination`` through the PEP (either IP version)."""
    family = socket.AF_INET6 if ":" in pep[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        send_tlv(sock, destination, pep, buffer_size=buffer_size, no_cookie=no_cookie)
    except BaseException:
        sock.close()
        raise
    return sock


def _send_rest(sock: socket.socket, rest: memoryview) -> None:
    """Send what the SYN did not carry, waiting for the handshake if needed."""
    while rest:
        try:
            n = sock.send(rest)
        except BlockingIOError:
            _, writable, _ = select.select([], [sock], [], sock.gettimeout())
            if not writable:
                raise TimeoutError("PEP connection timed out") from None
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, errno.errorcode.get(err, "connect failed")) from None
            continue
        rest = rest[n:]
