"""10,000 concurrent idle flows, and what each costs the PEP in user-space memory."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pep_support import RELAYS, PepProcess, wait_for

from mts_lab.line import Lab, in_netns

pytestmark = [pytest.mark.netns, pytest.mark.slow]

FLOWS = 10_000
ECHO_PORT = 7007
MAX_USER_MEMORY_PER_FLOW_KIB = 10.0


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


@pytest.fixture(scope="module")
def echo_server(lab: Lab) -> Iterator[tuple[str, int]]:
    proc = lab.popen(
        lab.server_ns,
        [sys.executable, "-m", "mts_lab.pep.bench", "echo", lab.server_ip, str(ECHO_PORT)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield lab.server_ip, ECHO_PORT
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def scale_pep(start_pep: Callable[..., PepProcess]) -> PepProcess:
    return start_pep(max_flows=FLOWS + 100, max_flows_per_client=FLOWS + 100)


def _echo(sock: socket.socket, payload: bytes) -> bytes:
    sock.sendall(payload)
    return sock.recv(len(payload))


def test_10000_concurrent_idle_flows(
    lab: Lab, scale_pep: PepProcess, echo_server: tuple[str, int]
) -> None:
    pep = scale_pep
    warmup = in_netns(lab.client_ns, lambda: socket.create_connection(echo_server, timeout=10))
    assert _echo(warmup, b"warm") == b"warm"
    baseline_kib = pep.rss_kib()

    def open_all() -> list[socket.socket]:
        return [socket.create_connection(echo_server, timeout=30) for _ in range(FLOWS)]

    socks = in_netns(lab.client_ns, open_all)
    try:
        wait_for(
            lambda: pep.get("/pep/v1/stats").json()["flows"] >= FLOWS + 1,
            timeout=60,
            what=f"{FLOWS} flows in the PEP",
        )
        # Every flow is alive end to end: probe a sample of them.
        for sock in random.Random(1).sample(socks, 200):
            assert _echo(sock, b"ping") == b"ping"
        grown_kib = pep.rss_kib() - baseline_kib
        per_flow = grown_kib / FLOWS
        print(f"user-space memory per idle flow: {per_flow:.2f} KiB (RSS +{grown_kib} KiB)")
        assert per_flow <= MAX_USER_MEMORY_PER_FLOW_KIB
        stats = pep.get("/pep/v1/stats").json()
        assert stats["pipes_in_use"] == 0  # idle flows hold no pipe
    finally:
        for sock in socks:
            sock.close()
        warmup.close()
    wait_for(lambda: pep.get("/pep/v1/stats").json()["flows"] == 0, timeout=60, what="all closed")
