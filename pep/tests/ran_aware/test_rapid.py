"""RAPID's allocation (Eq. 5.4-5.13) step by step, and its RAN-leg cwnd in the kernel."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import threading
import time

import pytest

from mec_pep.ran_aware.kernel import CcaMode, MeldKernel, Tuning, UeRadio
from mec_pep.ran_aware.rapid import FlowClass, RapidAllocator, period_rtts
from mec_pep.sockets import tcp_info

MSS = 1448
RTT = 0.05  # s, WAN
C = 2_000_000.0  # bytes/s = 16 Mbit/s


def test_period_is_log2_of_the_window_in_segments() -> None:
    assert period_rtts(MSS, MSS) == 1
    assert period_rtts(8 * MSS, MSS) == 4  # log2(8) + 1
    assert period_rtts(100 * MSS, MSS) == 8  # ceil(log2(100) + 1)
    assert period_rtts(10, MSS) == 1


def run_flow(a: RapidAllocator, flow_id: int, rate: float, start: float, rtts: int) -> float:
    """Feed per-RTT readings of a flow receiving `rate` bytes/s, for `rtts` RTTs or until its
    current categorisation period is over; return the time."""
    f = a.flows[flow_id]
    received, now, period_end = f.sample_bytes, start, f.period_end
    for i in range(10_000):
        if i >= rtts and now > period_end:
            break
        now = start + (i + 1) * RTT * 1.0001  # a hair over one RTT per reading
        received += int(rate * RTT)
        a.observe(flow_id, now, bytes_received=received, rtt_min=RTT, rtt=RTT)
    return now


def test_initial_window_is_an_equal_share() -> None:
    """Eq. 5.4: RW = C/N · RTTmin_WAN."""
    a = RapidAllocator()
    a.set_capacity("ue", C)
    f1 = a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    assert f1.window == pytest.approx(C * RTT)
    f2 = a.add(2, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    assert f2.window == pytest.approx(C / 2 * RTT)
    assert f1.period_end == pytest.approx(period_rtts(C * RTT, MSS) * RTT)


def test_no_capacity_no_window() -> None:
    a = RapidAllocator()
    f = a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    assert f.window is None
    a.set_capacity("ue", C)
    assert a.observe(1, 0.01, bytes_received=0, rtt_min=RTT, rtt=RTT)
    assert f.window == pytest.approx(C * RTT)


def test_slow_flow_shrinks_and_fast_flow_takes_what_it_released() -> None:
    """A flow using 10 % of its share is slow (< 80 %): RW <- r̂/R · RW (Eq. 5.10). The
    other, using all of its share, is fast and gets the released bandwidth (Eq. 5.13)."""
    a = RapidAllocator()
    a.set_capacity("ue", C)
    a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    a.add(2, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    share = C / 2
    run_flow(a, 1, 0.1 * share, 0.0, 1)  # slow flow first
    slow = a.flows[1]
    assert slow.klass is FlowClass.SLOW
    assert slow.window == pytest.approx(0.1 * share * RTT, rel=0.01)
    assert slow.released == pytest.approx(0.9 * share, rel=0.01)
    run_flow(a, 2, share, 0.0, 1)
    fast = a.flows[2]
    assert fast.klass is FlowClass.FAST
    assert fast.window == pytest.approx((share + 0.9 * share) * RTT, rel=0.01)
    assert fast.allocated_rate + slow.allocated_rate == pytest.approx(C, rel=0.01)


def test_slow_flow_that_wants_more_becomes_fast_again() -> None:
    a = RapidAllocator()
    a.set_capacity("ue", C)
    a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    a.add(2, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    share = C / 2
    now = run_flow(a, 1, 0.05 * share, 0.0, 1)
    f = a.flows[1]
    assert f.klass is FlowClass.SLOW
    # It now sends as fast as its small window allows (r̂ = R): fast, back to its share.
    for _ in range(20):
        now = run_flow(a, 1, f.window / RTT, now, 1)
        if f.klass is FlowClass.FAST:
            break
    assert f.klass is FlowClass.FAST
    assert f.window == pytest.approx(share * RTT, rel=0.01)


def test_a_flow_backed_up_at_the_pep_is_not_slow() -> None:
    """Its low arrival rate is the RAN leg's doing: shrinking its window would starve it."""
    a = RapidAllocator()
    a.set_capacity("ue", C)
    f = a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    received, now = 0, 0.0
    while f.klass is FlowClass.INIT:
        now += RTT * 1.0001
        received += int(0.3 * C * RTT)
        a.observe(1, now, bytes_received=received, rtt_min=RTT, rtt=RTT, backlogged=True)
    assert f.klass is FlowClass.FAST
    assert f.window == pytest.approx(C * RTT)


def test_ewma_weights_the_previous_estimate_by_one_eighth() -> None:
    a = RapidAllocator(alpha=0.125)
    a.set_capacity("ue", C)
    a.add(1, "ue", 0.0, mss=MSS, rtt_min=RTT, rtt=RTT, bytes_received=0)
    a.observe(1, RTT, bytes_received=int(1000 * RTT), rtt_min=RTT, rtt=RTT)
    a.observe(1, 2 * RTT, bytes_received=int(1000 * RTT + 9000 * RTT), rtt_min=RTT, rtt=RTT)
    assert a.flows[1].rate_hat == pytest.approx(1000 / 8 + 9000 * 7 / 8)


# --- the RAN leg in the kernel: cwnd = rate x smoothed RTT_min, losses ignored ----------


