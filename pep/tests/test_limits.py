"""Timeouts and connection limits (a PEP with short timeouts and a small per-client limit)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
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
    request,
    wait_for,
)

from mec_pep.core import MAX_RANGES
from mts_lab.line import Lab, in_netns

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


PER_CLIENT = 5


@pytest.fixture(scope="module")
def pep(start_pep: Callable[..., PepProcess]) -> PepProcess:
    return start_pep(
        handshake_timeout=1,
        idle_timeout=2,
        half_open_timeout=2,
        max_flows_per_client=PER_CLIENT,
    )


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True if the PEP ends the connection (FIN or RST) within ``seconds``."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _refused_at_once(connect: Callable[[], socket.socket]) -> bool:
    """True if a new connection is ended by the PEP within 5 s. The PEP's RST may arrive
    before connect() returns (a fast relay refuses at accept): that counts too."""
    try:
        sock = connect()
    except ConnectionResetError:
        return True
    with sock:
        return _closed_within(sock, 5)


def _refused(pep: PepProcess, reason: str) -> int:
    return int(pep.get("/pep/v1/stats").json()["refused"].get(reason, 0))


def _aborted(pep: PepProcess, reason: str) -> int:
    return int(pep.get("/pep/v1/stats").json()["aborted"].get(reason, 0))


def test_silent_client_is_closed_after_the_handshake_timeout(lab: Lab, pep: PepProcess) -> None:
    before = _refused(pep, "handshake timeout")
    address = (lab.pep_client_side_ip, TLV_PORT)
    with in_netns(lab.client_ns, lambda: socket.create_connection(address, timeout=5)) as sock:
        started = time.monotonic()
        assert _closed_within(sock, 5)
        assert 0.9 < time.monotonic() - started < 3.5
    assert _refused(pep, "handshake timeout") == before + 1


@pytest.mark.parametrize("mode", ["tlv", "transparent"])
def test_idle_flow_is_reset_after_the_idle_timeout(
    lab: Lab, pep: PepProcess, server: DataServer, mode: str
) -> None:
    before = _aborted(pep, "idle timeout")
    with CONNECTORS[mode](lab, server.address) as sock:
        sock.sendall(request(b"E") + b"hi")
        assert sock.recv(2) == b"hi"
        started = time.monotonic()
        with pytest.raises(ConnectionResetError):
            sock.settimeout(6)
            sock.recv(1)
        assert 1.9 < time.monotonic() - started < 4.5
    assert _aborted(pep, "idle timeout") == before + 1


def test_unanswered_wan_connect_is_refused_after_the_handshake_timeout(
    lab: Lab, pep: PepProcess
) -> None:
    """The server's namespace drops the WAN leg's SYNs: the PEP resets the UE's connection
    once the connect is older than the handshake timeout (1 s here; the relays check once
    a second) and counts it as a failed connect; a SOCKS5 client hears reply 6 (TTL
    expired, socks5.reply_for_errno(ETIMEDOUT)) instead."""
    port, table = 7999, "pep_test_drop"
    lab.sh(lab.server_ns, f"nft add table inet {table} && nft 'add chain inet {table} input "
           f"{{ type filter hook input priority 0; }}' && "
           f"nft add rule inet {table} input tcp dport {port} drop")  # fmt: skip
    try:
        before = _refused(pep, "connect failed")
        with connect_direct(lab, (lab.server_ip, port)) as sock:
            started = time.monotonic()
            assert _closed_within(sock, 5)
            assert 0.9 < time.monotonic() - started < 3.5
        started = time.monotonic()
        with pytest.raises(ConnectionRefusedError, match="reply 6"):
            connect_socks5(lab, (lab.server_ip, port))
        assert 0.9 < time.monotonic() - started < 3.5
        wait_for(lambda: _refused(pep, "connect failed") == before + 2, what="the refusals")
    finally:
        lab.sh(lab.server_ns, f"nft delete table inet {table}")


def test_half_open_flow_is_reset_after_its_timeout(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    before = _aborted(pep, "half-open timeout")
    with connect_direct(lab, server.address) as sock:
        sock.sendall(request(b"H"))  # the server holds and never closes
        sock.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionResetError):
            sock.settimeout(6)
            sock.recv(1)
    assert _aborted(pep, "half-open timeout") == before + 1


def _limit_holds(
    lab: Lab, pep: PepProcess, server: DataServer, connect: Callable[..., socket.socket],
    count: int, reason: str, lift: Callable[[], None] = lambda: None,
) -> None:  # fmt: skip
    """``count`` flows held, the next one refused at once and counted as ``reason``; once
    they are closed (and ``lift()`` ran), room again."""
    wait_for(lambda: pep.get("/pep/v1/stats").json()["flows"] == 0, what="no flows left")
    held = [connect(lab, server.address) for _ in range(count)]
    try:
        for sock in held:
            sock.sendall(request(b"E") + b"x")
            assert sock.recv(1) == b"x"
        before = _refused(pep, reason)
        assert _refused_at_once(lambda: connect(lab, server.address))
        assert _refused(pep, reason) == before + 1
    finally:
        for sock in held:
            sock.close()
        lift()
    wait_for(lambda: pep.get("/pep/v1/stats").json()["flows"] == 0, what="flows closed")
    with connect(lab, server.address) as sock:  # room again
        sock.sendall(request(b"E") + b"y")
        assert sock.recv(1) == b"y"


@pytest.mark.parametrize("mode", ["tlv", "transparent"])
def test_per_client_flow_limit(lab: Lab, pep: PepProcess, server: DataServer, mode: str) -> None:
    _limit_holds(lab, pep, server, CONNECTORS[mode], PER_CLIENT, "per-client flow limit")


def test_limits_changed_at_run_time_hold_for_new_flows(
    lab: Lab, pep: PepProcess, server: DataServer, relay_settings: dict[str, Any]
) -> None:
    """PATCH /config's limits reach the relay (the core copies them: set_limits); the core's
    flow table keeps its size from the start, so it refuses more, clearly."""
    more = pep.request("PATCH", "/pep/v1/config", json={"max_flows": 20001})
    if relay_settings["relay_core"] == "uring":
        assert more.status_code == 409 and "flow table holds 20000" in more.text, more.text
    else:
        assert more.status_code == 200, more.text
    assert pep.request("PATCH", "/pep/v1/config", json={"max_flows": 2}).status_code == 200

    def lift() -> None:
        restored = pep.request("PATCH", "/pep/v1/config", json={"max_flows": 20000})
        assert restored.status_code == 200, restored.text

    _limit_holds(lab, pep, server, connect_direct, 2, "flow limit", lift)


def test_access_lists_beyond_the_core_are_refused_and_change_nothing(
    pep: PepProcess, relay_settings: dict[str, Any]
) -> None:
    """More networks than the core's table takes: a 409 on the core, and the lists stay as
    they were; the Python relay takes them."""
    before = pep.get("/pep/v1/config").json()["allowed_destinations"]
    many = [f"10.250.{i // 256}.{i % 256}/32" for i in range(MAX_RANGES + 1)]
    patched = pep.request("PATCH", "/pep/v1/config", json={"allowed_destinations": many})
    if relay_settings["relay_core"] == "uring":
        assert patched.status_code == 409 and "at most" in patched.text, patched.text
        assert pep.get("/pep/v1/config").json()["allowed_destinations"] == before
    else:
        assert patched.status_code == 200, patched.text
    restored = pep.request("PATCH", "/pep/v1/config", json={"allowed_destinations": before})
    assert restored.status_code == 200, restored.text
