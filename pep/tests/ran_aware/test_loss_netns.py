"""The heart of MELD, end to end in the kernel: random loss on a real link, real TCP.

A sender in one namespace (the PEP's RAN leg) pushes data through a 50 Mbit/s tbf
bottleneck to a receiver (the UE) whose nftables input hook drops 0.5 % of the segments
at random (``numgen random``). The sender uses our congestion control; the UE's entry in
the radio map decides what each loss means:

- "random loss" (big transport blocks, short RLC queue): cwnd is kept (ssthresh never
  drops; cwnd is the same after a recovery episode as before it);
- "congestion" (queue over Q_th), stale radio data, or no radio data: the standard
  reduction (Reno halves: ssthresh = cwnd/2);
- MELD-overflow: a queue above Q_th is no congestion, a full RLC buffer is; ignore-loss
  keeps cwnd even without any radio state.

Two views are checked: the program's own record of the last loss event (the cwnd it
saw, the ssthresh it chose: exact) and TCP_INFO sampled from user space (what the
kernel's TCP then did; a loaded machine can delay a sample, so those checks never
depend on catching one moment).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from mec_pep.ran_aware.kernel import CcaMode, DecisionLog, FlowPriv, MeldKernel, Tuning, UeRadio
from mec_pep.sockets import tcp_info

pytestmark = [pytest.mark.netns, pytest.mark.bpf]

PORT = 5201
SECONDS = 1.5
LONGEST_SECONDS = 10.0
LOSS_FROM_CWND = 100  # segments
LOSS_PER_MILLE = 5
LOSS_DSCP = 8  # CS1: the sender marks its segments once the loss is to start
TCP_INFINITE_SSTHRESH = 0x7FFFFFFF


@dataclass
class Sample:
    ca_state: str
    cwnd: int
    ssthresh: int
    retrans: int
    rtos: int  # retransmission timeouts so far


TCPI_TOTAL_RTO = 240  # offset of struct tcp_info's u16 tcpi_total_rto (Linux >= 6.7)


def rto_count(sock: socket.socket) -> int:
    """Timeouts the connection has had: a sampler can miss the short "loss" state, not this."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCPI_TOTAL_RTO + 2)
    assert len(raw) == TCPI_TOTAL_RTO + 2, "tcpi_total_rto needs Linux 6.7"
    return int(struct.unpack_from("=H", raw, TCPI_TOTAL_RTO)[0])


FULL = 108_000  # a full 120 kB RLC buffer at PEP_MELD_RLC_FULL_PCT = 90


def radio(*, txq: int, age_s: float = 0.0) -> UeRadio:
    """25 PRB at CQI 15 (TBS 2292 B), 8 HARQ processes: Q_th = 18,336 B."""
    return UeRadio(
        full_bytes=FULL,
        observed_ns=time.monotonic_ns() - int(age_s * 1e9),
        capacity_Bps=2_000_000,
        d_tbs=2292,
        txq_bytes=txq,
        q_th_bytes=2292 * 8,
        n_harq=8,
    )


def transfer(  # type: ignore[no-untyped-def]
    pair, kernel: MeldKernel, cca: str, enough: Callable[[], bool] = lambda: True
) -> tuple[list[Sample], FlowPriv]:
    """Send for SECONDS, and on until ``enough()`` (at most LONGEST_SECONDS), while sampling
    TCP_INFO every 0.5 ms; the loss starts once cwnd reaches LOSS_FROM_CWND.

    (Losses in the first milliseconds, while cwnd and RTT are still tiny, would come and
    go between two samples. A loaded machine sends less in SECONDS, so a test that needs a
    number of loss events says so with ``enough``.)"""
    pair.random_loss(LOSS_PER_MILLE, PORT, dscp=LOSS_DSCP)
    sock = pair.connect(PORT, cca)
    samples: list[Sample] = []
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            i = tcp_info(sock)
            samples.append(Sample(i["ca_state"], i["snd_cwnd"], i["snd_ssthresh"],
                                  i["total_retrans"], rto_count(sock)))  # fmt: skip
            time.sleep(0.0005)

    t = threading.Thread(target=sampler)
    t.start()
    chunk = b"\0" * (1 << 16)
    sock.settimeout(0.05)  # a full send buffer must not hold us past the end
    start = time.monotonic()
    lossy = False
    try:
        while (now := time.monotonic()) < start + SECONDS or (
            now < start + LONGEST_SECONDS and not enough()
        ):
            with contextlib.suppress(TimeoutError):
                sock.send(chunk)
            if not lossy and tcp_info(sock)["snd_cwnd"] >= LOSS_FROM_CWND:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, LOSS_DSCP << 2)
                lossy = True
        priv = kernel.flow_priv(sock)
    finally:
        done.set()
        t.join()
        sock.close()
    assert priv is not None
    return samples, priv


