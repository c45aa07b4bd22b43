"""TCP Prague as a BPF struct_ops CCA: its alpha update (the kernel's code through
BPF_PROG_TEST_RUN) and a Prague flow through the emulator's DualPI2 bottleneck."""

from __future__ import annotations

import secrets
import socket
import statistics
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from l4s_support import NEEDS_ROOT, REPO

from mec_l4s.efm import Technique
from mec_l4s.prague import ALPHA_MAX, Prague
from mts_lab.l4s.bed import WanLine, connect, marking, serve_once, tcp_info_rtt_ms
from mts_lab.l4s.diagnose import CeCounters, Flow

PRAGUE_OBJ = REPO / "build/bpf/prague.bpf.o"
LOADER = REPO / "build/bin/meld-loader"

pytestmark = [pytest.mark.bpf, NEEDS_ROOT, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def prague() -> Iterator[Prague]:
    assert PRAGUE_OBJ.exists() and LOADER.exists(), (
        "make build/bpf/prague.bpf.o build/bin/meld-loader"
    )
    tag = secrets.token_hex(3)
    cca = Prague.load(LOADER, PRAGUE_OBJ, Path(f"/sys/fs/bpf/mts-prague-{tag}"), f"prague_{tag}")
    try:
        yield cca
    finally:
        cca.close()


def test_alpha_is_an_ewma_with_gain_one_sixteenth(prague: Prague) -> None:
    # one round: alpha - alpha/16 + F/16, in 2^20 fixed point
    alpha = ALPHA_MAX
    for delivered, ce in [(100, 0), (100, 25), (40, 40), (10, 0), (0, 0), (7, 3)]:
        f = (ce << 20) // delivered if delivered else 0
        want = min(alpha - (alpha >> 4) + (f >> 4), ALPHA_MAX)
        alpha_new = prague.alpha_step(alpha, delivered, ce)
        assert alpha_new == want, (alpha, delivered, ce)
        alpha = alpha_new
    # with a constant marked fraction F, alpha converges to F (g = 1/16: 1 - (15/16)^n)
    alpha = 0
    for n in range(1, 121):
        alpha = prague.alpha_step(alpha, 1000, 250)
        if n == 16:
            assert abs(alpha / ALPHA_MAX - 0.25 * (1 - (15 / 16) ** 16)) < 0.002
    assert abs(alpha / ALPHA_MAX - 0.25) < 0.002
    assert prague.alpha_step(ALPHA_MAX, 10, 10) == ALPHA_MAX  # never above 1


def tcp_info(sock: socket.socket) -> tuple[int, int]:
    """(delivered_ce, total_retrans) of struct tcp_info."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    return struct.unpack_from("I", raw, 196)[0], struct.unpack_from("I", raw, 100)[0]


@pytest.fixture(scope="module")
def line() -> Iterator[WanLine]:
    line = WanLine.create(10.0, rate_mbps=20, queue="dualpi2")
    try:
        line.sh(line.client_ns, "sysctl -qw net.ipv4.tcp_ecn=1")  # the receiver asks for ECN
        yield line
    finally:
        line.down()


def test_a_prague_flow_keeps_the_l4s_queue_short(line: WanLine, prague: Prague) -> None:
    """4 s of bulk through a 20 Mbit/s DualPI2 bottleneck: the flow's packets are ECT(1)
    (L queue), come back CE-marked, and the RTT stays near the 20 ms base without loss."""
    rtts: list[float] = []
    info: list[tuple[int, int]] = []

    def send(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, prague.name.encode())
        end = time.monotonic() + 4
        while time.monotonic() < end:
            conn.sendall(b"p" * 65536)
            rtts.append(tcp_info_rtt_ms(conn))
        info.append(tcp_info(conn))

    with marking(line, Technique.OFF, ect1=True) as (_, server):
        port = serve_once(line.server_ns, line.server_ip, send)
        with connect(line.client_ns, line.server_ip, port) as sock:
            sock.settimeout(15)
            while sock.recv(1 << 16):
                pass
        ect1 = server.counters()["ect1"]
    delivered_ce, retrans = info[0]
    assert ect1 > 1000, f"only {ect1} packets left as ECT(1)"
    assert delivered_ce > 0, "no CE mark came back"
    late = rtts[len(rtts) // 2 :]
    # classic TCP fills the queue to the PI target (15 ms) or the buffer; Prague holds the
    # L queue near the 1 ms step
    assert statistics.median(late) < 20 + 10, statistics.median(late)
    assert retrans <= 2, retrans


def test_accurate_ecn_counts_each_mark_the_bottleneck_made(line: WanLine, prague: Prague) -> None:
    """Prague asks for Accurate ECN (its CCA flags; the sysctl here refuses it), so its
    count of CE-marked segments is the bottleneck's: every CE that reached the client,
    counted there by nft, and no more. Classic ECN feedback (ECE held until CWR) counted
    10-40 times the marks on this bed (mts_lab.l4s.diagnose) and starved Prague beside
    CUBIC; the test fails without the AccECN flags."""
    info: list[bytes] = []
    flow = Flow("prague", prague.name)

    def send(conn: socket.socket) -> None:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            conn.sendall(b"p" * 65536)
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(15)
        conn.recv(1)  # the client's close: every ACK has been processed
        info.append(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 280))

    with marking(line, Technique.OFF, ect1=True):
        flow.port = serve_once(line.server_ns, line.server_ip, send, cca=prague.name)
        ce = CeCounters(line, [flow])
        with connect(line.client_ns, line.server_ip, flow.port, prague.name, 15) as sock:
            while sock.recv(1 << 16):
                pass
        for _ in range(100):
            if info:
                break
            time.sleep(0.1)
        arrived = ce.read()
    delivered_ce = struct.unpack_from("I", info[0], 196)[0]
    delivered_e1_bytes = struct.unpack_from("I", info[0], 252)[0]  # AccECN option counters
    assert delivered_e1_bytes > 1_000_000, "no Accurate ECN feedback: not negotiated?"
    assert arrived["prague_ce"] > 0, "the bottleneck marked nothing: nothing was tested"
    assert delivered_ce == arrived["prague_ce"], (delivered_ce, arrived)
