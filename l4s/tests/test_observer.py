"""The observer's RTT on a path with a known delay (root, BPF, the emulator's WAN stage).

client ─ MEC host ═ 20 ms each way ═ server: the marker runs at both endpoints, the
observer on the MEC host's two interfaces (ingress). The round trip is 40 ms plus the
emulator's tick (1 ms) and the hosts' own time; TCP_INFO on the client's socket is the
truth the observer's samples are compared with.
"""

from __future__ import annotations

import socket
import statistics
import struct
import time
from collections.abc import Iterator

import pytest
from l4s_support import MARKER_OBJ, NEEDS_ROOT, REPO

from mec_l4s.efm import Marker, Technique
from mec_l4s.observer import FlowTable, Mode, Observer
from mts_lab.l4s.bed import WanLine, connect, serve_once

OBSERVER_OBJ = REPO / "build/bpf/efm_observer.bpf.o"
DELAY_MS = 20.0
BASE_RTT_MS = 2 * DELAY_MS

pytestmark = [pytest.mark.netns, NEEDS_ROOT, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def line() -> Iterator[WanLine]:
    line = WanLine.create(DELAY_MS)
    try:
        yield line
    finally:
        line.down()


def tcp_info_rtt_ms(sock: socket.socket) -> float:
    """tcpi_rtt (smoothed RTT, µs) of struct tcp_info, at byte offset 68."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return float(struct.unpack_from("I", raw, 68)[0]) / 1000


def measured_download(
    line: WanLine, technique: Technique, seconds: float
) -> tuple[FlowTable, list[float], dict[str, int]]:
    """A paced download with the endpoints marking; the observer's table and TCP_INFO."""
    markers = []
    observer = Observer.load(OBSERVER_OBJ, f"mts-obs-{line.name}")
    try:
        observer.configure()
        observer.attach("m0", line.mec_ns)
        observer.attach("wan0", line.mec_ns)
        for ns, ifname in ((line.client_ns, "c0"), (line.server_ns, "wan0")):
            m = Marker.load(MARKER_OBJ, f"mts-efm-{line.name}-{ns[-1]}")
            markers.append(m)
            m.configure(technique, dynamic_t_max=True)
            m.attach(ifname, ns)

        def paced(conn: socket.socket) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                conn.sendall(b"d" * 8192)
                time.sleep(0.005)

        port = serve_once(line.server_ns, line.server_ip, paced)
        sock = connect(line.client_ns, line.server_ip, port)
        truth = []
        table = FlowTable()
        with sock:
            sock.settimeout(10)
            next_probe = time.monotonic()
            while sock.recv(1 << 16):
                if time.monotonic() >= next_probe:
                    truth.append(tcp_info_rtt_ms(sock))
                    table.add(observer.poll())
                    next_probe += 0.1
        table.add(observer.poll())
        return table, truth[3:], observer.counters()
    finally:
        for m in markers:
            m.close()
        observer.close()


@pytest.mark.parametrize("technique", [Technique.DELAY, Technique.SPIN])
def test_observer_rtt_matches_the_known_delay(line: WanLine, technique: Technique) -> None:
    table, truth, counters = measured_download(line, technique, seconds=3.0)
    flows = table.flows()
    assert len(flows) == 1, [f.flow_id for f in flows]
    flow = flows[0]
    assert flow.client.startswith(line.client_ip) and flow.server.startswith(line.server_ip)
    assert flow.method == technique.name.lower()
    assert counters["malformed"] == 0 and counters["flows"] == 1
    truth_p50 = statistics.median(truth)
    assert BASE_RTT_MS * 0.97 <= truth_p50 < BASE_RTT_MS + 15, f"TCP_INFO says {truth_p50} ms"
    for mode in Mode:
        e2e = flow.series[(mode, "e2e")]
        assert e2e.count >= 20, f"{mode.name}: {e2e.count} samples in 3 s"
        p = e2e.percentiles()
        # never below the path's delay; near TCP's own view of the round trip
        assert min(e2e.window) >= BASE_RTT_MS * 0.97, f"{mode.name}: {min(e2e.window)} ms"
        assert abs(p["p50"] - truth_p50) < 5, f"{mode.name}: p50 {p['p50']} vs {truth_p50}"
        # the observer sits at the MEC host: the WAN is on the server's side
        server_side = flow.series[(mode, "server_side")].percentiles()["p50"]
        client_side = flow.series[(mode, "client_side")].percentiles()["p50"]
        assert BASE_RTT_MS * 0.97 <= server_side < BASE_RTT_MS + 10, server_side
        assert client_side < 5, client_side