def cwnd_around_first_loss(samples: list[Sample]) -> tuple[int, int]:
    """(cwnd just before the first retransmission, lowest cwnd from then on)."""
    first = next(i for i, s in enumerate(samples) if s.retrans > 0)
    return samples[first - 1].cwnd, min(s.cwnd for s in samples[first:])


def until_timeout(samples: list[Sample]) -> list[Sample]:
    """The samples before the first retransmission timeout.

    A timeout sets cwnd to 1 in the kernel (tcp_enter_loss) whatever the congestion
    control decides, so a kept loss's window can only be judged up to it. (CI once saw
    one under random loss: a lost retransmission, cwnd 159 -> 1; and once, on a loaded
    machine, a cwnd of 1 with no sample in the "loss" state, hence the timeout count.)"""
    loss = next(
        (i for i, s in enumerate(samples) if s.ca_state == "loss" or s.rtos > 0), len(samples)
    )
    return samples[:loss]


def reductions(samples: list[Sample]) -> list[tuple[Sample, Sample]]:
    """Moments ssthresh went below the cwnd of the moment before: a loss reduction.

    (CUBIC's HyStart also moves ssthresh, to the current cwnd: that is growth, not loss.
    A sample with an impossible ssthresh, above 2^31 - 1, is the kernel-side defect of
    docs/meld-rapid.md "Impossible ssthresh", not a decision of ours; the program's repair
    on the next ACK that follows it is no reduction either.)
    """
    return [
        (a, b)
        for a, b in itertools.pairwise(samples)
        if b.ssthresh != a.ssthresh
        and b.ssthresh < 0.9 * a.cwnd
        and a.ssthresh <= TCP_INFINITE_SSTHRESH
    ]


def assert_halved(samples: list[Sample], priv: FlowPriv) -> None:
    # Reno: ssthresh = cwnd / 2 (tcp_reno_ssthresh), exactly, at the last loss event.
    assert priv.loss_ssthresh == max(priv.loss_cwnd // 2, 2), (priv.loss_cwnd, priv.loss_ssthresh)
    assert reductions(samples), "TCP_INFO never showed ssthresh below the cwnd before it"
    before, lowest = cwnd_around_first_loss(samples)
    assert lowest <= 0.6 * before, (before, lowest)


@pytest.fixture
def lossy(netns_pair, kernel: MeldKernel):  # type: ignore[no-untyped-def]
    netns_pair.bottleneck("50mbit")
    netns_pair.sink(PORT)
    kernel.set_ue_mode(netns_pair.b_ip, CcaMode.MELD_ME)
    kernel.reset_counters(netns_pair.b_ip)
    yield netns_pair
    kernel.set_ue_mode(netns_pair.b_ip, None)
    kernel.forget_radio(netns_pair.b_ip)


class _Fresh(threading.Thread):
    """Keeps a UE's radio state fresh, as the RNIS feed does (every 8 ms)."""

    def __init__(self, kernel: MeldKernel, ue: str, txq: int) -> None:
        super().__init__(daemon=True)
        self.kernel, self.ue, self.txq = kernel, ue, txq
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.008):
            self.kernel.set_radio(self.ue, radio(txq=self.txq))

    def __enter__(self) -> _Fresh:
        self.kernel.set_radio(self.ue, radio(txq=self.txq))
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()


def counters(kernel: MeldKernel, ue: str) -> dict[str, int]:
    c = kernel.counters(ue)
    assert c is not None, "the kernel counted no loss event for this UE"
    return c.as_dict()


def _losses(kernel: MeldKernel, ue: str) -> int:
    c = kernel.counters(ue)
    return 0 if c is None else c.as_dict()["losses"]


