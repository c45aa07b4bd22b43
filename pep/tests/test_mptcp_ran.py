"""The RAN leg over MPTCP (``PEP_RAN_MPTCP``): a multi-homed UE downloads through the PEP.

The lab gets a second "cell" between the UE (client) and the PEP namespace::

    [UE] 10.201.1.2 ── cell 1 ── 10.201.1.1 [PEP] 10.201.2.1 ── 10.201.2.2 [server]
         10.201.3.2 ── cell 2 ── 10.201.3.1

The UE is an ordinary multi-homed MPTCP client (in-kernel path manager, a ``subflow``
endpoint on its cell-2 address, source routing per cell). The PEP namespace runs the
userspace MPTCP path manager, i.e. the path manager's ``MptcpActuator``: it learns the
subflows of the PEP's RAN legs and switches them between active and backup. The UE is the
client, so the PEP *accepts* the MPTCP connection and the UE's MP_JOIN reaches the PEP's
listener (through TPROXY in transparent mode). Each cell is a 40 Mbit/s tbf so that the
bytes per subflow over half a second tell which paths carry the download.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from ipaddress import IPv4Address
from typing import Any

import pytest
from pep_support import (
    RELAYS,
    DataServer,
    PepProcess,
    connect_socks5,
    expected_digest,
    receive_digest,
    recv_exact,
    request,
    send_stream,
)

from mts_lab.line import Lab, in_netns
from mts_lab.mptcp import acked_growth
from path_manager.actuation import MptcpActuator

pytestmark = pytest.mark.netns

CELL = {1: "10.201.1.2", 2: "10.201.3.2"}
CELL_RATE = "40mbit"
DOWNLOAD = 60_000_000  # bytes: ~6 s at the two cells' 80 Mbit/s, enough for three phases


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.fail("PEP tests need root (network namespaces, TPROXY, MPTCP)")
    lab = Lab.create("pmp")
    try:
        _add_second_cell(lab)
        yield lab
    finally:
        lab.down()


def _add_second_cell(lab: Lab) -> None:
    lab._link(lab.client_ns, "c1", CELL[2], "pc1", "10.201.3.1")
    ue, pep = lab.client_ns, lab.pep_ns
    for cell, (ue_if, gateway) in {1: ("c0", "10.201.1.1"), 2: ("c1", "10.201.3.1")}.items():
        lab.sh(ue, f"ip rule add from {CELL[cell]} table {cell}")
        lab.sh(ue, f"ip route add default via {gateway} dev {ue_if} table {cell}")
    lab.sh(ue, "ip mptcp limits set subflows 4 add_addr_accepted 4")
    lab.sh(ue, f"ip mptcp endpoint add {CELL[2]} dev c1 subflow")
    lab.sh(pep, "sysctl -qw net.mptcp.pm_type=1")  # userspace PM: the MptcpActuator
    for pep_if in ("pc0", "pc1"):  # toward the UE: the radio's rate
        lab.sh(pep, f"tc qdisc add dev {pep_if} root tbf rate {CELL_RATE} burst 32k latency 50ms")


@pytest.fixture(scope="module")
def actuator(lab: Lab) -> Iterator[MptcpActuator]:
    act = MptcpActuator(lab.pep_ns)
    act.start()
    try:
        yield act
    finally:
        act.close()


@pytest.fixture(scope="module")
def mptcp_pep(
    start_pep: Callable[..., PepProcess], actuator: MptcpActuator, server: DataServer
) -> PepProcess:
    return start_pep(
        ran_mptcp="true",
        allowed_clients="10.201.1.0/24,10.201.3.0/24",  # every cell's UE addresses
        tproxy_ports=server.address[1],  # transparent joins need a listener on this port
        ran_sndbuf=256 * 1024,  # small subflow queues: a switch takes effect at once
    )


def mptcp_dial(target: tuple[str, int], timeout: float = 30) -> socket.socket:
    """An MPTCP connection from the UE's cell-1 address (the UE's kernel adds cell 2)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_MPTCP)
    sock.settimeout(timeout)
    sock.bind((CELL[1], 0))
    sock.connect(target)
    return sock


class Download:
    """Reads a checksummed download in a thread."""

    def __init__(self, sock: socket.socket, size: int) -> None:
        self.sock = sock
        self.result: tuple[int, str] | None = None
        sock.sendall(request(b"D", size))
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.result = receive_digest(self.sock)

    def wait(self, timeout: float = 60) -> tuple[int, str]:
        self.thread.join(timeout)
        assert self.result is not None, "download did not finish"
        return self.result


