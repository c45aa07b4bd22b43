"""The heart of MELD, end to end in the kernel: random loss on a real link, real TCP.

A sender in one namespace (the PEP's RAN leg) pushes data through a 50 Mbit/s tbf
bottleneck to a receiver (the UE) whose nftables input hook drops 0.5 % of the segments
at random (``numgen random``). The sender uses our congestion control; the UE's entry in
the radio map decides what each loss means:

- "random loss" (big transport blocks, short RLC queue): cwnd is kept (ssthresh never
  drops; cwnd is the same after a recovery episode as before it);
- "congestion" (queue over Q_th), stale radio data, or no radio data: the standard
  reduction (Reno halves: ssthresh = cwnd/2).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from dataclasses import dataclass

import pytest

from mec_pep.ran_aware.kernel import MeldKernel, Mode, UeRadio
from mec_pep.sockets import tcp_info

pytestmark = [pytest.mark.netns, pytest.mark.bpf]

INFINITE_SSTHRESH = 0x7FFFFFFF
PORT = 5201
SECONDS = 1.5
LOSS_AFTER = 0.2
LOSS_PER_MILLE = 5


@dataclass
class Sample:
    ca_state: str
    cwnd: int
    ssthresh: int
    retrans: int


def radio(*, txq: int, age_s: float = 0.0) -> UeRadio:
    """25 PRB at CQI 15 (TBS 2292 B), 8 HARQ processes: Q_th = 18,336 B."""
    return UeRadio(
        observed_ns=time.monotonic_ns() - int(age_s * 1e9),
        capacity_Bps=2_000_000,
        d_tbs=2292,
        txq_bytes=txq,
        q_th_bytes=2292 * 8,
        n_harq=8,
    )


def transfer(pair, cca: str) -> list[Sample]:  # type: ignore[no-untyped-def]
    """Send for SECONDS while sampling TCP_INFO every 0.5 ms; the loss starts after LOSS_AFTER.

    (Losses in the first milliseconds, while the RTT is still tiny, would come and go
    between two samples.)"""
    sock = pair.connect(PORT, cca)
    samples: list[Sample] = []
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            i = tcp_info(sock)
            samples.append(Sample(i["ca_state"], i["snd_cwnd"], i["snd_ssthresh"],
                                  i["total_retrans"]))  # fmt: skip
            time.sleep(0.0005)

    t = threading.Thread(target=sampler)
    t.start()
    loss = threading.Timer(LOSS_AFTER, pair.random_loss, (LOSS_PER_MILLE, PORT))
    loss.start()
    chunk = b"\0" * (1 << 16)
    sock.settimeout(0.05)  # a full send buffer must not hold us past the end
    end = time.monotonic() + SECONDS
    try:
        while time.monotonic() < end:
            with contextlib.suppress(TimeoutError):
                sock.send(chunk)
    finally:
        loss.join()
        done.set()
        t.join()
        sock.close()
    return samples


def cwnd_around_first_loss(samples: list[Sample]) -> tuple[int, int]:
    """(cwnd just before the first retransmission, lowest cwnd from then on)."""
    first = next(i for i, s in enumerate(samples) if s.retrans > 0)
    return samples[first - 1].cwnd, min(s.cwnd for s in samples[first:])


def reductions(samples: list[Sample]) -> list[tuple[Sample, Sample]]:
    """Moments ssthresh went below the cwnd of the moment before: a loss reduction.

    (CUBIC's HyStart also moves ssthresh, to the current cwnd: that is growth, not loss.)
    """
    return [
        (a, b)
        for a, b in itertools.pairwise(samples)
        if b.ssthresh != a.ssthresh and b.ssthresh < 0.9 * a.cwnd
    ]


def first_reduction(samples: list[Sample]) -> tuple[int, int]:
    """(largest cwnd seen up to the first finite ssthresh, that ssthresh).

    The sample where ssthresh first appears still shows about the cwnd of the loss
    (proportional rate reduction only brings cwnd down as ACKs arrive), which bounds the
    slow-start growth between the last sample before the loss and the loss itself.
    """
    peak = 0
    for s in samples:
        peak = max(peak, s.cwnd)
        if s.ssthresh < INFINITE_SSTHRESH:
            return peak, s.ssthresh
    raise AssertionError("ssthresh never dropped")


def assert_halved(samples: list[Sample]) -> None:
    cwnd, ssthresh = first_reduction(samples)
    assert 0.35 <= ssthresh / cwnd <= 0.6, (cwnd, ssthresh)
    before, lowest = cwnd_around_first_loss(samples)
    assert lowest <= 0.6 * before, (before, lowest)


@pytest.fixture
def lossy(netns_pair, kernel: MeldKernel):  # type: ignore[no-untyped-def]
    netns_pair.bottleneck("50mbit")
    netns_pair.sink(PORT)
    kernel.set_ue_mode(netns_pair.b_ip, Mode.MELD_ME)
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


@pytest.mark.parametrize("growth", ["meld_reno", "meld_cubic"])
def test_random_loss_keeps_cwnd(lossy, kernel: MeldKernel, growth: str) -> None:  # type: ignore[no-untyped-def]
    with _Fresh(kernel, lossy.b_ip, txq=0):
        samples = transfer(lossy, kernel.names[growth])
    c = counters(kernel, lossy.b_ip)
    assert samples[-1].retrans >= 3, "the link lost too little to test anything"
    assert c["suppressed"] >= 1 and c["notified"] == 0, c
    assert not reductions(samples), "ssthresh was reduced"
    before, lowest = cwnd_around_first_loss(samples)
    assert lowest >= 0.85 * before, (before, lowest)


def test_congestion_halves_cwnd(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    with _Fresh(kernel, lossy.b_ip, txq=50_000):  # S_TxQueue >= Q_th = 18,336 B
        samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["notified"] >= 1 and c["suppressed"] == 0, c
    assert_halved(samples)


def test_stale_radio_state_halves_cwnd(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    kernel.set_radio(lossy.b_ip, radio(txq=0, age_s=1.0))  # "random loss", but 1 s old
    samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["stale"] >= 1 and c["stale"] == c["notified"] and c["suppressed"] == 0, c
    assert_halved(samples)


def test_no_radio_state_is_plain_reno(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["no_data"] >= 1 and c["no_data"] == c["notified"], c
    assert_halved(samples)