@pytest.mark.parametrize("growth", ["meld_reno", "meld_cubic"])
def test_random_loss_keeps_cwnd(lossy, kernel: MeldKernel, growth: str) -> None:  # type: ignore[no-untyped-def]
    with _Fresh(kernel, lossy.b_ip, txq=0):
        samples, priv = transfer(lossy, kernel, kernel.names[growth])
    c = counters(kernel, lossy.b_ip)
    assert samples[-1].retrans >= 3, "the link lost too little to test anything"
    assert c["suppressed"] >= 1 and c["notified"] == 0, c
    assert priv.loss_ssthresh >= priv.loss_cwnd, (priv.loss_cwnd, priv.loss_ssthresh)
    assert not reductions(samples), "ssthresh was reduced"
    kept = until_timeout(samples)
    assert any(s.retrans for s in kept), "the first loss was a timeout: nothing to judge"
    before, lowest = cwnd_around_first_loss(kept)
    assert lowest >= 0.85 * before, (before, lowest, c)


def test_congestion_halves_cwnd(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    with _Fresh(kernel, lossy.b_ip, txq=50_000):  # S_TxQueue >= Q_th = 18,336 B
        samples, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["notified"] >= 1 and c["suppressed"] == 0, c
    assert_halved(samples, priv)


def test_stale_radio_state_halves_cwnd(lossy, kernel: MeldKernel, tuning: Tuning) -> None:  # type: ignore[no-untyped-def]
    old = 10 * tuning.stale_ms / 1000
    kernel.set_radio(lossy.b_ip, radio(txq=0, age_s=old))  # "random loss", but too old
    samples, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["stale"] >= 1 and c["stale"] == c["notified"] and c["suppressed"] == 0, c
    assert_halved(samples, priv)


def test_meld_overflow_keeps_cwnd_below_a_full_buffer(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    """A standing queue above Q_th (MELD-ME's congestion) is random loss to MELD-overflow:
    the growth function is not told (verdict suppress), but the kept window loses its share
    of the standing queue, cwnd x RTT_min / srtt, never below Reno's halving. This link's
    RTT_min is well under a millisecond and its tbf queue holds nearly all of a 100-segment
    window, so the floor is what is kept."""
    kernel.set_ue_mode(lossy.b_ip, CcaMode.MELD_OVERFLOW)
    with _Fresh(kernel, lossy.b_ip, txq=50_000):
        _, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["suppressed"] == c["losses"] >= 1 and c["notified"] == 0, c
    assert priv.loss_ssthresh == max(priv.loss_cwnd // 2, 2), (priv.loss_cwnd, priv.loss_ssthresh)


def test_meld_overflow_halves_cwnd_on_a_full_buffer(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    kernel.set_ue_mode(lossy.b_ip, CcaMode.MELD_OVERFLOW)
    with _Fresh(kernel, lossy.b_ip, txq=FULL):
        samples, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["notified"] >= 1 and c["suppressed"] == 0, c
    assert_halved(samples, priv)


def test_ignore_loss_keeps_cwnd_without_radio_state(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    kernel.set_ue_mode(lossy.b_ip, CcaMode.IGNORE_LOSS)
    samples, _ = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert samples[-1].retrans >= 3, "the link lost too little to test anything"
    assert c["suppressed"] == c["losses"] >= 1 and c["no_data"] == 0, c
    assert not reductions(samples), "ssthresh was reduced"


def test_no_radio_state_is_plain_reno(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    samples, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["no_data"] >= 1 and c["no_data"] == c["notified"], c
    assert_halved(samples, priv)


@pytest.mark.parametrize(("txq", "verdict"), [(0, "suppress"), (50_000, "notify")])
def test_every_decision_is_in_the_log(lossy, kernel: MeldKernel, txq: int, verdict: str) -> None:  # type: ignore[no-untyped-def]
    """The kernel's ring holds one record per loss event, in time order, with the radio
    state it decided on and the ssthresh it returned (the last one is flow_priv's pair)."""
    log = DecisionLog(kernel.pin_dir)
    try:
        log.drain()  # earlier tests' decisions
        start = time.monotonic_ns()
        with _Fresh(kernel, lossy.b_ip, txq=txq):
            _, priv = transfer(lossy, kernel, kernel.names["meld_reno"])
        records = [d.as_dict() for d in log.drain()]
    finally:
        log.close()
    c = counters(kernel, lossy.b_ip)
    mine = [r for r in records if r["ue"] == lossy.b_ip]
    assert len(mine) == c["losses"] >= 1 and c["unlogged"] == 0, (len(mine), c)
    times = [r["time_ns"] for r in mine]
    assert times == sorted(times) and start < times[0] and times[-1] < time.monotonic_ns()
    for r in mine:
        assert r["flow"] == {"src": lossy.a_ip, "sport": r["flow"]["sport"], "dport": PORT}
        assert (r["mode"], r["verdict"], r["kept"]) == ("meld-me", verdict, verdict == "suppress")
        assert (r["d_tbs_bytes"], r["n_harq"], r["txq_bytes"], r["q_th_bytes"]) == (
            2292, 8, txq, 2292 * 8)  # fmt: skip
        assert r["s_tb_bytes"] == r["t_pdu_bytes"] / 8 and r["t_pdu_bytes"] >= 1480
        assert 0 <= r["radio_age_ms"] < 1000
        # the history over one srtt back: the fed queue, in at least the current bucket
        assert r["lookback_ms"] > 0 and r["window_buckets"] >= 1, r
        assert (r["window_txq_peak_bytes"], r["full_bytes"]) == (txq, FULL)
        assert 0 < (r["snd_nxt"] - r["snd_una"]) % 2**32 < 2**31
    assert (mine[-1]["cwnd_segments"], mine[-1]["ssthresh_segments"]) == (
        priv.loss_cwnd, priv.loss_ssthresh)  # fmt: skip


def test_meld_overflow_restarts_cubic_at_the_drained_window(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    """A loss MELD-overflow keeps and drains ends CUBIC's epoch with W_max at the drained
    window (cubic_restart_at), so CUBIC starts a new curve there instead of growing back at
    its fastest (x1.5 per RTT) to the window that had built the queue. Here every loss
    drains to the floor (half: the tbf queue is most of the window), and a 0.5 % loss
    comes every few round trips. Counted in loss events, not in time, and against the
    window the loss starts at (LOSS_FROM_CWND; CI once saw a first loss at 65 segments on a
    loaded machine): with the restart the windows at the later losses have a median of
    10-23 segments (3 runs, 20:58 UTC 2026-11-26); without it (the call removed, 3 runs)
    each drain was undone before the next loss and the median was 52-61.

    The loss is random, so one transfer's median can land high by chance (CI at cc42ace:
    63, with one run of losses at 992, 496, 248 segments): the test passes if one of two
    transfers shows it. Without the restart both would have to fall low by chance, where
    3 of 3 such runs had medians of 52-61."""
    kernel.set_ue_mode(lossy.b_ip, CcaMode.MELD_OVERFLOW)
    attempts = []
    for _ in range(2):
        windows = _windows_at_losses(lossy, kernel)
        later = sorted(windows[1:])
        attempts.append(windows)
        if later[len(later) // 2] < 0.35 * LOSS_FROM_CWND:
            return
    raise AssertionError(f"later windows' median not under {0.35 * LOSS_FROM_CWND}: {attempts}")


def _windows_at_losses(lossy, kernel: MeldKernel) -> list[int]:  # type: ignore[no-untyped-def]
    """One MELD-overflow CUBIC transfer of at least 10 loss events: the window (segments)
    at each, from the kernel's decision log, after checking that every loss was kept and
    the first one drained."""
    kernel.reset_counters(lossy.b_ip)
    log = DecisionLog(kernel.pin_dir)
    try:
        log.drain()  # earlier tests' (or attempts') decisions
        with _Fresh(kernel, lossy.b_ip, txq=50_000):  # a standing queue, no full buffer
            transfer(lossy, kernel, kernel.names["meld_cubic"],
                     enough=lambda: _losses(kernel, lossy.b_ip) >= 10)  # fmt: skip
        mine = [r for r in (d.as_dict() for d in log.drain()) if r["ue"] == lossy.b_ip]
    finally:
        log.close()
    assert all(r["verdict"] == "suppress" for r in mine), mine
    assert len(mine) >= 9, f"too few losses to judge: {mine}"
    assert mine[0]["ssthresh_segments"] < mine[0]["cwnd_segments"], "the first loss was not drained"
    return [int(r["cwnd_segments"]) for r in mine]
