"""The REST API of a running PEP: auth, flows, UEs, stats, config, metrics, OpenAPI."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from pep_support import (
    CONNECTORS,
    RELAYS,
    SOCKS_PORT,
    TLV_PORT,
    DataServer,
    PepProcess,
    connect_socks5,
    connect_tlv,
    request,
    wait_for,
)

from mts_lab.line import Lab, in_netns

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


PROBLEM = "application/problem+json"


def test_health_metrics_and_docs_need_no_token(pep: PepProcess) -> None:
    health = pep.get("/healthz", auth=False)
    assert health.status_code == 200, health.text
    assert health.json()["checks"]["relay"]["ok"]
    assert health.json()["checks"]["tproxy"]["ok"]
    metrics = pep.get("/metrics", auth=False)
    assert metrics.status_code == 200
    assert "pep_flows{" in metrics.text and "pep_relayed_bytes_total" in metrics.text
    openapi = pep.get("/openapi.json", auth=False).json()
    assert {"/pep/v1/flows", "/pep/v1/flows/{flow_id}", "/pep/v1/ues", "/pep/v1/config"} <= set(
        openapi["paths"]
    )
    assert pep.get("/docs", auth=False).status_code == 200


@pytest.mark.parametrize("path", ["/pep/v1/flows", "/pep/v1/stats", "/pep/v1/config"])
def test_api_denies_without_a_valid_token(pep: PepProcess, path: str) -> None:
    missing = pep.get(path, auth=False)
    assert missing.status_code == 401
    assert missing.headers["content-type"] == PROBLEM
    wrong = pep.request("GET", path, auth=False, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401


@pytest.mark.parametrize("mode", ["tlv", "transparent"])
def test_flow_state_has_both_legs(lab: Lab, pep: PepProcess, server: DataServer, mode: str) -> None:
    with CONNECTORS[mode](lab, server.address) as sock:
        sock.sendall(request(b"E") + b"x" * 1000)
        assert len(sock.recv(1000)) > 0
        listing = pep.get("/pep/v1/flows", params={"ue": lab.client_ip}).json()
        assert listing["count"] == 1
        flow = listing["flows"][0]
        assert flow["mode"] == mode and flow["ue"] == lab.client_ip
        assert flow["stage"] == "relaying"
        assert flow["destination"] == f"{server.address[0]}:{server.address[1]}"
        assert flow["ran"]["peer"].startswith(lab.client_ip + ":")
        assert flow["wan"]["peer"] == flow["destination"]
        for leg in ("ran", "wan"):
            tcp = flow[leg]["tcp"]
            assert tcp["state"] == "ESTABLISHED"
            assert tcp["rtt_us"] > 0 and tcp["snd_cwnd"] > 0 and tcp["congestion_control"]
        assert flow["bytes_from_ue"] >= 1000
        one = pep.get(f"/pep/v1/flows/{flow['id']}")
        assert one.status_code == 200 and one.json()["id"] == flow["id"]
        assert pep.get("/pep/v1/flows", params={"ue": "10.9.9.9"}).json()["count"] == 0


def test_bad_requests_get_problem_details(pep: PepProcess) -> None:
    for path, status in (
        ("/pep/v1/flows/999999", 404),
        ("/pep/v1/flows/abc", 400),
        ("/pep/v1/flows?ue=not-an-ip", 400),
        ("/pep/v1/ues/10.9.9.9", 404),
        ("/pep/v1/ues/nope", 400),
    ):
        response = pep.get(path)
        assert response.status_code == status, (path, response.text)
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["status"] == status


@pytest.mark.parametrize("mode", ["socks5", "transparent"])
def test_backlog_toward_a_slow_ue_is_visible(
    lab: Lab, pep: PepProcess, server: DataServer, mode: str
) -> None:
    """The server sends 32 MB, the UE does not read: the PEP holds the difference."""
    sock = CONNECTORS[mode](lab, server.address)
    try:
        sock.sendall(request(b"D", 32 << 20))

        def held() -> int:
            ue = pep.get(f"/pep/v1/ues/{lab.client_ip}")
            return int(ue.json()["buffered_toward_ue"]) if ue.status_code == 200 else 0

        wait_for(lambda: held() > 8 << 20, timeout=20, what="backlog toward the UE")
        flow = pep.get("/pep/v1/flows", params={"ue": lab.client_ip}).json()["flows"][0]
        toward_ue = flow["buffered"]["toward_ue"]
        parts = toward_ue["wan_receive_queue"] + toward_ue["pipe"] + toward_ue["ran_send_queue"]
        assert toward_ue["total"] == parts
        ues = pep.get("/pep/v1/ues").json()["ues"]
        assert [u["ue"] for u in ues] == [lab.client_ip]
    finally:
        sock.close()


@pytest.mark.parametrize("mode", ["tlv", "transparent"])
def test_reset_a_flow(lab: Lab, pep: PepProcess, server: DataServer, mode: str) -> None:
    with CONNECTORS[mode](lab, server.address) as sock:
        sock.sendall(request(b"E") + b"x")
        assert sock.recv(1) == b"x"
        flow_id = pep.get("/pep/v1/flows", params={"mode": mode}).json()["flows"][0]["id"]
        assert pep.request("DELETE", f"/pep/v1/flows/{flow_id}").status_code == 204
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    assert pep.get(f"/pep/v1/flows/{flow_id}").status_code == 404


def test_stats_count_what_happened(pep: PepProcess) -> None:
    stats = pep.get("/pep/v1/stats").json()
    assert stats["accepted"] >= stats["established"] > 0
    assert stats["relay_threads"] == 2
    assert stats["listeners"].keys() == {"socks5", "tlv", "transparent"}
    assert stats["tfo_server_enabled"] is True


def test_config_reads_back(pep: PepProcess) -> None:
    config = pep.get("/pep/v1/config").json()
    assert config["tlv_port"] == TLV_PORT and config["socks5_port"] == SOCKS_PORT
    assert config["allowed_clients"] == ["10.201.1.0/24"]
    assert config["tproxy_rules_installed"] is True
    # 16 MiB forced: the kernel doubles it for its bookkeeping.
    assert config["ran_rcvbuf"] == 16 << 20
    assert config["effective_ran_buffers"] == {"rcvbuf": 32 << 20, "sndbuf": 32 << 20}


def _socks_refused(lab: Lab) -> bool:
    address = (lab.pep_client_side_ip, SOCKS_PORT)
    try:
        in_netns(lab.client_ns, lambda: socket.create_connection(address, timeout=2)).close()
    except ConnectionRefusedError:
        return True
    return False


def test_modes_switch_at_run_time(lab: Lab, pep: PepProcess, server: DataServer) -> None:
    off = pep.request("PATCH", "/pep/v1/config", json={"socks5_port": None})
    assert off.status_code == 200, off.text
    assert "socks5" not in off.json()["listeners"]
    assert _socks_refused(lab)
    on = pep.request("PATCH", "/pep/v1/config", json={"socks5_port": SOCKS_PORT})
    assert on.status_code == 200
    with connect_socks5(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"ok")
        assert sock.recv(2) == b"ok"


def test_bad_config_changes_change_nothing(pep: PepProcess) -> None:
    before = pep.get("/pep/v1/config").json()
    for body, status in (
        ({"pipe_size": 4096}, 400),  # not changeable at run time
        ({"ran_rcvbuf": -1}, 400),
        ({"allowed_clients": ["10.0.0.1/8"]}, 400),  # host bits set
        ({}, 400),
        ({"tlv_port": 8102, "ran_sndbuf": 1 << 20}, 409),  # the API's own port is taken
    ):
        response = pep.request("PATCH", "/pep/v1/config", json=body)
        assert response.status_code == status, (body, response.text)
        assert response.headers["content-type"] == PROBLEM
    assert pep.get("/pep/v1/config").json() == before


def test_buffers_and_clients_change_at_run_time(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    changed = pep.request(
        "PATCH", "/pep/v1/config", json={"ran_rcvbuf": 4 << 20, "ran_sndbuf": 4 << 20}
    )
    assert changed.status_code == 200
    assert changed.json()["effective_ran_buffers"] == {"rcvbuf": 8 << 20, "sndbuf": 8 << 20}
    deny = pep.request("PATCH", "/pep/v1/config", json={"allowed_clients": ["10.201.1.128/25"]})
    assert deny.status_code == 200
    try:
        refused = pep.get("/pep/v1/stats").json()["refused"].get("client not allowed", 0)
        sock = connect_tlv(lab, server.address)
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
        sock.close()
        time.sleep(0.2)
        stats = pep.get("/pep/v1/stats").json()
        assert stats["refused"].get("client not allowed", 0) == refused + 1
    finally:
        restore = {
            "allowed_clients": ["10.201.1.0/24"],
            "ran_rcvbuf": 16 << 20,
            "ran_sndbuf": 16 << 20,
        }
        assert pep.request("PATCH", "/pep/v1/config", json=restore).status_code == 200
    with connect_tlv(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"back")
        assert sock.recv(4) == b"back"
