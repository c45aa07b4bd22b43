"""The heart of MELD, end to end in the kernel: random loss on a real link, real TCP.

A sender in one namespace (the PEP's RAN leg) pushes data through a 50 Mbit/s tbf
bottleneck to a receiver (the UE) whose nftables input hook drops 0.3 % of the segments
at random (``numgen random``). The sender uses our congestion control; the UE's entry in
the radio map decides what each loss means:

- "random loss" (big transport blocks, short RLC queue): cwnd is kept (ssthresh never
  drops; cwnd is the same after a recovery episode as before it);
- "congestion" (queue over Q_th), stale radio data, or no radio data: the standard
  reduction (Reno halves: ssthresh = cwnd/2).
"""

from __future__ import annotations

import statistics
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
    """Send for SECONDS while sampling TCP_INFO every 0.5 ms."""
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
    chunk = b"\0" * (1 << 16)
    end = time.monotonic() + SECONDS
    try:
        while time.monotonic() < end:
            sock.send(chunk)
    finally:
        done.set()
        t.join()
        sock.close()
    return samples


def episode_ratios(samples: list[Sample]) -> list[float]:
    """cwnd right after each loss-recovery episode over cwnd right before it."""
    ratios, before, inside = [], None, False
    for s in samples:
        if s.ca_state in ("recovery", "loss"):
            inside = True
        elif s.ca_state == "open":
            if inside and before:
                ratios.append(s.cwnd / before)
            inside, before = False, s.cwnd
    return ratios


def first_reduction(samples: list[Sample]) -> tuple[int, int]:
    """(cwnd just before ssthresh first became finite, that ssthresh)."""
    peak = 0
    for s in samples:
        if s.ssthresh < INFINITE_SSTHRESH:
            return peak, s.ssthresh
        peak = max(peak, s.cwnd)
    raise AssertionError("ssthresh never dropped")


@pytest.fixture
def lossy(netns_pair, kernel: MeldKernel):  # type: ignore[no-untyped-def]
    netns_pair.bottleneck("50mbit")
    netns_pair.random_loss(3, PORT)
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
    assert c["suppressed"] >= 3 and c["notified"] == 0, c
    assert all(s.ssthresh == INFINITE_SSTHRESH for s in samples), "ssthresh was reduced"
    ratios = episode_ratios(samples)
    assert ratios, "no complete recovery episode observed"
    assert statistics.median(ratios) >= 0.85, ratios


def test_congestion_halves_cwnd(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    with _Fresh(kernel, lossy.b_ip, txq=50_000):  # S_TxQueue >= Q_th = 18,336 B
        samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["notified"] >= 3 and c["suppressed"] == 0, c
    cwnd, ssthresh = first_reduction(samples)
    assert 0.35 <= ssthresh / cwnd <= 0.6, (cwnd, ssthresh)


def test_stale_radio_state_halves_cwnd(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    kernel.set_radio(lossy.b_ip, radio(txq=0, age_s=1.0))  # "random loss", but 1 s old
    samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["stale"] >= 3 and c["stale"] == c["notified"] and c["suppressed"] == 0, c
    cwnd, ssthresh = first_reduction(samples)
    assert 0.35 <= ssthresh / cwnd <= 0.6, (cwnd, ssthresh)


def test_no_radio_state_is_plain_reno(lossy, kernel: MeldKernel) -> None:  # type: ignore[no-untyped-def]
    samples = transfer(lossy, kernel.names["meld_reno"])
    c = counters(kernel, lossy.b_ip)
    assert c["no_data"] >= 3 and c["no_data"] == c["notified"], c
    cwnd, ssthresh = first_reduction(samples)
    assert 0.35 <= ssthresh / cwnd <= 0.6, (cwnd, ssthresh)
