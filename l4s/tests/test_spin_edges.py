"""The spin-edge trace's analysis (``mts_lab.l4s.spin_edges``) on made-up packets: the
replayed guard is the kernel's (the crafted segments of test_marker_rules), and an edge a
segment that skipped the WAN's delay brought is found with how early it came."""

from __future__ import annotations

from test_marker_rules import SEGMENTS

from mts_lab.l4s.spin_edges import Order, Packet, earliness, observer_samples, wire_edges

MS = 1_000_000
DELAY = 30 * MS
S, C = "10.0.0.2", "10.0.0.1"


def _pkt(t_ms: float, src: str, seq: int, spin: int, payload: int = 100, ack: int = 1) -> Packet:
    ports = (80, 40000) if src == S else (40000, 80)
    return Packet(round(t_ms * MS), src, *ports, seq, ack, seq % 65536, payload, False, spin, 0)


def test_the_replayed_guard_is_the_kernels() -> None:
    order = Order("follows", need_new=True)
    next_seq, ack, mss = SEGMENTS[0][:3]
    assert order.follows(_pkt(0, S, next_seq - mss, 0, mss, ack))  # ends where they start
    spin, held = 0, []
    for seq, ack, payload, value, _ in SEGMENTS:
        if order.follows(_pkt(0, S, seq % 2**32, value, payload, ack)):
            spin = value
        held.append(spin)
    assert held == [h for *_, h in SEGMENTS]


def test_an_edge_from_an_overtaking_segment_is_found_with_its_earliness() -> None:
    # the server flips to 1 at 100 ms; its segment of 120 ms skips the delay (arrives at
    # 120 ms, not 150), while the first one of value 1 arrives in turn at 130 ms
    sent = [_pkt(t, S, 1000 + 100 * i, int(t >= 100)) for i, t in enumerate(range(0, 200, 5))]
    arrived = {p.key(): p.t_ns + (0 if p.t_ns == 120 * MS else DELAY) for p in sent}
    received = sorted(
        (Packet(arrived[p.key()], *list(vars(p).values())[1:]) for p in sent),
        key=lambda p: p.t_ns,
    )
    wan = {p.key(): arrived[p.key()] - p.t_ns for p in sent}
    # the client (no guard) inverts what it takes: its edge goes out right after 120 ms
    client_sent = [_pkt(t, C, 5000, 1 - int(t > 120)) for t in range(0, 200, 1)]
    edges = wire_edges(received, client_sent, flip=True)
    assert [e.t_ns for e in edges] == [120 * MS]
    assert earliness(edges, received, wan, DELAY) == {120 * MS: 10 * MS}


def test_the_observer_replay_sets_a_reordered_edge_aside_by_the_rule() -> None:
    # one direction: the value flips every 60 ms; a segment of the next value overtakes
    # two in flight (arrives 10 ms early); the rule that follows the newest takes its edge
    seqs = list(range(1000, 1000 + 100 * 40, 100))
    times = [5.0 * i for i in range(40)]
    packets = [
        _pkt(t, S, q, (i // 12) % 2) for i, (t, q) in enumerate(zip(times, seqs, strict=True))
    ]
    early = packets[26]  # the value turns 0 at index 24; index 26 arrives after index 21
    moved = [p for p in packets if p is not early]
    moved.insert(22, Packet(packets[21].t_ns + 1, *list(vars(early).values())[1:]))
    newest = [rtt for _, rtt in observer_samples(moved, "newest", 50)]
    follows = [rtt for _, rtt in observer_samples(moved, "follows", 50)]
    assert min(newest) < 55 and min(follows) == 60.0, (newest, follows)
