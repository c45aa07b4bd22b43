"""The endpoint marker on real TCP connections in namespaces (root, BPF).

client ns ─ router ns ─ server ns (``mts_lab.line.Lab``): the marker runs on the
client's and the server's interface; an AF_PACKET capture on the router checks the
marks on the wire against the research's rules (001 §2.1, §3.2), and against the delay
bit with GSO kept (``Technique.DELAY_RUN``, not the research's) with the observer on the
router.
"""

from __future__ import annotations

import itertools
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from l4s_support import MARKER_OBJ, NEEDS_ROOT, SYN, Capture, Seg, flow

from mec_l4s.efm import Marker, Technique
from mec_l4s.observer import Kind, Observer, Rules
from mts_lab.l4s.bed import OBSERVER_OBJ, serve_once
from mts_lab.l4s.bed import connect as connect_from
from mts_lab.line import Lab

pytestmark = [pytest.mark.netns, NEEDS_ROOT, pytest.mark.timeout(180)]


@pytest.fixture
def lab() -> Iterator[Lab]:
    assert MARKER_OBJ.exists(), f"{MARKER_OBJ} missing: make build/bpf/efm_marker.bpf.o"
    lab = Lab.create("efm")
    try:
        yield lab
    finally:
        lab.down()


T_MAX_MS = 400


def markers(lab: Lab, technique: Technique, **kw: Any) -> tuple[Marker, Marker]:
    client = Marker.load(MARKER_OBJ, f"mts-efm-{lab.name}-c")
    server = Marker.load(MARKER_OBJ, f"mts-efm-{lab.name}-s")
    for m, ns, ifname in ((client, lab.client_ns, "c0"), (server, lab.server_ns, "s0")):
        m.configure(technique, **kw)
        m.attach(ifname, ns)
    return client, server


def serve(lab: Lab, handler: Callable[[socket.socket], None]) -> int:
    return serve_once(lab.server_ns, lab.server_ip, handler)


def connect(lab: Lab, port: int) -> socket.socket:
    return connect_from(lab.client_ns, lab.server_ip, port)


def echo(conn: socket.socket) -> None:
    while data := conn.recv(100):
        conn.sendall(data)


def upload_sink(conn: socket.socket) -> None:
    while conn.recv(1 << 16):
        pass


def paced_send(sock: socket.socket, total: int, chunk: int = 16384, gap_s: float = 0.002) -> None:
    sent = 0
    while sent < total:
        sock.sendall(b"x" * chunk)
        sent += chunk
        time.sleep(gap_s)


def captured_paced_download(lab: Lab) -> list[Seg]:
    """A paced 3 MB download (16 KiB every 8 ms, about 1.5 s) from the server, as the
    router's client-side interface saw it."""
    cap = Capture(lab.pep_ns, lab.pep_client_if)
    port = serve(lab, lambda conn: paced_send(conn, 3 << 20, gap_s=0.008))
    with connect(lab, port) as sock:
        while sock.recv(1 << 16):
            pass
    return flow(cap.stop(), port)


def download(conn: socket.socket) -> None:
    paced_send(conn, 3 << 20)


def drop_on_the_way(lab: Lab, match: str) -> None:
    """The router drops the packets it forwards that match the nftables expression."""
    lab.sh(
        lab.pep_ns,
        "nft add table inet efmt && "
        "nft add chain inet efmt drops '{ type filter hook forward priority 0; }' && "
        f"nft add rule inet efmt drops '{match} drop'",
    )


def marks(segs: list[Seg], lab: Lab) -> list[tuple[float, str]]:
    """(time, 'c' or 's') of every non-SYN segment that carries the time bit."""
    return [
        (s.t, "c" if s.src == lab.client_ip else "s")
        for s in segs
        if not s.flags & SYN and s.time_bit
    ]


