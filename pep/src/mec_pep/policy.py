"""Who may use the PEP and where it may connect (deny by default: no open relay)."""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Iterable

_LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
_U32 = struct.Struct("!I")


class _Ranges:
    """IPv4 networks as (network, mask) integers: a membership test is a few operations."""

    def __init__(self, networks: Iterable[ipaddress.IPv4Network]) -> None:
        self.networks = list(networks)
        self._pairs = [(int(n.network_address), int(n.netmask)) for n in self.networks]

    def __contains__(self, address: str) -> bool:
        try:
            (value,) = _U32.unpack(socket.inet_aton(address))
        except OSError:
            return False
        return any(value & mask == network for network, mask in self._pairs)


class AccessPolicy:
    """Allowed client networks and destination networks.

    Loopback destinations need an explicit loopback entry even under 0.0.0.0/0, so that a
    broad rule does not expose services listening on the PEP host's 127.0.0.0/8.
    """

    def __init__(
        self,
        clients: Iterable[ipaddress.IPv4Network],
        destinations: Iterable[ipaddress.IPv4Network],
    ) -> None:
        self.clients = _Ranges(clients)
        self.destinations = _Ranges(destinations)
        self._loopback = _Ranges(n for n in self.destinations.networks if n.subnet_of(_LOOPBACK))

    def client_allowed(self, address: str) -> bool:
        return address in self.clients

    def destination_allowed(self, address: str) -> bool:
        if address.startswith("127."):
            return address in self._loopback
        return address in self.destinations