@pytest.mark.netns
@pytest.mark.bpf
def test_rapid_cwnd_follows_the_rate(netns_pair, kernel: MeldKernel, tuning: Tuning) -> None:  # type: ignore[no-untyped-def]
    """The flow's rate (1 MB/s) times its RAN RTT_min (here the veth's, plus a configured
    50 ms that stands for the radio) is its cwnd, whatever the random loss on the link."""
    port = 5301
    netns_pair.bottleneck("50mbit")
    netns_pair.random_loss(5, port)
    netns_pair.sink(port)
    ue = netns_pair.b_ip
    kernel.configure(CcaMode.MELD_ME, dataclasses.replace(tuning, rapid_rtt_extra_us=50_000))
    kernel.set_ue_mode(ue, CcaMode.RAPID)
    kernel.reset_counters(ue)
    stop = threading.Event()

    def fresh() -> None:
        while not stop.wait(0.008):
            kernel.set_radio(ue, UeRadio(observed_ns=time.monotonic_ns(), capacity_Bps=4_000_000,
                                         d_tbs=2292, n_harq=8, q_th_bytes=18336))  # fmt: skip

    kernel.set_radio(ue, UeRadio(observed_ns=time.monotonic_ns(), capacity_Bps=4_000_000))
    feeder = threading.Thread(target=fresh)
    feeder.start()
    try:
        sock = netns_pair.connect(port, kernel.names["meld_cubic"])
        assert tcp_info(sock)["snd_cwnd"] == tuning.rapid_init_cwnd  # high initial cwnd
        kernel.set_flow_rate(sock, 1_000_000)
        sock.settimeout(0.05)
        cwnds = []
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                sock.send(b"\0" * 65536)
            info = tcp_info(sock)
            cwnds.append((time.monotonic(), info["ca_state"], info["snd_cwnd"]))
        priv = kernel.flow_priv(sock)
        sock.close()
    finally:
        stop.set()
        feeder.join()
        kernel.set_ue_mode(ue, None)
        kernel.configure(CcaMode.MELD_ME, tuning)
    assert priv is not None and 0 < priv.rtt_min_us < 50_000
    expected = int(1_000_000 * (priv.rtt_min_us + 50_000) / 1e6 / MSS)
    assert priv.target_cwnd == pytest.approx(expected, abs=2)
    # Losses never reached the growth function, and the program kept cwnd at each.
    c = kernel.counters(ue)
    assert c is not None and c.suppressed >= 1 and c.notified == 0, c.as_dict() if c else None
    assert priv.loss_ssthresh >= priv.loss_cwnd, (priv.loss_cwnd, priv.loss_ssthresh)
    # After the first RTT_min period, cwnd is RAPID's whenever a congestion control hook
    # sets it (open/disorder). During a recovery episode the kernel's PRR sets it, a little
    # lower for an RTT, or at the in-flight count after the rare impossible-ssthresh entry
    # that the program repairs (meld.bpf.c, repair_ssthresh; docs/meld-rapid.md): that
    # entry sends one burst first, and its cwnd follows the burst while it drains. So the
    # check is on open-state samples, the typical value, not the lowest.
    late = [cwnd for t, state, cwnd in cwnds if t > end - 0.75 and state in ("open", "disorder")]
    assert late, sorted({state for _, state, _ in cwnds})
    assert statistics.median(late) == pytest.approx(expected, abs=2), (expected, sorted(late),
                                                                       c.as_dict())  # fmt: skip


@pytest.mark.netns
@pytest.mark.bpf
def test_rapid_rtt_min_ignores_own_queue(netns_pair, kernel: MeldKernel, tuning: Tuning) -> None:  # type: ignore[no-untyped-def]
    """At gain 200 % the flow keeps a standing queue that never empties, so every RTT
    sample includes it; RTT_min stays within 25 % of the path's lowest RTT (the kernel's
    windowed minimum) instead of growing with the queue it causes."""
    port = 5302
    netns_pair.bottleneck("10mbit")
    netns_pair.sink(port)
    ue = netns_pair.b_ip
    rate = 1_250_000  # the bottleneck's
    kernel.configure(CcaMode.MELD_ME, dataclasses.replace(tuning, rapid_gain_pct=200,
                                                       rapid_rtt_extra_us=10_000))  # fmt: skip
    kernel.set_ue_mode(ue, CcaMode.RAPID)
    stop = threading.Event()

    def fresh() -> None:
        while not stop.wait(0.008):
            kernel.set_radio(ue, UeRadio(observed_ns=time.monotonic_ns(), capacity_Bps=rate))

    kernel.set_radio(ue, UeRadio(observed_ns=time.monotonic_ns(), capacity_Bps=rate))
    feeder = threading.Thread(target=fresh)
    feeder.start()
    try:
        sock = netns_pair.connect(port, kernel.names["meld_cubic"])
        kernel.set_flow_rate(sock, rate)
        sock.settimeout(0.05)
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                sock.send(b"\0" * 65536)
        priv = kernel.flow_priv(sock)
        info = tcp_info(sock)
        sock.close()
    finally:
        stop.set()
        feeder.join()
        kernel.set_ue_mode(ue, None)
        kernel.configure(CcaMode.MELD_ME, tuning)
    assert priv is not None and priv.rtt_min_us > 0
    assert info["rtt_us"] > 3 * info["min_rtt_us"], info  # the queue stood all along
    assert priv.rtt_min_us <= 1.25 * info["min_rtt_us"] + 1, (priv.rtt_min_us, info)
