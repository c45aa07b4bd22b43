"""Who may use the PEP and where it may connect (deny by default: no open relay)."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_LOOPBACK = (ipaddress.IPv4Network("127.0.0.0/8"), ipaddress.IPv6Network("::1/128"))
_CACHE_LIMIT = 65536  # addresses remembered per range list (UEs repeat; bounded memory)


def address_value(address: str) -> tuple[int, int] | None:
    """(family, address as an integer) of a literal IPv4/IPv6 address; None if not one."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return family, int.from_bytes(socket.inet_pton(family, address), "big")
        except OSError:
            continue
    return None


class _Ranges:
    """Networks of both families as (family, network, mask) integers.

    Answers are cached per address string: a new flow's check is one dict lookup.
    """

    def __init__(self, networks: Iterable[Network]) -> None:
        self.networks = list(networks)
        self._triples = [
            (
                socket.AF_INET if n.version == 4 else socket.AF_INET6,
                int(n.network_address),
                int(n.netmask),
            )
            for n in self.networks
        ]
        self._cache: dict[str, bool] = {}

    def __contains__(self, address: str) -> bool:
        known = self._cache.get(address)
        if known is not None:
            return known
        parsed = address_value(address)
        found = parsed is not None and any(
            family == parsed[0] and parsed[1] & mask == network
            for family, network, mask in self._triples
        )
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[address] = found
        return found


class AccessPolicy:
    """Allowed client networks and destination networks (IPv4 and IPv6).

    Loopback destinations need an explicit loopback entry even under 0.0.0.0/0 or ::/0, so
    that a broad rule does not expose services listening on the PEP host's loopback.
    """

    def __init__(self, clients: Iterable[Network], destinations: Iterable[Network]) -> None:
        self.clients = _Ranges(clients)
        self.destinations = _Ranges(destinations)
        self._loopback = _Ranges(
            n
            for n in self.destinations.networks
            if any(n.version == lo.version and n.subnet_of(lo) for lo in _LOOPBACK)  # type: ignore[arg-type]
        )
        self._loopback_any = _Ranges(_LOOPBACK)

    @property
    def loopback_networks(self) -> list[Network]:
        """The loopback destinations listed explicitly (the only ones allowed)."""
        return self._loopback.networks

    def client_allowed(self, address: str) -> bool:
        return address in self.clients

    def destination_allowed(self, address: str) -> bool:
        if address in self._loopback_any:
            return address in self._loopback
        return address in self.destinations