def test_spin_bit_is_a_square_wave_with_one_edge_per_round_trip(lab: Lab) -> None:
    client, server = markers(lab, Technique.SPIN)
    try:
        cap = Capture(lab.pep_ns, lab.pep_client_if)
        port = serve(lab, echo)
        with connect(lab, port) as sock:
            for _ in range(30):
                sock.sendall(b"r" * 100)
                got = b""
                while len(got) < 100:
                    got += sock.recv(100 - len(got))
        segs = flow(cap.stop(), port)
        c = client.counters()
    finally:
        client.close()
        server.close()
    syns = [s for s in segs if s.flags & SYN]
    assert len(syns) == 2 and all(s.byte12 & 0x06 == 0x04 for s in syns), "handshake code 10"
    data = [s for s in segs if s.payload > 0]
    requests = [s.time_bit for s in data if s.src == lab.client_ip]
    # each request is one round trip after the previous one: the client inverts what the
    # server echoed, so its value flips once per round trip
    assert len(requests) == 30
    assert requests == [1, 0] * 15, requests
    # the server echoes the value of the request it answers
    for prev, seg in itertools.pairwise(data):
        if seg.src == lab.server_ip:
            assert prev.src == lab.client_ip and seg.time_bit == prev.time_bit
    assert c["unparsed"] == 0 and c["spin_set"] >= 15


def test_delay_bit_keeps_one_sample_in_flight(lab: Lab) -> None:
    # T_max 400 ms so that a stall of a loaded machine cannot inject a second sample
    client, server = markers(lab, Technique.DELAY, t_max_ms=T_MAX_MS)
    try:
        # the first sample (in the handshake ACK) finds no socket at the server yet, as
        # in the research's kernel; the next one comes T_max later
        segs = captured_paced_download(lab)
        c, s = client.counters(), server.counters()
    finally:
        client.close()
        server.close()
    syns = [x for x in segs if x.flags & SYN]
    assert len(syns) == 2 and all(x.byte12 & 0x06 == 0x02 for x in syns), "handshake code 01"
    seq = marks(segs, lab)
    assert len(seq) > 20, f"only {len(seq)} samples"
    # the server only reflects: one server mark per client mark before it
    for (t, who), (t_prev, who_prev) in zip(seq[1:], seq, strict=False):
        if who == "s":
            assert who_prev == "c", f"two server samples in a row at {t:.3f}"
        elif who_prev == "c":
            # a new client sample without a reflection: only after T_max (the first one,
            # sent in the handshake ACK, meets no socket at the server yet)
            assert t - t_prev >= T_MAX_MS / 1000 * 0.95, f"two in flight at {t - t_prev:.3f} s"
    assert c["samples_generated"] >= 1 and c["samples_reflected"] > 10
    assert s["samples_reflected"] > 10 and s["samples_generated"] == 0
    assert c["gso_marked"] == 0 and s["gso_marked"] == 0


def test_delay_sample_is_generated_after_t_max_when_none_comes_back(lab: Lab) -> None:
    # the router drops every server segment carrying a sample: the client must inject a
    # new one each T_max (100 ms), and never earlier
    drop_on_the_way(lab, f"ip saddr {lab.server_ip} tcp flags & syn == 0 @th,102,1 1")
    client, server = markers(lab, Technique.DELAY)
    try:
        cap = Capture(lab.pep_ns, lab.pep_client_if)
        port = serve(lab, upload_sink)
        with connect(lab, port) as sock:
            paced_send(sock, 1 << 20, chunk=2048, gap_s=0.002)
        segs = flow(cap.stop(), port)
    finally:
        client.close()
        server.close()
    times = [t for t, who in marks(segs, lab) if who == "c"]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) >= 3, f"{len(times)} client samples"
    assert min(gaps) >= 0.095, f"a sample {min(gaps) * 1000:.1f} ms after the previous one"
    assert statistics.median(gaps) < 0.2, gaps


def test_no_delay_sample_on_sack_segments(lab: Lab) -> None:
    # 2.5 % of the server's full segments are dropped on the way: the client SACKs
    drop_on_the_way(lab, f"ip saddr {lab.server_ip} meta length > 1000 numgen random mod 40 == 0")
    client, server = markers(lab, Technique.DELAY)
    try:
        cap = Capture(lab.pep_ns, lab.pep_client_if)
        port = serve(lab, download)
        with connect(lab, port) as sock:
            while sock.recv(1 << 16):
                pass
        segs = flow(cap.stop(), port)
        c = client.counters()
    finally:
        client.close()
        server.close()
    sacks = [x for x in segs if x.src == lab.client_ip and x.sack]
    assert len(sacks) > 5, f"only {len(sacks)} SACK segments: no loss happened"
    assert not [x for x in sacks if x.time_bit], "a SACK segment carried a delay sample"
    assert c["sack_held"] >= 1, "no sample was ever due on a SACK segment"
    assert c["samples_reflected"] > 0


