"""Per-path radio estimates from RNIS measurements."""

import pytest

from mec_common.bus.rnis import RnisMeasurement
from path_manager.path_radio import PathRadio, RadioSettings

S = RadioSettings()


def meas(cqi: int, tbs: int = 0, cqi_capacity: int = 75_000_000) -> RnisMeasurement:
    return RnisMeasurement(
        cell="10001-0", bs_id=10001, rnti=1, ue_ipv4="10.30.0.1", wb_cqi=cqi,
        dl_tbs_bytes=tbs, dl_tbs_bps=tbs * 8 * 1000, cqi_capacity_bps=cqi_capacity,
        observed_ns=1, cell_ues=1,
    )  # fmt: skip


def test_tbs_replaces_the_cqi_guess():
    p = PathRadio("10.30.0.1")
    p.update(meas(15), 0.0, S)
    assert p.capacity_los == pytest.approx(75e6)  # no TBS yet: the CQI rate
    for i in range(60):
        p.update(meas(15, tbs=2250), 0.001 * (i + 1), S)  # 2250 B per 1 ms TTI = 18 Mbit/s
    assert p.capacity_los == pytest.approx(18e6, rel=1e-3)
    p.update(meas(15, tbs=0), 0.1, S)  # an idle TTI says nothing about capacity
    assert p.capacity_los == pytest.approx(18e6, rel=1e-3)


def test_hysteresis_and_minimum_dwell():
    p = PathRadio("x")
    p.update(meas(15), 0.0, S)
    assert p.in_los
    p.update(meas(8), 0.01, S)  # between the thresholds: unchanged
    p.update(meas(5), 0.02, S)  # NLoS candidate...
    assert p.in_los
    p.update(meas(5), 0.021 + S.min_dwell, S)  # ...held for min_dwell: NLoS
    assert not p.in_los
    p.update(meas(15), 0.06, S)
    p.update(meas(4), 0.07, S)  # a LoS blip shorter than min_dwell does not count
    p.update(meas(4), 0.2, S)
    assert not p.in_los


def test_dwell_estimates_start_at_the_priors_and_learn():
    p = PathRadio("x")
    p.update(meas(15), 0.0, S)
    to_los, to_nlos = p.rates(0.0, S)
    assert (1 / to_los, 1 / to_nlos) == pytest.approx((2.5, 3.0))
    t = 0.0
    for _ in range(20):  # LoS 0.5 s, NLoS 0.5 s, many times
        for cqi in (15, 3):
            p.update(meas(cqi), t, S)
            p.update(meas(cqi), t + S.min_dwell + 0.001, S)
            t += 0.5
    to_los, to_nlos = p.rates(t, S)
    assert 1 / to_nlos < 1.0 and 1 / to_los < 1.0  # far below the 3 s / 2.5 s priors


def test_stale_feed_falls_back_to_priors_and_keeps_the_state():
    p = PathRadio("x")
    p.update(meas(3), 0.0, S)
    p.update(meas(3), S.min_dwell + 0.001, S)
    state = p.model(10.0, S)  # nothing for 10 s
    assert p.stale(10.0, S) and state is not None
    assert (1 / state.to_los, 1 / state.to_nlos) == pytest.approx((2.5, 3.0))
    assert state.in_los is False
