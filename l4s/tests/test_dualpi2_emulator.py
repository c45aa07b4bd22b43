"""ECN through the emulator and DualPI2 at its WAN bottleneck (root, namespaces).

A UDP sender on the server side overloads a 5 Mbit/s WAN with packets of each ECN
codepoint; the client reads the codepoint of every datagram it receives (IP_RECVTOS).
The kernel drops IPv4 packets whose header checksum is wrong, so a CE mark that arrives
proves the checksum fix too. The control law itself is tested in Go
(services/common/go/aqm/dualpi2_test.go).
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from l4s_support import NEEDS_ROOT

from mec_common.netns import in_netns
from mts_lab.l4s.bed import WanLine

pytestmark = [pytest.mark.netns, NEEDS_ROOT, pytest.mark.timeout(180)]

NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3


@pytest.fixture(scope="module")
def line() -> Iterator[WanLine]:
    # a narrow bottleneck, so that even a sender slowed by a loaded machine overloads it
    line = WanLine.create(5.0, rate_mbps=5, queue="dualpi2")
    try:
        yield line
    finally:
        line.down()


def blast(line: WanLine, ecn: int, seconds: float, mbps: float, catch_up: bool) -> Counter[int]:
    """UDP from server to client at ``mbps``; the ECN codepoints the client received.

    ``catch_up``: a sender that fell behind (a loaded machine) sends back to back until it
    is on schedule again, which keeps an overload an overload; without it, it just goes on
    from now, so that a light load stays free of bursts that would queue (and be marked).
    """

    def rx_socket() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        s.bind((line.client_ip, 0))
        s.settimeout(1.0)
        return s

    def tx_socket() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ecn)
        return s

    rx = in_netns(line.client_ns, rx_socket)
    tx = in_netns(line.server_ns, tx_socket)
    got: Counter[int] = Counter()
    done = threading.Event()

    def receive() -> None:
        while True:
            try:
                _, anc, _, _ = rx.recvmsg(2048, 64)
            except TimeoutError:
                if done.is_set():
                    return
                continue
            for level, kind, data in anc:
                if level == socket.IPPROTO_IP and kind == socket.IP_TOS:
                    got[data[0] & 3] += 1

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    dest = rx.getsockname()
    gap = 1400 * 8 / (mbps * 1e6)
    end = time.monotonic() + seconds
    next_send = time.monotonic()
    while time.monotonic() < end:
        tx.sendto(b"u" * 1400, dest)
        next_send += gap
        delay = next_send - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif not catch_up:
            next_send = time.monotonic()
    done.set()
    reader.join(timeout=60)  # it drains what is still queued, then times out once
    assert not reader.is_alive(), "the receiver did not finish"
    rx.close()
    tx.close()
    return got


def test_ecn_codepoints_cross_the_emulator_and_dualpi2_marks_them(line: WanLine) -> None:
    # far below the rate: every codepoint arrives as sent (never bleached, never another
    # ECT), Not-ECT always. An ECN-capable packet may still meet a queue when a loaded
    # machine stalls the emulator's clock, and be CE-marked (a step mark): at load ~20 one
    # run saw 11 of 45 ECT(1) packets marked, so only most must arrive unmarked.
    for ecn in (NOT_ECT, ECT1, ECT0):
        got = blast(line, ecn, 1.0, 0.5, catch_up=False)
        total = sum(got.values())
        assert total > 25 and set(got) <= {ecn, CE} and got[ecn] >= 0.5 * total, (ecn, got)
    assert set(blast(line, NOT_ECT, 0.3, 0.5, catch_up=False)) == {NOT_ECT}
    # above the rate: L4S packets sit past the 1 ms step and are CE-marked, not dropped
    got = blast(line, ECT1, 2.0, 40, catch_up=True)
    assert got[CE] > got[ECT1], got
    # a classic ECN flow is marked too once the PI controller has raised p′ (p_C = p′²)
    got = blast(line, ECT0, 3.0, 40, catch_up=True)
    assert got[CE] > 0, got
