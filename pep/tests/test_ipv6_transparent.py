"""IPv6 in transparent mode: the UE's source kept, each leg its own congestion control, the ip6
rules removed at exit, deny by default for IPv6 clients (test_transparent's tests over IPv6; its
crash clean-up test runs over both IP versions).

Apart from test_dual_stack.py: each test runs its own PEP (with other settings), which must not
share the lab's ports and nftables table with that module's PEP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pep_support import (
    DUAL_STACK,
    RELAYS,
    DataServer,
    PepProcess,
    connect_direct,
    connect_socks5,
    request,
)

from mts_lab.line import Lab

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


def test_wan_leg_keeps_the_ue_ipv6_address(
    lab: Lab, start_pep: Callable[..., PepProcess], server6: DataServer
) -> None:
    pep = start_pep(
        keep_ue_source="true",
        ran_congestion_control="reno",
        wan_congestion_control="cubic",
        **DUAL_STACK,
    )
    try:
        tables = lab.sh(lab.pep_ns, "nft list tables")
        assert "table ip6 mts_pep" in tables
        with connect_direct(lab, server6.address) as sock:
            sock.sendall(request(b"E") + b"src")
            assert sock.recv(3) == b"src"
            assert server6.peers[-1] != sock.getsockname()[:2]  # its own connection
            (flow,) = pep.get("/pep/v1/flows").json()["flows"]  # each leg its own algorithm
            assert flow["ran"]["tcp"]["congestion_control"] == "reno"
            assert flow["wan"]["tcp"]["congestion_control"] == "cubic"
        assert server6.peers[-1][0] == lab.client_ip6  # not the PEP's address
    finally:
        assert pep.stop() == 0
    assert "mts_pep" not in lab.sh(lab.pep_ns, "nft list tables")
    assert "lookup" not in lab.sh(lab.pep_ns, "ip -6 rule show | grep fwmark || true")


def test_ipv6_clients_are_denied_unless_listed(
    lab: Lab, start_pep: Callable[..., PepProcess], server6: DataServer
) -> None:
    pep = start_pep(allowed_destinations=DUAL_STACK["allowed_destinations"])
    try:
        with pytest.raises((ConnectionResetError, ConnectionError, AssertionError)):
            connect_socks5(lab, server6.address, pep_host=lab.pep_client_side_ip6)
        refused = pep.get("/pep/v1/stats").json()["refused"]
        assert refused.get("client not allowed", 0) >= 1
    finally:
        assert pep.stop() == 0
