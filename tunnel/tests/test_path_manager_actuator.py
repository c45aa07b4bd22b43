"""The path manager's tunnel actuator (path_manager.tunnel_actuator) on a real tunnel: the
decision ``set_active(<UE path ip>, False)`` disables that tunnel path and ``True`` enables
it again; an unreachable tunnel or a bad mapping changes nothing and says why."""

from __future__ import annotations

import os
from collections.abc import Iterator
from ipaddress import IPv4Address

import pytest

from mec_common.health import Health
from mts_lab.tunnel.bed import API_PORT, TunnelBed, path_addr
from path_manager.mptcp import in_netns
from path_manager.tunnel_actuator import TunnelActuator, TunnelPath, parse_paths

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and TUN"),
]


@pytest.fixture
def bed() -> Iterator[TunnelBed]:
    with TunnelBed(sides=("mec",)) as b:
        yield b


def test_decisions_enable_and_disable_tunnel_paths(bed: TunnelBed) -> None:
    api = f"http://127.0.0.1:{API_PORT}/tunnel/v1"
    ue_path = {p: IPv4Address(path_addr(p, "ue")) for p in (1, 2)}
    health = Health()
    actuator = TunnelActuator({ue_path[p]: TunnelPath(api, p) for p in (1, 2)}, bed.token, health)
    with in_netns(bed.ns("mec")):  # the tunnel end's API listens in its namespace
        assert actuator.set_active(ue_path[2], False) == 1
        assert bed.get("mec", "/tunnel/v1/paths/2")["enabled"] is False
        assert bed.get("mec", "/tunnel/v1/paths/1")["enabled"] is True
        assert actuator.set_active(ue_path[2], True) == 1
        assert bed.get("mec", "/tunnel/v1/paths/2")["enabled"] is True
        assert actuator.set_active(IPv4Address("10.99.99.99"), False) == 0  # not a tunnel path
    # wrong token: refused by the tunnel, nothing changes, health says so
    wrong = TunnelActuator({ue_path[1]: TunnelPath(api, 1)}, "not-the-token", health)
    with in_netns(bed.ns("mec")):
        assert wrong.set_active(ue_path[1], False) == 0
    assert bed.get("mec", "/tunnel/v1/paths/1")["enabled"] is True
    assert wrong.errors == 1
    # unreachable tunnel: 0, and the failure in health
    gone = TunnelActuator({ue_path[1]: TunnelPath("http://127.0.0.1:9/tunnel/v1", 1)}, "t", health)
    assert gone.set_active(ue_path[1], False) == 0
    check = health.report()["checks"]["tunnel"]
    assert not check["ok"] and "not applied" in check["detail"], check
    for a in (actuator, wrong, gone):
        a.close()


def test_bad_mapping_is_refused() -> None:
    assert parse_paths('{"10.30.0.1": {"api": "http://x/tunnel/v1/", "path": 2}}') == {
        IPv4Address("10.30.0.1"): TunnelPath("http://x/tunnel/v1", 2)
    }
    bad = [
        "",
        "[]",
        "{}",
        '{"10.30.0.1": {"api": "x"}}',
        '{"nope": {"api": "x", "path": 1}}',
        '{"10.30.0.1": {"api": "x", "path": 0}}',
        '{"10.30.0.1": {"api": "x", "path": true}}',
    ]
    for raw in bad:
        with pytest.raises(ValueError, match="PM_TUNNEL_PATHS"):
            parse_paths(raw)
