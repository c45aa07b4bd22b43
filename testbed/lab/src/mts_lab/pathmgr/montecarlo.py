"""Monte Carlo of the same fluid-queue model, to validate the predictor.

Each sample draws a phase trajectory of the per-path LoS/NLoS chains with exact exponential
dwell times and moves the level along it exactly (piecewise linear, reflected at 0, capped at
the buffer), so the only error is sampling error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from path_manager.predictor import Scenario, Thresholds


@dataclass(frozen=True)
class Estimate:
    cdf_high: float
    cdf_low: float
    fpt_high: float
    fpt_low: float
    samples: int

    def standard_error(self, p: float) -> float:
        return math.sqrt(max(p * (1 - p), 1e-12) / self.samples)


def simulate(
    scenario: Scenario, thresholds: Thresholds, samples: int, rng: np.random.Generator
) -> Estimate:
    paths = scenario.paths
    c_los = np.array([p.capacity_los for p in paths])
    c_nlos = np.array([p.capacity_nlos for p in paths])
    to_los = np.array([p.to_los for p in paths])
    to_nlos = np.array([p.to_nlos for p in paths])
    los = np.tile(np.array([p.in_los for p in paths]), (samples, 1))
    horizon = thresholds.horizon

    t = np.zeros(samples)
    level = np.full(samples, float(scenario.queue))
    high, low = level.copy(), level.copy()
    running = np.ones(samples, dtype=bool)
    while running.any():
        rates = np.where(los, to_nlos, to_los)  # (N, n) rate of each path's next flip
        total = rates.sum(axis=1)
        with np.errstate(divide="ignore"):
            dwell = np.where(total > 0, rng.exponential(1.0, samples) / total, np.inf)
        step = np.where(running, np.minimum(dwell, horizon - t), 0.0)
        drift = scenario.arrival_rate - np.where(los, c_los, c_nlos).sum(axis=1)
        level = np.clip(level + drift * step, 0.0, scenario.buffer)
        high, low = np.maximum(high, level), np.minimum(low, level)
        t += step
        flipping = running & (t < horizon)
        running = flipping
        if flipping.any():
            cumulative = np.cumsum(rates[flipping], axis=1)
            pick = rng.random(int(flipping.sum())) * cumulative[:, -1]
            which = (cumulative < pick[:, None]).sum(axis=1)
            rows = np.flatnonzero(flipping)
            los[rows, which] = ~los[rows, which]
    return Estimate(
        cdf_high=float(np.mean(level <= thresholds.high)),
        cdf_low=float(np.mean(level <= thresholds.low)),
        fpt_high=float(np.mean(high < thresholds.high)),
        fpt_low=float(np.mean(low <= thresholds.low)),
        samples=samples,
    )
