"""The TFO opt-in TLV of the research PEP (000 §1.4–1.5), as the PEP reads it.

Wire format (byte order fixed here and in docs/pep.md; compatible with the research
library on x86, which writes its header in host byte order)::

    header, 4 bytes:  version (u8) = 1 | count (u8) = options that follow | magic (u16, LE) = 0xBEEF
                      on the wire: 01 nn EF BE
    option, 8 bytes:  type (u8) | length (u8) = 2 or 6 | value (u16) | optional (u32)

    CONNECT     0x0A  length 6, value = destination port (big-endian), optional = IPv4 (big-endian)
    BUFFER_SIZE 0x0B  length 6, value = 0, optional = socket buffer size in bytes (u32, LE)

Every other type with a valid length is skipped (room for extensions). The bytes after
``4 + 8·count`` belong to the application and are relayed.
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
    destination, buffer_size = None, None
    for offset in range(HEADER.size, length, OPTION.size):
        kind, size, value, optional = OPTION.unpack_from(data, offset)
        if size not in (2, 6):
            raise TlvError(f"option 0x{kind:02x} has length {size} (2 or 6)")
        if kind == TYPE_CONNECT:
            if destination is not None:
                raise TlvError("more than one CONNECT option")
            destination = _connect_target(size, value, optional)
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
    port = int.from_bytes(value, "big")
    address = ipaddress.IPv4Address(optional)
    if port == 0 or address.is_unspecified:
        raise TlvError(f"CONNECT to {address}:{port}")
    return str(address), port
