"""The analysis of why MELD-overflow gains no goodput over CUBIC (mts_lab.meld.cubic_gain),
on constructed runs: Welch's interval, and what a loss did to the window."""

from __future__ import annotations

import math
import statistics

import pytest

from mts_lab.meld import cubic_gain


def test_welch_diff_matches_the_textbook() -> None:
    a, b = [10.0, 11.0, 12.0, 13.0], [8.0, 8.5, 9.0, 9.5, 10.0]
    diff, half = cubic_gain.welch_diff(a, b)
    assert diff == pytest.approx(11.5 - 9.0)
    va, vb = statistics.variance(a) / 4, statistics.variance(b) / 5
    dof = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 4)
    assert 4 < dof < 5  # so t(0.975) lies between its values at 4 and 5 dof
    assert 2.571 * math.sqrt(va + vb) < half < 2.776 * math.sqrt(va + vb)


def test_reno_friendly_rate_is_the_kernels() -> None:
    # tcp_cubic.c: beta_scale = 8 * (1024 + 717) / 3 / (1024 - 717) = 15 in integers; one
    # segment per cwnd * beta_scale / 8 ACKed, i.e. per 1.875 windows
    assert pytest.approx(8 / 15) == cubic_gain.RENO_FRIENDLY_PER_RTT


def _leg(t0: float, t1: float, cwnd0: float, per_s: float) -> list[dict[str, float]]:
    return [{"t": t0 + i * 0.02, "cwnd": cwnd0 + per_s * i * 0.02, "srtt_ms": 40.0,
             "minrtt_ms": 25.0} for i in range(int((t1 - t0) / 0.02))]  # fmt: skip


def test_loss_anatomy_reads_depth_queue_interval_and_growth() -> None:
    # one flow: radio losses at 1 s and 2 s (cwnd 40 -> 28), growing 12.5 segments/s between
    # (0.5 per 40 ms RTT), and a congestion loss at 3 s
    samples = _leg(0.0, 4.0, 28.0, 12.5)
    regrowth = [
        {"port": 5001, "t_s": 1.0, "verdict": "off", "truth": "radio", "cwnd": 40,
         "ssthresh": 28, "srtt_ms": 40.0, "regrowth_s": None, "next_loss_s": 1.0},
        {"port": 5001, "t_s": 2.0, "verdict": "off", "truth": "radio", "cwnd": 40,
         "ssthresh": 28, "srtt_ms": 40.0, "regrowth_s": None, "next_loss_s": 1.0},
        {"port": 5001, "t_s": 3.0, "verdict": "off", "truth": "congestion", "cwnd": 80,
         "ssthresh": 56, "srtt_ms": 100.0, "regrowth_s": None, "next_loss_s": None},
    ]  # fmt: skip
    a = cubic_gain.loss_anatomy({"ran_legs": {"5001": samples}, "regrowth": regrowth}, "cubic")
    radio = a["radio"]
    assert radio["episodes"] == 2 and radio["ssthresh_over_cwnd_median"] == 0.7
    assert radio["srtt_over_minrtt_median"] == pytest.approx(1.6)
    assert radio["next_loss_s_median"] == 1.0
    assert radio["growth_segments_per_rtt_median"] == pytest.approx(0.5, abs=0.02)
    # K = cbrt(40 * 0.3 / 0.4) = 3.1 s: the next loss came before the curve's plateau
    assert radio["cubic_K_s_median"] == pytest.approx(
        (40 * (1 - 717 / 1024) / 0.4) ** (1 / 3), rel=1e-3
    )
    assert radio["next_loss_before_K_share"] == 1.0
    # the curve's slope at the epoch's start, 3 C K^2 per s, times the 40 ms RTT
    assert radio["cubic_slope_segments_per_rtt_median"] == pytest.approx(
        3 * 0.4 * radio["cubic_K_s_median"] ** 2 * 0.04, rel=1e-2
    )
    assert (
        a["congestion"]["episodes"] == 1
        and a["congestion"]["growth_segments_per_rtt_median"] is None
    )
