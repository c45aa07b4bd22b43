"""Transparent mode: the UE's source address on the WAN leg, and TPROXY rule hygiene."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from pep_support import DataServer, PepProcess, connect_direct, request

from mts_lab.line import Lab

pytestmark = pytest.mark.netns


def _echo_once(lab: Lab, server: DataServer) -> tuple[str, int]:
    with connect_direct(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"ping")
        assert sock.recv(4) == b"ping"
        return sock.getsockname()


def _rules(lab: Lab) -> tuple[str, str, str]:
    return (
        lab.sh(lab.pep_ns, "nft list tables"),
        lab.sh(lab.pep_ns, "ip rule show"),
        lab.sh(lab.pep_ns, "ip route show table all | grep -E '^local default' || true"),
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


def test_rules_are_removed_at_exit_and_after_a_crash(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer, tmp_path_factory
) -> None:
    state = tmp_path_factory.mktemp("crash")
    crashed = PepProcess(lab, state, tproxy_mark=0x77, tproxy_table=177)
    _echo_once(lab, server)
    crashed.proc.send_signal(signal.SIGKILL)
    crashed.proc.wait()
    tables, rules, routes = _rules(lab)
    assert "mts_pep" in tables and "0x77 lookup 177" in rules  # left behind

    # The next run (other mark and table) removes the leftovers before installing its own.
    pep = PepProcess(lab, state, tproxy_mark=0x78, tproxy_table=178)
    try:
        tables, rules, _ = _rules(lab)
        assert "0x77" not in rules and rules.count("0x78 lookup 178") == 1
        assert tables.count("mts_pep") == 1
        _echo_once(lab, server)
    finally:
        assert pep.stop() == 0
    tables, rules, routes = _rules(lab)
    assert "mts_pep" not in tables
    assert "0x78" not in rules
    assert "table 178" not in routes
