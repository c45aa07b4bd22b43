"""What an app may do to its own traffic rules: narrow or toggle what its AppD declared.

An app's traffic rules steer other people's traffic (the UEs'), so the AppD the operator
onboarded is the envelope: through Mp1 an app may switch a rule ACTIVE/INACTIVE and
narrow its filters, never change where traffic goes (action, ``dstInterface``), its
priority or filter type, nor match traffic the declared rule did not. Otherwise an app
could, say, TPROXY the UEs' SSH to its own port (issue 20).
"""

from __future__ import annotations

import ipaddress
from typing import Any

FIXED = ("filterType", "priority", "action", "dstInterface")
NETWORKS = ("srcAddress", "dstAddress", "srcTunnelAddress", "tgtTunnelAddress")
VALUES = ("srcPort", "dstPort", "protocol", "token", "srcTunnelPort", "dstTunnelPort")
SCALARS = ("qCI", "dSCP", "tC")


def widening(declared: dict[str, Any], wanted: dict[str, Any]) -> str | None:
    """Why ``wanted`` is not the ``declared`` rule narrowed or toggled; None if it is."""
    for key in FIXED:
        if wanted.get(key) != declared.get(key):
            return f"{key} differs from the AppD's rule; an app may only change the state " \
                "of its traffic rules and narrow their filters"  # fmt: skip
    envelope = declared.get("trafficFilter") or [{}]  # no filter matches everything
    for n, flt in enumerate(wanted.get("trafficFilter") or [{}]):
        if not any(_within(flt, outer) for outer in envelope):
            return f"trafficFilter.{n} matches traffic that no filter of the AppD's rule does"
    return None


def _within(inner: dict[str, Any], outer: dict[str, Any]) -> bool:
    """Does every packet ``inner`` matches also match ``outer``? (An absent list = any.)"""
    for key in NETWORKS:
        if outer.get(key) and not (
            inner.get(key) and all(_in_some(a, outer[key]) for a in inner[key])
        ):
            return False
    for key in VALUES:
        if outer.get(key) and not (
            inner.get(key) and {_norm(v) for v in inner[key]} <= {_norm(v) for v in outer[key]}
        ):
            return False
    return all(outer.get(key) in (None, inner.get(key)) for key in SCALARS)


def _in_some(address: str, networks: list[str]) -> bool:
    net = ipaddress.ip_network(address, strict=False)
    for other in networks:
        outer = ipaddress.ip_network(other, strict=False)
        if net.version == outer.version and net.subnet_of(outer):  # type: ignore[arg-type]
            return True
    return False


def _norm(value: Any) -> str:
    text = str(value).strip().lower()
    return {"6": "tcp", "17": "udp"}.get(text, text)
