"""The relay in real namespaces (client ─ PEP ─ server), through every mode (each mode's
closing behaviour, over IPv4 and IPv6: test_dual_stack)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pep_support import (
    CONNECTORS,
    RELAYS,
    TLV_PORT,
    DataServer,
    PepProcess,
    connect_direct,
    connect_socks5,
    connect_tlv,
    expected_digest,
    receive_digest,
    request,
    send_stream,
)

from mts_lab.line import Lab, in_netns

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


MODES = list(CONNECTORS)
GB = 1 << 30
PRELOAD = Path(__file__).resolve().parents[2] / "build" / "lib" / "libpep_preload.so"


def stats(pep: PepProcess) -> dict:
    response = pep.get("/pep/v1/stats")
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("mode", MODES)
def test_1gb_checksummed_both_ways(
    lab: Lab, pep: PepProcess, server: DataServer, mode: str
) -> None:
    connect = CONNECTORS[mode]
    before = stats(pep)
    with connect(lab, server.address) as sock:
        sock.sendall(request(b"U", GB))
        send_stream(sock, GB)
        assert sock.recv(64).decode() == expected_digest(GB)
    with connect(lab, server.address) as sock:
        sock.sendall(request(b"D", GB))
        assert receive_digest(sock) == (GB, expected_digest(GB))
    after = stats(pep)
    assert after["bytes_from_ue"] - before["bytes_from_ue"] >= GB
    assert after["bytes_to_ue"] - before["bytes_to_ue"] >= GB
    assert after["established"] - before["established"] == 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reverse", [False, True], ids=["upload", "download"])
def test_iperf3(lab: Lab, pep: PepProcess, iperf_server: int, mode: str, reverse: bool) -> None:
    env = dict(os.environ)
    if mode != "transparent":
        port = TLV_PORT if mode == "tlv" else 1080
        env |= {
            "LD_PRELOAD": str(PRELOAD),
            "PEP_PRELOAD": f"{mode}:{lab.pep_client_side_ip}:{port}",
            "PEP_PRELOAD_NETS": "10.201.2.0/24",
        }
    before = stats(pep)
    cmd = ["iperf3", "-c", lab.server_ip, "-p", str(iperf_server), "-t", "2", "-P", "2", "-J"]
    done = subprocess.run(
        ["ip", "netns", "exec", lab.client_ns, *cmd, *(["-R"] if reverse else [])],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)["end"]["sum_received"]
    assert result["bits_per_second"] > 1e8, result
    after = stats(pep)
    relayed = "bytes_to_ue" if reverse else "bytes_from_ue"
    assert after[relayed] - before[relayed] >= result["bytes"]
    assert after["established"] - before["established"] == 3  # control + 2 streams


def test_denied_destination_is_refused(lab: Lab, pep: PepProcess, server: DataServer) -> None:
    """Only PEP_ALLOWED_DESTINATIONS (10.201.2.0/24 here) may be reached: no open relay."""
    denied = (lab.client_ip, 22)  # outside the allowed destinations
    before = stats(pep)["refused"].get("destination not allowed", 0)
    with pytest.raises(ConnectionRefusedError, match="reply 2"):  # 2 = not allowed
        connect_socks5(lab, denied)
    with connect_tlv(lab, denied) as sock, pytest.raises(ConnectionResetError):
        sock.recv(1)
    after = stats(pep)["refused"].get("destination not allowed", 0)
    assert after - before == 2


def test_connection_to_a_closed_port_is_reported(lab: Lab, pep: PepProcess) -> None:
    with pytest.raises(ConnectionRefusedError, match="reply 5"):  # 5 = connection refused
        connect_socks5(lab, (lab.server_ip, 9))


def _raw_tlv_client(lab: Lab) -> socket.socket:
    pep_address = (lab.pep_client_side_ip, TLV_PORT)
    return in_netns(lab.client_ns, lambda: socket.create_connection(pep_address, timeout=5))


BAD_TLVS = {
    "garbage": b"GET / HTTP/1.1\r\n\r\n",
    "wrong magic": bytes([1, 1, 0xBE, 0xEF]) + bytes([0x0A, 6, 0, 80, 10, 201, 2, 2]),
    "wrong version": bytes([2, 1, 0xEF, 0xBE]) + bytes([0x0A, 6, 0, 80, 10, 201, 2, 2]),
    "oversized": bytes([1, 200, 0xEF, 0xBE]) + bytes(8 * 200),
    "bad option length": bytes([1, 1, 0xEF, 0xBE]) + bytes([0x0A, 9, 0, 80, 10, 201, 2, 2]),
    "no connect": bytes([1, 1, 0xEF, 0xBE]) + bytes([0x0B, 6, 0, 0, 0, 0, 0, 1]),
    "truncated": bytes([1, 2, 0xEF, 0xBE]) + bytes([0x0A, 6, 0, 80]),  # then FIN
}


def test_bad_tlvs_close_only_their_own_connection(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    good = connect_tlv(lab, server.address)
    good.sendall(request(b"E"))
    for name, payload in BAD_TLVS.items():
        bad = _raw_tlv_client(lab)
        bad.sendall(payload)
        if name == "truncated":
            bad.shutdown(socket.SHUT_WR)
        with contextlib.suppress(ConnectionResetError):  # an RST is fine too
            assert bad.recv(1) == b"", name  # closed by the PEP
        bad.close()
        good.sendall(name.encode())  # the good flow is untouched
        assert good.recv(100) == name.encode()
    good.close()


def test_silent_clients_do_not_delay_others(lab: Lab, pep: PepProcess, server: DataServer) -> None:
    """Clients that connect and never send their TLV/SOCKS5 header block nobody."""
    silent = [_raw_tlv_client(lab) for _ in range(200)]
    socks = (lab.pep_client_side_ip, 1080)
    silent += [
        in_netns(lab.client_ns, lambda: socket.create_connection(socks, timeout=5))
        for _ in range(50)
    ]
    try:
        started = time.monotonic()
        for connect in (connect_tlv, connect_socks5, connect_direct):
            with connect(lab, server.address) as sock:
                sock.sendall(request(b"E") + b"ping")
                assert sock.recv(4) == b"ping"
        assert time.monotonic() - started < 2.0
    finally:
        for sock in silent:
            sock.close()


def test_tlv_after_bytes_and_buffer_size_option(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    """Bytes sent right behind the TLV are the application's; BUFFER_SIZE is honoured."""
    import pep_tlv

    pep_address = (lab.pep_client_side_ip, TLV_PORT)
    sock = in_netns(lab.client_ns, lambda: socket.socket())
    sock.settimeout(5)
    pep_tlv.send_tlv(
        sock, server.address, pep_address, buffer_size=8 << 20, data=request(b"E") + b"early"
    )
    assert sock.recv(5) == b"early"
    flows = pep.get("/pep/v1/flows", params={"mode": "tlv"}).json()["flows"]
    assert len(flows) == 1
    sock.close()


def test_connect_to_the_pep_itself_is_refused(lab: Lab, pep: PepProcess) -> None:
    """A TLV asking for the PEP's own listener would loop; it is refused."""
    allowed_pep_address = (lab.pep_server_side_ip, TLV_PORT)  # inside 10.201.2.0/24
    with connect_tlv(lab, allowed_pep_address) as sock, contextlib.suppress(ConnectionResetError):
        assert sock.recv(1) == b""
    assert stats(pep)["refused"].get("destination not allowed", 0) >= 1
