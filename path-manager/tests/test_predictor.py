"""The predictor against Monte Carlo of the same model, and against exact special cases."""

import math

import numpy as np
import pytest

from mts_lab.pathmgr.bench import random_scenario
from mts_lab.pathmgr.montecarlo import simulate
from path_manager.predictor import PathState, Scenario, Solver, Thresholds, predict

TH = Thresholds(high=500.0, low=250.0, horizon=0.2)
PKT = 12_000  # bits per 1500-byte packet
# Stated tolerance: |predictor - Monte Carlo| <= 4 standard errors + 0.005 (the reduced
# model's truncation error is below 0.005 for up to 4 paths at these rates).
SAMPLES = 200_000


def emulation_path(los: bool) -> PathState:
    """Table 7.2: 900 / 100 Mbit/s, mean LoS 3 s, NLoS 2.5 s."""
    return PathState(900e6 / PKT, 100e6 / PKT, to_los=1 / 2.5, to_nlos=1 / 3.0, in_los=los)


def assert_close_to_monte_carlo(scenario: Scenario, rng: np.random.Generator) -> None:
    p = predict(scenario, TH)
    mc = simulate(scenario, TH, SAMPLES, rng)
    for name in ("cdf_high", "cdf_low", "fpt_high", "fpt_low"):
        ours, sampled = getattr(p, name), getattr(mc, name)
        tolerance = 4 * mc.standard_error(sampled) + 0.005
        assert abs(ours - sampled) <= tolerance, (name, ours, sampled, scenario)


@pytest.mark.parametrize(
    ("los", "queue", "rate_gbps"),
    [
        ((True,), 100, 1.0),
        ((False,), 0, 0.09),
        ((True, False), 300, 1.0),
        ((False, False), 0, 1.0),
        ((True, True, False), 450, 1.0),
        ((True, False, False, False), 200, 1.0),
        ((False, False, False, False), 400, 1.0),
    ],
)
def test_emulation_setup_matches_monte_carlo(los, queue, rate_gbps):
    scenario = Scenario(tuple(emulation_path(x) for x in los), rate_gbps * 1e9 / PKT, queue)
    assert_close_to_monte_carlo(scenario, np.random.default_rng(len(los) * 1000 + queue))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_random_scenarios_match_monte_carlo(n):
    rng = np.random.default_rng(n)
    for _ in range(4):
        assert_close_to_monte_carlo(random_scenario(n, rng), rng)


def test_models_by_number_of_paths():
    for n, model in [(1, "full"), (2, "full"), (3, "reduced"), (4, "reduced")]:
        p = predict(Scenario(tuple(emulation_path(True) for _ in range(n)), 80_000, 0), TH)
        assert p.model == model
        assert p.truncation_bound < (1e-3 if model == "full" else 0.01)


def test_without_phase_changes_the_queue_is_deterministic():
    # Rates 0: the level moves at a constant drift, so every probability is 0 or 1.
    path = PathState(50_000, 10_000, to_los=0.0, to_nlos=0.0, in_los=True)
    grows = predict(Scenario((path,), 52_000, 0.0), TH)  # +2000 pkt/s: 400 pkt at H
    assert (grows.cdf_high, grows.cdf_low, grows.fpt_high, grows.fpt_low) == (1, 0, 1, 1)
    crosses = predict(Scenario((path,), 53_000, 0.0), TH)  # 600 pkt at H
    assert (crosses.cdf_high, crosses.fpt_high) == (0, 0)


def test_single_change_integrates_exactly():
    # One NLoS path that may turn LoS once: P_H(CDF) has a closed form.
    lam = 2.0
    path = PathState(capacity_los=20_000, capacity_nlos=0.0, to_los=lam, to_nlos=0.0, in_los=False)
    arrival = 10_000.0  # H = 0.2 s
    # Level: +10000/s until the change at τ, then -10000/s: X(H) = 10000 (2τ - H) if > 0.
    # X(H) <= 500  <=>  τ <= (500/10000 + H) / 2 = 0.125 s.
    expected = 1 - math.exp(-lam * 0.125)
    p = predict(Scenario((path,), arrival, 0.0), TH)
    assert p.cdf_high == pytest.approx(expected, abs=1e-6)


def test_more_queue_means_less_chance_to_stay_low():
    paths = tuple(emulation_path(x) for x in (True, False))
    values = [predict(Scenario(paths, 1e9 / PKT, q), TH).fpt_high for q in (0, 200, 400, 480)]
    assert values == sorted(values, reverse=True)


def test_full_and_reduced_models_agree_on_three_and_four_paths():
    rng = np.random.default_rng(11)
    full = Solver(full_max_paths=4)
    for n in (3, 4):
        for _ in range(5):
            s = random_scenario(n, rng)
            a, b = predict(s, TH), predict(s, TH, full)
            assert b.model == "full" and a.model == "reduced"
            for name in ("cdf_high", "cdf_low", "fpt_high", "fpt_low"):
                assert abs(getattr(a, name) - getattr(b, name)) < 0.005


def test_no_path_is_an_error():
    with pytest.raises(ValueError, match="at least one"):
        predict(Scenario((), 1.0, 0.0), TH)
