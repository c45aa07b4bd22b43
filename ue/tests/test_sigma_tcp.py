"""SIGMA on real TCP connections from a UE namespace through the emulated uplink MAC,
with the emulator's grant feed writing the UE's grant into SIGMA's map every TTI.

Bed (mts_lab.sigma.bed): NR, 1 ms slots, 52 uplink PRBs, uplink CQI 15 (MCS 28: 4,737 B
per slot, 37.9 Mbit/s), 5 ms one-way each way: RTT_min ~13 ms, W_max ~60 kB (~40
segments, against the kernel's IW of 10)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mec_common.tables import cqi_to_mcs, lte_tbs_bytes_for_mcs, nr_tbs_bits
from mec_pep.sockets import tcp_info
from mts_lab.sigma.bed import Flow, Scale, UplinkBed
from mts_ue.sigma import MCS_MAX, RAT_LTE, RAT_NR, Grant, Phase, Sigma

pytestmark = pytest.mark.netns

SCALE = Scale(prb=52, ul_cqi=15, one_way_ms=5.0, buffer_bdp=160)  # 7.6 MB
MCS = cqi_to_mcs(SCALE.ul_cqi)
TBS = SCALE.tbs_bytes


@pytest.fixture(scope="module")
def bed(sigma: Sigma) -> Iterator[UplinkBed]:
    testbed = UplinkBed(sigma, SCALE, n_ues=1)
    try:
        testbed.wait_for_feed()
        yield testbed
    finally:
        testbed.close()


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


@contextmanager
def uploading(bed: UplinkBed, cc: str) -> Iterator[Flow]:
    """A saturating upload from the UE, sending from a thread until the block ends."""
    flow = bed.flow(0, cc)
    thread = threading.Thread(target=flow.run, daemon=True)
    thread.start()
    try:
        yield flow
    finally:
        flow.close()
        thread.join(10)


def w_max_segs(tbs: int, rtt_min_us: int, mss: int, min_cwnd: int = 2) -> int:
    """(3.9) in segments as the kernel computes it: TBS * RTT_min / TTI, floor, >= min_cwnd."""
    return max(min_cwnd, tbs * rtt_min_us * 1000 // 1_000_000 // mss)


# ---- the grant feed ---------------------------------------------------------------------


def test_the_feed_fills_the_tbs_table_from_the_3gpp_tables(sigma: Sigma, bed: UplinkBed) -> None:
    for mcs in range(MCS_MAX + 1):
        for prb in range(1, 111):
            assert sigma.tbs_bytes(RAT_LTE, mcs, prb) == lte_tbs_bytes_for_mcs(mcs, prb)
        for prb in (1, 24, 51, 106, 273, 275):
            assert sigma.tbs_bytes(RAT_NR, mcs, prb) == nr_tbs_bits(prb, mcs) // 8


def test_the_grant_map_holds_every_ttis_grant(sigma: Sigma, bed: UplinkBed) -> None:
    """Idle UE: each read is a fresh TTI's grant (the one just run); the feed writes one
    grant per TTI; while the UE uploads it decodes the whole cell as its own."""
    bed.wait_drained()
    ue = bed.ue_ip(0)
    last_tti = -1
    for _ in range(20):
        before = now_ns()
        g = sigma.read_grant(ue)
        assert g is not None
        assert before - 50_000_000 < g.tti_start_ns <= now_ns()  # at most a loaded host's lag
        assert g.tti > last_tti
        last_tti = g.tti
        assert (g.tti_ns, g.p_cell, g.mcs, g.rat) == (1_000_000, SCALE.prb, MCS, RAT_NR)
        assert (g.n_users, g.p_unused, g.p_current, g.buffer_bytes) == (0, SCALE.prb, 0, 0)
        time.sleep(0.013)

    # one write per TTI: the writes between two reads lie between the TTIs run between
    # the TTI counts read just inside and just outside them
    def ttis() -> int:
        return int(bed.api.get("/emulator/v1/cells").json()[0]["ttis"])

    a, feed0, b = ttis(), bed.ul_mac(0)["grant_feed"], ttis()
    time.sleep(0.5)
    c, feed1, d = ttis(), bed.ul_mac(0)["grant_feed"], ttis()
    assert feed0["pinned"] and feed1["errors"] == 0
    assert c - b - 1 <= feed1["writes"] - feed0["writes"] <= d - a + 1
    # uploading: this UE alone holds every PRB of every TTI
    with uploading(bed, "cubic"):
        time.sleep(1.0)
        g = sigma.read_grant(ue)
    assert g is not None
    assert (g.n_users, g.p_current, g.p_unused) == (1, SCALE.prb, 0)
    assert g.buffer_bytes > TBS


# ---- SIGMA on a connection --------------------------------------------------------------


def test_max_start_sets_the_first_window_to_w_max(sigma: Sigma, bed: UplinkBed) -> None:
    bed.wait_drained()
    flow = bed.flow(0, sigma.reno)
    try:
        info, state = tcp_info(flow.sock), sigma.flow(flow.sock)
        assert state is not None
        configured_us = int(2 * SCALE.one_way_ms * 1000)
        assert configured_us <= state.rtt_min_us <= configured_us + 10_000
        assert state.rtt_min_us == info["min_rtt_us"]  # the handshake's RTT
        iw = w_max_segs(TBS, state.rtt_min_us, info["snd_mss"])  # idle cell: P_max = P_cell
        print(f"IW {state.iw_segs} segments at RTT_min {state.rtt_min_us} us")
        assert Phase(state.phase) == Phase.MAX_START
        assert state.iw_segs == iw > 10 and info["snd_cwnd"] == iw
        assert state.pacing_Bps == iw * info["snd_mss"] * 1_000_000 // state.rtt_min_us
        assert info["pacing_rate"] == state.pacing_Bps  # until the first ACK
        counters = sigma.counters(bed.ue_ip(0))
        assert counters is not None and counters.max_starts >= 1
        # Max Start ends once IW segments are ACKed: pacing off, SIGMA's phases follow
        flow.send(3 * iw * info["snd_mss"])
        deadline = time.monotonic() + 10
        while (state := sigma.flow(flow.sock)) is not None and state.phase == Phase.MAX_START:
            assert time.monotonic() < deadline, "Max Start never ended"
            time.sleep(0.01)
        assert state is not None and state.acked_segs >= iw and state.pacing_Bps == 0
        assert Phase(state.phase) in (Phase.SAFE_INCREASE, Phase.PROPORTIONAL)
    finally:
        flow.close()


def test_max_start_again_when_an_idle_connection_sends(sigma: Sigma, bed: UplinkBed) -> None:
    """After idle the kernel restarts a connection's window at its initial window (RFC
    5681 §4.1); SIGMA replaces that slow start with a new Max Start from the grant."""
    bed.wait_drained()
    flow = bed.flow(0, sigma.reno)
    try:
        mss = tcp_info(flow.sock)["snd_mss"]
        state = sigma.flow(flow.sock)
        assert state is not None
        flow.send_more(3 * state.iw_segs * mss)  # the handshake's Max Start runs out
        deadline = time.monotonic() + 10
        while tcp_info(flow.sock)["unacked"] or (
            (state := sigma.flow(flow.sock)) is not None and state.phase == Phase.MAX_START
        ):
            assert time.monotonic() < deadline, "the first upload never finished"
            time.sleep(0.01)
        counters = sigma.counters(bed.ue_ip(0))
        assert counters is not None
        starts = counters.max_starts
        time.sleep(0.5)  # idle for longer than the RTO (200 ms + RTT)
        # The grant is sized with RTT_min as it is when the segment leaves; that segment's
        # own ACK may lower RTT_min before we look, so read it now, while nothing is in flight.
        rtt_min_at_send_us = tcp_info(flow.sock)["min_rtt_us"]  # what SIGMA reads at TX_START
        flow.send_more(mss)  # one segment: Max Start lasts until IW segments are ACKed
        time.sleep(0.1)
        info, state = tcp_info(flow.sock), sigma.flow(flow.sock)
        counters = sigma.counters(bed.ue_ip(0))
        assert state is not None and counters is not None
        assert counters.max_starts == starts + 1
        assert Phase(state.phase) == Phase.MAX_START
        assert state.iw_segs == w_max_segs(TBS, rtt_min_at_send_us, mss) > 10
        assert info["snd_cwnd"] == state.iw_segs  # not the kernel's restart window
    finally:
        flow.close()


def test_proportional_adjustment_when_rtt_doubles(sigma: Sigma, bed: UplinkBed) -> None:
    """The uplink CQI falls from 15 to 5 (MCS 28 -> 7) under a running upload: the UE's
    buffer grows, RTT_last reaches 2 RTT_min and SIGMA sets cwnd = W_max RTT_min /
    RTT_last (3.10) with W_max from the grant of the new MCS. (SIGMA also cuts at full
    capacity now and then: its operating point runs up to 2 RTT_min; those cuts carry
    the old W_max.)"""
    bed.wait_drained()
    low_tbs = nr_tbs_bits(SCALE.prb, cqi_to_mcs(5)) // 8
    with uploading(bed, sigma.reno) as flow:
        try:
            time.sleep(1.0)
            mss = tcp_info(flow.sock)["snd_mss"]
            bed.set_ul_channel(0, cqi=5)
            deadline = time.monotonic() + 10
            while True:
                state = sigma.flow(flow.sock)
                assert state is not None
                if state.cuts and state.cut_w_max_segs == w_max_segs(
                    low_tbs, state.cut_rtt_min_us, mss
                ):
                    break
                assert time.monotonic() < deadline, "no Proportional Adjustment at the new MCS"
                time.sleep(0.01)
        finally:
            bed.set_ul_channel(0, clear_cqi=True)
    print(
        f"cut {state.cuts}: cwnd {state.cut_cwnd} = W_max {state.cut_w_max_segs} x RTT_min "
        f"{state.cut_rtt_min_us} / RTT_last {state.cut_rtt_last_us} us"
    )
    assert state.cut_rtt_last_us >= 2 * state.cut_rtt_min_us
    expected = state.cut_w_max_segs * state.cut_rtt_min_us // state.cut_rtt_last_us
    assert state.cut_cwnd == max(2, expected)
    counters = sigma.counters(bed.ue_ip(0))
    assert counters is not None and counters.proportional >= 1


# ---- no grant, a stale grant: the kernel's Reno ----------------------------------------


@pytest.fixture(scope="module")
def unfed(sigma: Sigma) -> Iterator[Sigma]:
    """A second SIGMA instance no modem driver writes to."""
    other = Sigma.load(sigma.pin_dir.parent, sigma.pin_dir.name + "u")
    other.configure(stale_ms=1000)  # hand-written grants from a thread on a loaded host
    try:
        yield other
    finally:
        other.close()


def test_without_a_grant_reno_grows_the_window(unfed: Sigma, bed: UplinkBed) -> None:
    bed.wait_drained()
    ue = bed.ue_ip(0)
    flow = bed.flow(0, unfed.reno)
    try:
        state = unfed.flow(flow.sock)
        assert state is not None and Phase(state.phase) == Phase.FALLBACK
        assert tcp_info(flow.sock)["snd_cwnd"] == 10  # the kernel's IW: no Max Start
        flow.sock.sendall(bytes(200_000))
        time.sleep(0.3)
        c = unfed.counters(ue)
        assert c is not None and c.acks > 0
        assert c.fallback_acks == c.no_grant == c.acks and c.sigma_acks == 0
        assert tcp_info(flow.sock)["snd_cwnd"] > 10  # Reno's slow start
        # a stale grant (the modem driver stopped 5 s ago) is counted as stale
        stale = Grant(
            tti_start_ns=now_ns() - 5 * 10**9, tti_ns=1_000_000, p_cell=SCALE.prb, n_users=1,
            p_current=SCALE.prb, mcs=MCS, rat=RAT_NR,
        )  # fmt: skip
        unfed.write_grant(ue, stale)
        flow.sock.sendall(bytes(200_000))
        time.sleep(0.3)
        c2 = unfed.counters(ue)
        assert c2 is not None and c2.stale > 0 and c2.sigma_acks == 0
        assert c2.fallback_acks == c2.acks
    finally:
        flow.close()
        unfed.forget_grant(ue)


class GrantWriter:
    """A modem driver in a thread: writes the given grant, freshly dated, every 5 ms."""

    def __init__(self, sigma: Sigma, ue: str, **grant: int) -> None:
        self.sigma, self.ue, self.grant = sigma, ue, grant
        self.stop = threading.Event()
        self.write()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def write(self) -> None:
        self.sigma.write_grant(self.ue, Grant(tti_start_ns=now_ns(), **self.grant))

    def _run(self) -> None:
        while not self.stop.wait(0.005):
            self.write()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def test_safe_increase_grows_only_by_the_unused_share(unfed: Sigma, bed: UplinkBed) -> None:
    """Grants written by hand (a 4 Mbit/s TBS, far below the link's 38 Mbit/s, so RTT stays
    near RTT_min): with P_current = P_max (Utz = 1) Safe Increase adds nothing and cwnd
    stays at Max Start's IW; with P_current = P_max / 5 (Utz = 0.2) it adds 0.8 of a
    segment per segment ACKed, and cwnd grows."""
    bed.wait_drained()
    ue = bed.ue_ip(0)
    unfed.set_tbs_bytes(RAT_NR, 10, 50, 500)  # 500 B per 1 ms TTI
    full = {"tti_ns": 1_000_000, "p_cell": 50, "n_users": 1, "mcs": 10, "rat": RAT_NR}
    writer = GrantWriter(unfed, ue, **full, p_current=50, p_unused=0)
    try:
        with uploading(bed, unfed.reno) as flow:
            state = unfed.flow(flow.sock)
            assert state is not None and state.iw_segs >= 2
            iw = state.iw_segs
            busy = []
            for _ in range(50):
                busy.append(tcp_info(flow.sock)["snd_cwnd"])
                time.sleep(0.01)
            state = unfed.flow(flow.sock)
            assert state is not None and Phase(state.phase) != Phase.FALLBACK
            writer.grant = {**full, "p_current": 10, "p_unused": 40}  # P_max 50, Utz 0.2
            idle = []
            for _ in range(50):
                idle.append(tcp_info(flow.sock)["snd_cwnd"])
                time.sleep(0.01)
        print(f"IW {iw}: cwnd at Utz 1 max {max(busy)}, at Utz 0.2 max {max(idle)}")
        assert max(busy) <= iw  # nothing added (a Proportional Adjustment may cut)
        assert max(idle) >= iw + 4
        c = unfed.counters(ue)
        assert c is not None and c.sigma_acks > 0
    finally:
        writer.close()
        unfed.forget_grant(ue)


# ---- the sink's receive window (last: it changes the module's bed) -----------------------


def advertised_after_first_data(bed: UplinkBed) -> int:
    """The sink's window as the UE sees it once ten segments are acknowledged (the SYN-ACK's
    window is never scaled, so the handshake alone cannot show it)."""
    flow = bed.flow(0, "cubic")
    try:
        flow.sock.sendall(bytes(10 * 1448))
        deadline = time.monotonic() + 10
        while tcp_info(flow.sock)["unacked"] and time.monotonic() < deadline:
            time.sleep(0.01)
        return int(tcp_info(flow.sock)["snd_wnd"])
    finally:
        flow.close()


def test_an_opened_sink_window_is_advertised_from_the_first_acks(bed: UplinkBed) -> None:
    """Linux's receiver starts small and grows with the data, which caps Max Start's first
    window; open_sink_window (the experiment's --sink-window-bdp) lifts it at once."""
    segments = 400
    before = advertised_after_first_data(bed)
    bed.open_sink_window(segments)
    after = advertised_after_first_data(bed)
    assert before < 200_000, before
    assert after >= segments * 1000, (before, after)
