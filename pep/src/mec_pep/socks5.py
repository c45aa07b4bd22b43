"""SOCKS5 (RFC 1928), the subset a PEP needs: no authentication, CONNECT, IPv4 and IPv6."""

from __future__ import annotations

import errno
import ipaddress
import socket
import struct
from dataclasses import dataclass

VERSION = 5
NO_AUTH = 0x00
NO_ACCEPTABLE_METHOD = 0xFF
CMD_CONNECT = 0x01
ATYP_IPV4, ATYP_DOMAIN, ATYP_IPV6 = 0x01, 0x03, 0x04
_ADDRESS_SIZE = {ATYP_IPV4: 4, ATYP_IPV6: 16}

# Reply codes (RFC 1928 §6).
SUCCEEDED = 0x00
GENERAL_FAILURE = 0x01
NOT_ALLOWED = 0x02
NETWORK_UNREACHABLE = 0x03
HOST_UNREACHABLE = 0x04
CONNECTION_REFUSED = 0x05
TTL_EXPIRED = 0x06
COMMAND_NOT_SUPPORTED = 0x07
ADDRESS_TYPE_NOT_SUPPORTED = 0x08


class Socks5Error(ValueError):
    """A malformed or unsupported request; ``reply`` is the code to answer with, if any."""

    def __init__(self, message: str, reply: int | None = None) -> None:
        super().__init__(message)
        self.reply = reply


@dataclass(frozen=True)
class Greeting:
    methods: bytes
    length: int


@dataclass(frozen=True)
class Request:
    destination: tuple[str, int]
    length: int


def parse_greeting(data: bytes) -> Greeting | None:
    """VER NMETHODS METHODS...; None means "need more bytes"."""
    if len(data) < 2:
        if data and data[0] != VERSION:
            raise Socks5Error(f"version {data[0]}, expected 5")
        return None
    version, count = data[0], data[1]
    if version != VERSION:
        raise Socks5Error(f"version {version}, expected 5")
    if count == 0:
        raise Socks5Error("no authentication method offered")
    if len(data) < 2 + count:
        return None
    return Greeting(bytes(data[2 : 2 + count]), 2 + count)


def parse_request(data: bytes) -> Request | None:
    """VER CMD RSV ATYP DST.ADDR DST.PORT; None means "need more bytes"."""
    if len(data) < 4:
        return None
    version, command, reserved, atyp = data[0], data[1], data[2], data[3]
    if version != VERSION or reserved != 0:
        raise Socks5Error(f"bad request header {data[:4].hex()}", GENERAL_FAILURE)
    if command != CMD_CONNECT:
        raise Socks5Error(f"command {command} (only CONNECT)", COMMAND_NOT_SUPPORTED)
    size = _ADDRESS_SIZE.get(atyp)
    if size is None:
        # Domain names would need a resolver on the PEP: absent (resolve on the client).
        raise Socks5Error(f"address type {atyp} (IPv4, IPv6 only)", ADDRESS_TYPE_NOT_SUPPORTED)
    length = 4 + size + 2
    if len(data) < length:
        return None
    address = ipaddress.ip_address(bytes(data[4 : 4 + size]))
    (port,) = struct.unpack_from("!H", data, 4 + size)
    if port == 0 or address.is_unspecified:
        raise Socks5Error(f"CONNECT to {address} port {port}", HOST_UNREACHABLE)
    return Request((str(address), port), length)


def method_reply(method: int) -> bytes:
    return bytes((VERSION, method))


def reply(code: int, bound: tuple[str, int] = ("0.0.0.0", 0)) -> bytes:
    """A reply with the address the PEP bound toward the server (its family's ATYP)."""
    if ":" in bound[0]:
        atyp, address = ATYP_IPV6, socket.inet_pton(socket.AF_INET6, bound[0])
    else:
        atyp, address = ATYP_IPV4, socket.inet_aton(bound[0])
    return bytes((VERSION, code, 0, atyp)) + address + struct.pack("!H", bound[1])


def reply_for_errno(err: int) -> int:
    """The reply code for a failed connect to the destination."""
    return {
        errno.ECONNREFUSED: CONNECTION_REFUSED,
        errno.ENETUNREACH: NETWORK_UNREACHABLE,
        errno.EHOSTUNREACH: HOST_UNREACHABLE,
        errno.ETIMEDOUT: TTL_EXPIRED,
    }.get(err, GENERAL_FAILURE)
