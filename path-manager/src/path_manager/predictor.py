"""Transient prediction of the proxy queue: a Markov-modulated fluid queue.

Model (research report §2.9). Each active path i is a two-state chain, LoS ⇄ NLoS, with rate
``to_los`` (λ_i, NLoS→LoS) and ``to_nlos`` (μ_i, LoS→NLoS). The phase is the LoS vector of the
active paths. The queue level X (packets) moves with drift ``a - c(phase)`` — arrivals minus
the sum of the paths' capacities in their current state — is reflected at 0 and capped at the
buffer. X(0) is the current queue and the phase at 0 is the current LoS vector.

Solution. Between two phase changes the level moves deterministically, so the law of the queue
over the horizon H is a sum over phase trajectories. We expand it in the number k of phase
changes within H: term k integrates, over the k change times, the trajectory density (rates
and survival exponentials) times the indicator of the event of interest, with the level
computed exactly along the trajectory. The last kept term K closes the series: it drops the
survival factor after the K-th change, so trajectories with more changes are counted as if
the phase froze after K changes and the probabilities still sum to one. The error is at most
P(more than K changes in H), reported with every prediction as ``truncation_bound``.

- Full model (n ≤ ``full_max_paths``, default 2): every phase of the joint 2^n chain is
  reachable; K grows until ``truncation_bound`` ≤ ``full_tolerance`` (10⁻³; K ≤ 5).
- Reduced model (n ≥ 3): the starting state plus ``reduced_transitions`` hops (default 2), i.e.
  the joint chain restricted to the Hamming ball of radius 2 around the current LoS vector —
  the thesis's WQx idea ("exact starting state plus a few hops"). Its cost is n² trajectories
  instead of 2^n phases; docs/path-manager.md gives its error against the full model.

Quadrature. Term k takes the first k−1 change times on a midpoint rule for uniform order
statistics and integrates the last change time cell by cell, where the indicator is resolved
by linear interpolation of the level between the cell's ends (the level is piecewise linear
in that time), so the common cases k ≤ 1 are integrated almost exactly.

Outputs (``Variant``): CDF — P_H = P(X(H) ≤ Q_HT), P_L = P(X(H) ≤ Q_LT); FPT — P_H = P(X stays
below Q_HT during [0, H]), P_L = P(X reaches Q_LT within H). Control adds a path when P_H is
below its bound and removes one when P_L is above its bound.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from functools import cache

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]


class Variant(StrEnum):
    CDF = "cdf"
    FPT = "fpt"


@dataclass(frozen=True)
class PathState:
    """One active path as the predictor sees it. Capacities in packets/s, rates in 1/s."""

    capacity_los: float
    capacity_nlos: float
    to_los: float  # λ: NLoS → LoS rate (1 / mean NLoS time)
    to_nlos: float  # μ: LoS → NLoS rate (1 / mean LoS time)
    in_los: bool


@dataclass(frozen=True)
class Scenario:
    """What a prediction starts from: the active paths, the arrival rate and the queue now."""

    paths: tuple[PathState, ...]
    arrival_rate: float  # packets/s
    queue: float  # packets
    buffer: float = math.inf  # packets; the level is capped here (arrivals beyond are lost)


@dataclass(frozen=True)
class Thresholds:
    high: float = 500.0  # Q_HT, packets
    low: float = 250.0  # Q_LT, packets
    horizon: float = 0.200  # H, seconds


@dataclass(frozen=True)
class Prediction:
    cdf_high: float  # P(X(H) ≤ Q_HT)
    cdf_low: float  # P(X(H) ≤ Q_LT)
    fpt_high: float  # P(X < Q_HT throughout [0, H])
    fpt_low: float  # P(X ≤ Q_LT at some time in [0, H])
    model: str  # "full" or "reduced"
    transitions: int  # K, phase changes kept
    truncation_bound: float  # P(more than K phase changes within H): bound on the error
    seconds: float  # wall time of the computation

    def p_high(self, variant: Variant) -> float:
        return self.cdf_high if variant is Variant.CDF else self.fpt_high

    def p_low(self, variant: Variant) -> float:
        return self.cdf_low if variant is Variant.CDF else self.fpt_low


@dataclass(frozen=True)
class Solver:
    """How to solve: which model for how many paths, and the quadrature sizes."""

    full_max_paths: int = 2
    full_tolerance: float = 1e-3
    full_max_transitions: int = 5
    reduced_transitions: int = 2
    first_nodes: int = 64  # cells for the change time when k = 1
    prefix_nodes: tuple[int, ...] = (16, 8, 6, 4)  # midpoints for the first k-1 times, by k
    last_nodes: tuple[int, ...] = (16, 8, 6, 4)  # cells for the last change time, by k
    budget: int = 3000  # max trajectories x quadrature points per term: coarser grids beyond

    def transitions_for(self, scenario: Scenario, horizon: float) -> tuple[str, int]:
        n = len(scenario.paths)
        if n > self.full_max_paths:
            return "reduced", self.reduced_transitions
        rate = max_exit_rate(scenario.paths) * horizon
        k = 0
        while poisson_tail(rate, k) > self.full_tolerance and k < self.full_max_transitions:
            k += 1
        return "full", k

    def grid(self, k: int, paths: int) -> tuple[int, int]:
        """(prefix midpoints, last-time cells) for term k with ``paths`` active paths."""
        if k == 0:
            return 1, 1  # no change time to integrate
        if k == 1:
            return 1, self.first_nodes
        i = min(k - 2, len(self.prefix_nodes) - 1)
        prefix, last = self.prefix_nodes[i], self.last_nodes[i]
        sequences = paths**k
        while prefix > 4 and sequences * math.comb(prefix + k - 2, k - 1) * (last + 1) > (
            self.budget
        ):
            prefix, last = prefix - 1, last - 1
        return prefix, last


DEFAULT_SOLVER = Solver()


def max_exit_rate(paths: tuple[PathState, ...]) -> float:
    """The largest total rate of phase change over all phases (uniformisation rate)."""
    return sum(max(p.to_los, p.to_nlos) for p in paths)


def poisson_tail(mean: float, k: int) -> float:
    """P(N > k) for N ~ Poisson(mean)."""
    term = math.exp(-mean)
    cdf = term
    for j in range(1, k + 1):
        term *= mean / j
        cdf += term
    return max(0.0, 1.0 - cdf)


def predict(
    scenario: Scenario,
    thresholds: Thresholds,
    solver: Solver = DEFAULT_SOLVER,
    *,
    transitions: int | None = None,
) -> Prediction:
    """The four control probabilities over the horizon (both variants at once)."""
    started = time.perf_counter()
    if not scenario.paths:
        raise ValueError("a prediction needs at least one active path")
    horizon = thresholds.horizon
    model, k_max = solver.transitions_for(scenario, horizon)
    if transitions is not None:
        k_max = transitions
    paths = _Paths.of(scenario.paths)
    total = _no_change_term(scenario, paths, thresholds, closing=k_max == 0)
    for k in range(1, k_max + 1):
        total += _term(
            scenario,
            paths,
            thresholds,
            k,
            closing=k == k_max,
            grid=solver.grid(k, len(scenario.paths)),
        )
    bound = poisson_tail(max_exit_rate(scenario.paths) * horizon, k_max)
    cdf_high, cdf_low, stay_below, reach_low = np.clip(total, 0.0, 1.0)
    return Prediction(
        cdf_high=float(cdf_high),
        cdf_low=float(cdf_low),
        fpt_high=float(stay_below),
        fpt_low=float(reach_low),
        model=model,
        transitions=k_max,
        truncation_bound=bound,
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class _Paths:
    """Per-path parameters as arrays (index = path)."""

    c_los: Array
    c_nlos: Array
    to_los: Array
    to_nlos: Array
    los0: NDArray[np.bool_]

    @property
    def c_nlos_total(self) -> float:
        return float(self.c_nlos.sum())

    @property
    def to_los_total(self) -> float:
        return float(self.to_los.sum())

    @classmethod
    def of(cls, paths: tuple[PathState, ...]) -> _Paths:
        return cls(
            np.array([p.capacity_los for p in paths], dtype=float),
            np.array([p.capacity_nlos for p in paths], dtype=float),
            np.array([p.to_los for p in paths], dtype=float),
            np.array([p.to_nlos for p in paths], dtype=float),
            np.array([p.in_los for p in paths], dtype=bool),
        )


def _term(
    scenario: Scenario,
    p: _Paths,
    thresholds: Thresholds,
    k: int,
    *,
    closing: bool,
    grid: tuple[int, int],
) -> Array:
    """Contribution of trajectories with exactly k ≥ 1 phase changes (k or more if closing)."""
    los, was_los = _phases(tuple(bool(x) for x in p.los0), k)  # (S, k+1, n), (S, k)
    drift = scenario.arrival_rate - p.c_nlos_total - los @ (p.c_los - p.c_nlos)  # (S, k+1)
    exit_rate = p.to_los_total + los @ (p.to_nlos - p.to_los)  # (S, k+1)
    horizon = thresholds.horizon
    flips = _flip_sequences(len(scenario.paths), k)
    rates = np.where(was_los, p.to_nlos[flips], p.to_los[flips])
    flip_rate = rates.prod(axis=1)  # (S,) product of the rates of the k changes

    n_prefix, n_last = grid
    prefix, prefix_weight = _order_statistics(k - 1, n_prefix)  # (P, k-1) in [0,1], (P,)
    times = prefix * horizon  # first k-1 change times
    # Level and running max/min at the (k-1)-th change, for every sequence and prefix point.
    level = np.full((los.shape[0], times.shape[0]), float(scenario.queue))
    high = level.copy()
    low = level.copy()
    log_survival = np.zeros_like(level)
    previous = np.zeros(times.shape[0])
    for j in range(k - 1):
        dwell = times[:, j] - previous
        level = _advance(level, drift[:, j, None], dwell, scenario.buffer)
        high, low = np.maximum(high, level), np.minimum(low, level)
        log_survival -= exit_rate[:, j, None] * dwell
        previous = times[:, j]

    # The last change time: cells over [previous, H], indicator resolved inside each cell.
    fraction = _cell_ends(n_last)
    start = previous[:, None]  # (P, 1)
    nodes = start + (horizon - start) * fraction  # (P, L+1) candidate last change times
    width = (horizon - previous) / n_last  # (P,)
    d_before, d_after = drift[:, k - 1, None, None], drift[:, k, None, None]
    at_change = _advance(level[..., None], d_before, nodes - start, scenario.buffer)
    at_end = _advance(at_change, d_after, horizon - nodes, scenario.buffer)
    path_high = np.maximum(np.maximum(high[..., None], at_change), at_end)
    path_low = np.minimum(np.minimum(low[..., None], at_change), at_end)

    mid = 0.5 * (nodes[:, 1:] + nodes[:, :-1])  # (P, L)
    log_density = log_survival[..., None] - exit_rate[:, k - 1, None, None] * (mid - start)
    if not closing:
        log_density = log_density - exit_rate[:, k, None, None] * (horizon - mid)
    # ∫ over the simplex = H^(k-1)/(k-1)! · E_prefix[∫ over the last time].
    scale = horizon ** (k - 1) / math.factorial(k - 1)
    weight = (
        scale
        * flip_rate[:, None, None]
        * prefix_weight[None, :, None]
        * width[None, :, None]
        * np.exp(log_density)
    )  # (S, P, L)
    margins = np.stack(
        [
            at_end - thresholds.high,
            at_end - thresholds.low,
            path_high - thresholds.high,
            path_low - thresholds.low,
        ]
    )
    return np.asarray((_share_at_most(margins) * weight).reshape(4, -1).sum(axis=1))


def _advance(level: Array, drift: Array | float, dwell: Array | float, buffer: float) -> Array:
    """The level after ``dwell`` seconds of constant drift, reflected at 0, capped at buffer."""
    moved = np.maximum(level + drift * dwell, 0.0)
    return np.minimum(moved, buffer) if math.isfinite(buffer) else moved


def _no_change_term(
    scenario: Scenario, p: _Paths, thresholds: Thresholds, *, closing: bool
) -> Array:
    """Trajectories without a phase change: the level moves at one drift for all of H."""
    los = p.los0
    drift = scenario.arrival_rate - float(np.where(los, p.c_los, p.c_nlos).sum())
    exit_rate = float(np.where(los, p.to_nlos, p.to_los).sum())
    h, q = thresholds.horizon, float(scenario.queue)
    end = min(max(q + drift * h, 0.0), scenario.buffer)
    high, low = max(q, end), min(q, end)  # the path is monotone
    survive = 1.0 if closing else math.exp(-exit_rate * h)
    events = (end <= thresholds.high, end <= thresholds.low, high < thresholds.high,
              low <= thresholds.low)  # fmt: skip
    return survive * np.array(events, dtype=float)


def _share_at_most(g: Array) -> Array:
    """Share of each cell where the linear interpolation of g between its ends is ≤ 0.

    ``g`` holds values at the L+1 cell ends on its last axis; the result has L cells. For a
    linear g from a to b the share is (max(-a, 0) + max(-b, 0)) / (|a| + |b|) (1 if g ≡ 0).
    """
    a, b = g[..., :-1], g[..., 1:]
    below = np.maximum(-a, 0.0) + np.maximum(-b, 0.0)
    span = np.abs(a) + np.abs(b)
    share: Array = np.divide(below, span, out=np.ones_like(span), where=span > 0)
    return share


@cache
def _cell_ends(cells: int) -> Array:
    return np.linspace(0.0, 1.0, cells + 1)


@cache
def _flip_sequences(n: int, k: int) -> NDArray[np.intp]:
    """Every sequence of k path flips: shape (n**k, k)."""
    sequences = list(itertools.product(range(n), repeat=k))
    return np.array(sequences, dtype=np.intp).reshape(len(sequences), k)


@cache
def _phases(los0: tuple[bool, ...], k: int) -> tuple[Array, NDArray[np.bool_]]:
    """LoS vectors (as 0/1) before the first change and after each of k changes: (S, k+1, n);
    and the state of the flipping path before each change: (S, k)."""
    n = len(los0)
    flips = _flip_sequences(n, k)
    start = np.array(los0, dtype=bool)
    toggled = np.logical_xor.accumulate(np.eye(n, dtype=bool)[flips], axis=1) ^ start
    los = np.concatenate([np.broadcast_to(start, (flips.shape[0], 1, n)), toggled], axis=1)
    rows, steps = np.arange(flips.shape[0])[:, None], np.arange(k)[None, :]
    return los.astype(float), los[rows, steps, flips]


@cache
def _order_statistics(dims: int, nodes: int) -> tuple[Array, Array]:
    """A midpoint rule for the order statistics of ``dims`` uniforms on [0, 1].

    Sorting i.i.d. uniforms gives uniform order statistics, so the sorted tuples of a midpoint
    product grid, with their multiplicities, are an equal-weight rule for them.
    """
    if dims == 0:
        return np.zeros((1, 0)), np.ones(1)
    mids = (np.arange(nodes) + 0.5) / nodes
    points, weights = [], []
    for combo in itertools.combinations_with_replacement(range(nodes), dims):
        multiplicity = math.factorial(dims)
        for count in Counter(combo).values():
            multiplicity //= math.factorial(count)
        points.append(mids[list(combo)])
        weights.append(multiplicity)
    return np.array(points), np.array(weights, dtype=float) / nodes**dims