RUN_BIT = 0x08


def runs(segs: list[Seg], lab: Lab) -> list[tuple[float, str, int, int]]:
    """(time of the first, 'c' or 's', segments, parity) of each run of consecutive marked
    non-SYN segments of one parity per direction on the wire (an unmarked segment or
    the other parity ends a run)."""
    found: list[tuple[float, str, int, int]] = []
    open_run: dict[str, int] = {}  # direction -> index in found of its open run
    for seg in segs:
        if seg.flags & SYN:
            continue
        who = "c" if seg.src == lab.client_ip else "s"
        parity = 1 if seg.byte12 & RUN_BIT else 0
        if not seg.time_bit:
            open_run.pop(who, None)
        elif who in open_run and found[open_run[who]][3] == parity:
            t, _, n, _ = found[open_run[who]]
            found[open_run[who]] = (t, who, n + 1, parity)
        else:
            open_run[who] = len(found)
            found.append((seg.t, who, 1, parity))
    return found


def test_delay_bit_with_gso_kept_is_one_sample_per_round_trip(lab: Lab) -> None:
    # the server's interface cuts GSO skbs in software after tc (TSO off, GSO on), as a
    # NIC's TSO would: its marker marks the whole skb and every segment carries the mark
    lab.sh(lab.server_ns, "ethtool -K s0 tso off")
    client, server = markers(lab, Technique.DELAY_RUN, t_max_ms=T_MAX_MS)
    observer = Observer.load(OBSERVER_OBJ, f"mts-obs-{lab.name}")
    try:
        observer.configure()
        observer.attach(lab.pep_client_if, lab.pep_ns)
        observer.attach(lab.pep_server_if, lab.pep_ns)
        segs = captured_paced_download(lab)
        samples = [x for x in observer.poll() if x.kind is Kind.DELAY_E2E]
        c, s, o = client.counters(), server.counters(), observer.counters()
        link = lab.sh(lab.server_ns, "ip -d link show s0")
    finally:
        observer.close()
        client.close()
        server.close()
    assert "gso_max_segs 65535" in link, "the marker must keep GSO on for DELAY_RUN"
    syns = [x for x in segs if x.flags & SYN]
    assert len(syns) == 2 and all(x.byte12 & 0x0E == 0x0A for x in syns), "code 101"
    seq = runs(segs, lab)
    server_runs = [r for r in seq if r[1] == "s"]
    assert len(server_runs) > 20, f"only {len(server_runs)} server samples"
    # GSO was on and copied the mark: samples left on multi-segment skbs, and the wire
    # shows runs of several marked segments
    assert s["gso_marked"] >= 10, s
    assert max(n for _, _, n, _ in server_runs) >= 2, "no run of several marked segments"
    # one sample in flight: each server run answers one client mark, which is a single
    # segment (the client reflected the whole run once, though it came in pieces)
    for (_, who, n, _), (_, who_prev, _, _) in zip(seq[1:], seq, strict=False):
        if who == "s":
            assert who_prev == "c", "two server samples in a row"
        else:
            assert n == 1, f"a client sample on {n} segments"
    # each sender's parity alternates from one sample to its next
    for who in "cs":
        parities = [p for _, w, _, p in seq if w == who]
        assert all(a != b for a, b in itertools.pairwise(parities)), (who, parities)
    assert c["run_continued"] > 0 and c["samples_in"] == len(server_runs), (c, len(server_runs))
    # the observer took each run as one sample: as many server-side e2e samples as the
    # wire has server runs less than the cut-off (225 ms) after the previous one, each one
    # of the wire's run-to-run times (a piece of a run would be a sample of microseconds)
    starts = [t for t, who, _, _ in server_runs]
    wire = [1000 * (b - a) for a, b in itertools.pairwise(starts) if b - a < 0.225]
    raw = [x.rtt_ms for x in samples if x.rules is Rules.RAW and not x.from_client]
    assert abs(len(raw) - len(wire)) <= 1, (len(raw), len(wire))
    unmatched = [r for r in raw if min(abs(r - w) for w in wire) > 0.2]
    assert not unmatched, f"samples the wire has no run for: {unmatched}"
    assert o["run_continued"] > 0 and o["disagreed"] == 0, o