def growth_over(lab: Lab, seconds: float) -> dict[int, int]:
    """Bytes acked by the UE per cell over the PEP's subflows toward it."""
    return acked_growth(lab.pep_ns, CELL, seconds)


def wait_for_subflows(actuator: MptcpActuator, old_tokens: set[int]) -> int:
    """The token of a new MPTCP connection with a subflow toward every cell."""
    wanted = {IPv4Address(ip) for ip in CELL.values()}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        remotes: dict[int, set[IPv4Address]] = {}
        for token, _, remote in actuator.subflows():
            remotes.setdefault(token, set()).add(remote[0])
        for token, paths in remotes.items():
            if token not in old_tokens and wanted <= paths:
                return token
        time.sleep(0.05)
    raise AssertionError(f"no new connection over both cells: {actuator.subflows()}")


def tokens(actuator: MptcpActuator) -> set[int]:
    return {token for token, _, _ in actuator.subflows()}


def _download_and_switch(
    lab: Lab, actuator: MptcpActuator, connect: Callable[[], socket.socket]
) -> None:
    """Both cells carry the download; cell 2 backup moves it to cell 1; and back."""
    before = tokens(actuator)
    sock = connect()
    download = Download(sock, DOWNLOAD)
    try:
        wait_for_subflows(actuator, before)
        time.sleep(0.3)
        both = growth_over(lab, 0.5)
        assert min(both.values()) > 300_000, both  # each cell near its 2.5 MB per 0.5 s

        assert actuator.set_active(IPv4Address(CELL[2]), False) >= 1
        time.sleep(0.2)  # what was in flight on cell 2 drains
        only_first = growth_over(lab, 0.5)
        assert only_first[1] > 1_000_000, only_first
        assert only_first[2] < 0.02 * only_first[1], only_first

        actuator.set_active(IPv4Address(CELL[2]), True)
        time.sleep(0.3)
        again = growth_over(lab, 0.5)
        assert again[2] > 300_000, again
        assert download.wait() == (DOWNLOAD, expected_digest(DOWNLOAD))
    finally:
        actuator.set_active(IPv4Address(CELL[2]), True)
        sock.close()


def test_transparent_download_uses_both_cells_and_follows_the_path_manager(
    lab: Lab, mptcp_pep: PepProcess, server: DataServer, actuator: MptcpActuator
) -> None:
    _download_and_switch(
        lab, actuator, lambda: in_netns(lab.client_ns, lambda: mptcp_dial(server.address))
    )
    # The PEP relayed it (it is a split connection, not routed): one flow, MPTCP RAN leg.
    stats = mptcp_pep.get("/pep/v1/stats").json()
    assert stats["accepted"] >= 1
    assert server.peers[-1][0] == lab.pep_server_side_ip


def test_socks5_download_over_mptcp(
    lab: Lab, mptcp_pep: PepProcess, server: DataServer, actuator: MptcpActuator
) -> None:
    """An explicit mode: the UE's MP_JOIN goes to the PEP's own address over cell 2."""
    _download_and_switch(
        lab, actuator, lambda: connect_socks5(lab, server.address, dial=mptcp_dial)
    )


def test_a_plain_tcp_ue_falls_back_to_tcp(
    lab: Lab, mptcp_pep: PepProcess, server: DataServer
) -> None:
    size = 5_000_000
    sock = in_netns(lab.client_ns, lambda: socket.create_connection(server.address, timeout=30))
    with sock:
        sock.sendall(request(b"D", size))
        mptcp_now = lab.sh(lab.pep_ns, "ss -HMn state established")
        assert receive_digest(sock) == (size, expected_digest(size))
    assert mptcp_now.strip() == "", mptcp_now  # the RAN leg fell back to plain TCP


def test_upload_over_mptcp_is_relayed_intact(
    lab: Lab, mptcp_pep: PepProcess, server: DataServer
) -> None:
    """The other direction: splice reads from the MPTCP socket."""
    size = 20_000_000
    with in_netns(lab.client_ns, lambda: mptcp_dial(server.address)) as sock:
        sock.sendall(request(b"U", size))
        send_stream(sock, size)
        assert recv_exact(sock, 64).decode() == expected_digest(size)
