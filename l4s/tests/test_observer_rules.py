"""The observer's rules on crafted packets (BPF_PROG_TEST_RUN: the real program in the
kernel, packets built here): handshake agreement, malformed and truncated headers, the
flow table's cap, the reordering guard and the minimum-gap rule of the filtered mode, the
runs of the delay bit with GSO kept."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator

import pytest
from l4s_support import NEEDS_ROOT, REPO, frame

from mec_common.bpf import BpfProgram
from mec_l4s.observer import Kind, Observer, Rules, Sample

OBSERVER_OBJ = REPO / "build/bpf/efm_observer.bpf.o"
TC_ACT_UNSPEC = -1
SPIN_CODE, DELAY_CODE, TIME = 0x04, 0x02, 0x02
DELAY_RUN_CODE, PARITY = 0x0A, 0x08  # the delay bit with GSO kept (not the research's)
SYN, ACK = 0x02, 0x10
C, S = "10.9.0.1", "10.9.0.2"

pytestmark = [pytest.mark.bpf, NEEDS_ROOT, pytest.mark.timeout(120)]


@pytest.fixture
def observer() -> Iterator[Observer]:
    assert OBSERVER_OBJ.exists(), f"{OBSERVER_OBJ} missing: make build/bpf/efm_observer.bpf.o"
    obs = Observer.load(OBSERVER_OBJ, f"mts-obs-rules-{secrets.token_hex(3)}")
    obs.configure()
    try:
        yield obs
    finally:
        obs.close()


@pytest.fixture
def prog(observer: Observer) -> Iterator[BpfProgram]:
    p = BpfProgram(str(observer.obj.pin_dir / "efm_observe"))
    try:
        yield p
    finally:
        p.close()


def handshake(prog: BpfProgram, code: int, sport: int = 40000, sa_code: int | None = None) -> None:
    prog.run_packet(frame(C, S, sport, 80, flags=SYN, bits=code))
    sa = code if sa_code is None else sa_code
    prog.run_packet(frame(S, C, 80, sport, flags=SYN | ACK, bits=sa))


def samples(observer: Observer, rules: Rules) -> list[Sample]:
    return [s for s in observer.poll() if s.rules == rules]


def test_malformed_and_truncated_headers_are_counted_and_skipped(
    observer: Observer, prog: BpfProgram
) -> None:
    bad = [
        frame(C, S, 1, 2, ihl=4),  # IP header length below 20
        frame(C, S, 1, 2, tot_len=30),  # IP total length shorter than IP + TCP headers
        frame(C, S, 1, 2, doff=3),  # TCP data offset below 20 bytes
        frame(C, S, 1, 2, doff=15),  # options beyond the IP total length... (see below)
        frame(C, S, 1, 2, payload=100)[: 14 + 20 + 10],  # cut inside the TCP header
        frame(C, S, 1, 2, payload=100)[:-50],  # shorter than the IP total length
    ]
    # doff=15 with its 40 bytes of options present is valid: make its total length lie
    bad[3] = frame(C, S, 1, 2, doff=15, tot_len=20 + 40)
    for pkt in bad:
        assert prog.run_packet(pkt) == TC_ACT_UNSPEC  # never drops or changes a packet
    udp = bytearray(frame(C, S, 1, 2))
    udp[14 + 9] = 17
    prog.run_packet(bytes(udp))
    c = observer.counters()
    assert c["malformed"] == len(bad), c
    assert c["tcp"] == 0 and c["packets"] == len(bad) + 1


def test_flows_come_from_agreed_handshakes_only(observer: Observer, prog: BpfProgram) -> None:
    prog.run_packet(frame(C, S, 40001, 80, bits=TIME))  # no SYN seen: not a flow
    handshake(prog, SPIN_CODE, sport=40002, sa_code=DELAY_CODE)  # disagreement
    handshake(prog, DELAY_CODE, sport=40003)
    for _ in range(3):
        prog.run_packet(frame(C, S, 40002, 80, bits=TIME))
        prog.run_packet(frame(C, S, 40003, 80, bits=TIME))
        time.sleep(0.01)
    c = observer.counters()
    assert c["no_flow"] == 1 and c["disagreed"] == 1 and c["flows"] == 2
    got = observer.poll()
    assert got and all(s.client == f"{C}:40003" and s.server == f"{S}:80" for s in got)


def test_syn_flood_stays_within_the_flow_table_cap(observer: Observer, prog: BpfProgram) -> None:
    cap = observer.obj.maps["obs_flows"].max_entries
    n = cap + 4000
    for i in range(n):
        src = f"10.{64 + i // 65536}.{(i // 256) % 256}.{i % 256}"
        prog.run_packet(frame(src, S, 1024 + i % 60000, 80, flags=SYN, bits=SPIN_CODE))
    assert observer.counters()["flows"] == n
    assert observer.kernel_flows() <= cap


def test_filtered_spin_ignores_a_reordered_segment(observer: Observer, prog: BpfProgram) -> None:
    handshake(prog, SPIN_CODE)
    seq_c, seq_s, rtt_s = 1000, 5000, 0.02

    def exchange(value: int) -> None:
        nonlocal seq_c, seq_s
        prog.run_packet(
            frame(C, S, 40000, 80, bits=value * TIME, seq=seq_c, ack=seq_s, payload=100)
        )
        seq_c += 100
        time.sleep(rtt_s / 2)
        prog.run_packet(
            frame(S, C, 80, 40000, bits=value * TIME, seq=seq_s, ack=seq_c, payload=100)
        )
        seq_s += 100
        time.sleep(rtt_s / 2)

    for v in (0, 1, 0, 1, 0, 1):  # the client's value; the server echoes it
        exchange(v)
    # a client segment overtaken on the way arrives now: older seq, the previous value
    prog.run_packet(frame(C, S, 40000, 80, bits=0, seq=seq_c - 300, ack=seq_s - 200, payload=100))
    exchange(1)  # the wave continues with the current value: the raw tracker flips back
    exchange(0)
    got = observer.poll()
    raw = [
        s.rtt_ms for s in got if s.rules == Rules.RAW and s.kind == Kind.SPIN_E2E and s.from_client
    ]
    filtered = [
        s.rtt_ms
        for s in got
        if s.rules == Rules.FILTERED and s.kind == Kind.SPIN_E2E and s.from_client
    ]
    assert min(raw) < rtt_s * 1000 / 4, f"raw spin should show the spurious edges: {raw}"
    assert filtered and min(filtered) > rtt_s * 1000 * 0.8, filtered
    assert observer.counters()["reordered"] >= 1


def test_filtered_spin_ignores_a_segment_that_overtook_others(
    observer: Observer, prog: BpfProgram
) -> None:
    """A server segment that overtook two in flight carries the next value 16 ms early: the
    filtered tracker takes the edge from the segment in order, at its own time."""
    handshake(prog, SPIN_CODE)
    slot_s, period, seq0 = 0.004, 10, 5000  # a segment every 4 ms, an edge every 10 (40 ms)

    def segment(k: int) -> None:
        value = (k // period) % 2
        prog.run_packet(frame(S, C, 80, 40000, bits=value * TIME, seq=seq0 + 100 * k, payload=100))

    overtaker = 5 * period + 2  # the value after the edge at 5 * period
    for k in range(8 * period):
        if k == overtaker - 6:
            segment(overtaker)  # sent later, arrives 6 slots early: 4 slots before the edge
        if k != overtaker:
            segment(k)
        time.sleep(slot_s)
    filtered = [
        s.rtt_ms
        for s in observer.poll()
        if s.rules == Rules.FILTERED and s.kind == Kind.SPIN_E2E and not s.from_client
    ]
    # the rule that follows the newest segment gives one sample of 6 slots (24 ms)
    assert len(filtered) >= 5 and min(filtered) > period * slot_s * 1000 * 0.9, filtered


def test_filtered_delay_sets_aside_a_duplicate_sample(observer: Observer, prog: BpfProgram) -> None:
    handshake(prog, DELAY_CODE)
    for _ in range(5):  # one sample every 20 ms from the client
        prog.run_packet(frame(C, S, 40000, 80, bits=TIME))
        time.sleep(0.02)
    prog.run_packet(frame(C, S, 40000, 80, bits=TIME))
    time.sleep(0.001)
    prog.run_packet(frame(C, S, 40000, 80, bits=TIME))  # a copy 1 ms later (e.g. GSO)
    got = [s for s in observer.poll() if s.kind == Kind.DELAY_E2E]
    raw = [s.rtt_ms for s in got if s.rules == Rules.RAW]
    filtered = [s.rtt_ms for s in got if s.rules == Rules.FILTERED]
    assert min(raw) < 5, raw  # Spindump's rule has no lower bound
    assert min(filtered) > 15, filtered
    assert observer.counters()["too_soon"] >= 1


def test_a_run_of_one_super_packets_segments_is_one_delay_sample(
    observer: Observer, prog: BpfProgram
) -> None:
    handshake(prog, DELAY_RUN_CODE)

    def skb(seq: int, parity: int, segments: int = 4, ack: int = 5000) -> int:
        """The segments of one marked super-packet, as GSO cuts it; returns its end."""
        for i in range(segments):
            bits = TIME | (PARITY if parity else 0)
            prog.run_packet(frame(C, S, 40000, 80, bits=bits, seq=seq + 100 * i, ack=ack,
                                  payload=100))  # fmt: skip
        return seq + 100 * segments

    end = skb(1000, 0)
    time.sleep(0.02)
    # the next sample on the very next skb (contiguous, same ack): its parity tells it apart
    end = skb(end, 1)
    time.sleep(0.02)
    end = skb(end + 400, 0)  # after unmarked segments
    time.sleep(0.02)
    # the same parity again: a run of the other one was lost between (it took the 400
    # bytes), so this one does not start where the last run ended: a new sample
    end = skb(end + 400, 0)
    got = [s for s in observer.poll() if s.kind == Kind.DELAY_E2E and s.rules == Rules.RAW]
    assert len(got) == 3 and all(s.rtt_ms > 15 for s in got), [s.rtt_ms for s in got]
    c = observer.counters()
    assert c["run_continued"] == 4 * 3 and c["disagreed"] == 0, c
