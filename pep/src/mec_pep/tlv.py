"""The TFO opt-in TLV of the research PEP (000 §1.4–1.5), as the PEP reads it.

Wire format (byte order fixed here and in docs/pep.md; compatible with the research
library on x86, which writes its header in host byte order)::

    header, 4 bytes:  version (u8) = 1 | count (u8) = options that follow | magic (u16, LE) = 0xBEEF
                      on the wire: 01 nn EF BE
    option, 8 bytes:  type (u8) | length (u8) = 2 or 6 | value (u16) | optional (u32)

    CONNECT     0x0A  length 6, value = destination port (big-endian), optional = IPv4 (big-endian)
    BUFFER_SIZE 0x0B  length 6, value = 0, optional = socket buffer size in bytes (u32, LE)
    CONNECT6    0x0C  length 6, value = destination port (big-endian), optional = IPv6 bytes 0-3
    ADDRESS6    0x0D  length 6, value + optional = the next 6 bytes of that IPv6 address

An IPv6 destination (our extension; the research PEP is IPv4 only) takes three options:
CONNECT6 and right after it two ADDRESS6 (bytes 4-9, then 10-15), address in network
order. Every other type with a valid length is skipped (room for extensions). The bytes
after ``4 + 8·count`` belong to the application and are relayed.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

VERSION = 1
MAGIC = 0xBEEF
HEADER = struct.Struct("<BBH")  # version, count, magic
OPTION = struct.Struct("<BB2s4s")  # type, length, value (raw), optional (raw)
MAX_OPTIONS = 32  # a larger count is refused at once: a TLV is for a few options

TYPE_INFO = 0x01
TYPE_CONNECT = 0x0A
TYPE_BUFFER_SIZE = 0x0B
TYPE_CONNECT6 = 0x0C
TYPE_ADDRESS6 = 0x0D


class TlvError(ValueError):
    """The client sent something that is not a valid opt-in TLV."""


@dataclass(frozen=True)
class TlvRequest:
    destination: tuple[str, int]
    buffer_size: int | None  # requested socket buffer size, bytes
    length: int  # bytes the TLV occupies; what follows is application data


def parse(data: bytes) -> TlvRequest | None:
    """Parse the start of a connection; None means "need more bytes". Raises TlvError."""
    if len(data) < 1:
        return None
    if data[0] != VERSION:
        raise TlvError(f"version {data[0]}, expected {VERSION}")
    if len(data) < HEADER.size:
        return None
    _, count, magic = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise TlvError(f"magic 0x{magic:04x}, expected 0x{MAGIC:04x}")
    if count == 0 or count > MAX_OPTIONS:
        raise TlvError(f"{count} options (1..{MAX_OPTIONS} allowed)")
    length = HEADER.size + OPTION.size * count
    if len(data) < length:
        return None
    options = [OPTION.unpack_from(data, o) for o in range(HEADER.size, length, OPTION.size)]
    destination, buffer_size = None, None
    i = 0
    while i < len(options):
        kind, size, value, optional = options[i]
        i += 1
        if size not in (2, 6):
            raise TlvError(f"option 0x{kind:02x} has length {size} (2 or 6)")
        if kind in (TYPE_CONNECT, TYPE_CONNECT6):
            if destination is not None:
                raise TlvError("more than one CONNECT option")
            if kind == TYPE_CONNECT:
                destination = _connect_target(size, value, optional)
            else:
                destination = _connect6_target(size, value, optional, options[i : i + 2])
                i += 2
        elif kind == TYPE_ADDRESS6:
            raise TlvError("ADDRESS6 without CONNECT6 right before it")
        elif kind == TYPE_BUFFER_SIZE:
            if size != 6:
                raise TlvError("BUFFER_SIZE needs length 6")
            buffer_size = int.from_bytes(optional, "little")
    if destination is None:
        raise TlvError("no CONNECT option")
    return TlvRequest(destination, buffer_size, length)


def _connect_target(size: int, value: bytes, optional: bytes) -> tuple[str, int]:
    if size != 6:
        raise TlvError("CONNECT needs length 6")
    return _target(int.from_bytes(value, "big"), ipaddress.IPv4Address(optional))


def _connect6_target(
    size: int, value: bytes, optional: bytes, rest: list[tuple[int, int, bytes, bytes]]
) -> tuple[str, int]:
    if size != 6:
        raise TlvError("CONNECT6 needs length 6")
    if len(rest) != 2 or any(kind != TYPE_ADDRESS6 or n != 6 for kind, n, _, _ in rest):
        raise TlvError("CONNECT6 needs two ADDRESS6 options (length 6) right after it")
    raw = optional + b"".join(v + o for _, _, v, o in rest)
    return _target(int.from_bytes(value, "big"), ipaddress.IPv6Address(raw))


def _target(port: int, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> tuple[str, int]:
    if port == 0 or address.is_unspecified:
        raise TlvError(f"CONNECT to {address} port {port}")
    return str(address), port
