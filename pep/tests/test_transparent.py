"""Transparent mode: the UE's source address on the WAN leg, and TPROXY rule hygiene (over IPv4
and IPv6: the ip6 table and ``ip -6`` policy routing are removed likewise)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
from pep_support import DUAL_STACK, RELAYS, DataServer, PepProcess, connect_direct, request

from mts_lab.line import Lab

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


def _echo_once(lab: Lab, server: DataServer) -> tuple[str, int]:
    with connect_direct(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"ping")
        assert sock.recv(4) == b"ping"
        return sock.getsockname()


def _rules(lab: Lab, ip: str = "ip") -> tuple[str, str, str]:
    """nft tables, policy rules and local default routes; ``ip``: "ip" or "ip -6"."""
    return (
        lab.sh(lab.pep_ns, "nft list tables"),
        lab.sh(lab.pep_ns, f"{ip} rule show"),
        lab.sh(lab.pep_ns, f"{ip} route show table all | grep -E '^local default' || true"),
    )


def test_wan_leg_keeps_the_ue_address(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer
) -> None:
    pep = start_pep(
        keep_ue_source="true", ran_congestion_control="reno", wan_congestion_control="cubic"
    )
    try:
        local = _echo_once(lab, server)
        assert server.peers[-1][0] == lab.client_ip  # not the PEP's address
        assert server.peers[-1] != local  # a separate connection, with its own port
        flows = pep.get("/pep/v1/stats").json()
        assert flows["established"] == 1
        with connect_direct(lab, server.address) as sock:  # each leg its own algorithm
            sock.sendall(request(b"E") + b"cc")
            assert sock.recv(2) == b"cc"
            (flow,) = pep.get("/pep/v1/flows").json()["flows"]
            assert flow["ran"]["tcp"]["congestion_control"] == "reno"
            assert flow["wan"]["tcp"]["congestion_control"] == "cubic"
    finally:
        assert pep.stop() == 0


# family: (PEP settings, `ip` command, the nft table the PEP owns for it)
FAMILIES = {
    "ipv4": ({}, "ip", "table ip mts_pep"),
    "ipv6": (DUAL_STACK, "ip -6", "table ip6 mts_pep"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_rules_are_removed_at_exit_and_after_a_crash(
    lab: Lab,
    server: DataServer,
    server6: DataServer,
    tmp_path_factory,
    family: str,
    relay_settings: dict[str, Any],
) -> None:
    settings, ip, table = FAMILIES[family]
    settings = {**relay_settings, **settings}
    target = server6 if family == "ipv6" else server
    state = tmp_path_factory.mktemp("crash")
    crashed = PepProcess(lab, state, tproxy_mark=0x77, tproxy_table=177, **settings)
    _echo_once(lab, target)
    crashed.proc.send_signal(signal.SIGKILL)
    crashed.proc.wait()
    tables, rules, routes = _rules(lab, ip)
    assert table in tables and "0x77 lookup 177" in rules  # left behind
    assert "table 177" in routes

    # The next run (other mark and table) removes the leftovers before installing its own.
    pep = PepProcess(lab, state, tproxy_mark=0x78, tproxy_table=178, **settings)
    try:
        tables, rules, _ = _rules(lab, ip)
        assert "0x77" not in rules and rules.count("0x78 lookup 178") == 1
        assert tables.count(table) == 1
        _echo_once(lab, target)
    finally:
        assert pep.stop() == 0
    tables, rules, routes = _rules(lab, ip)
    assert "mts_pep" not in tables
    assert "0x78" not in rules
    assert "table 178" not in routes
