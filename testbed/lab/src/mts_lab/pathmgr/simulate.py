"""Discrete-event simulation of the research study (report §3.1, §4.1–§4.2).

A fluid queue at the proxy fed at a constant rate (2 Gbit/s) and drained by the active paths;
each path alternates LoS/NLoS with exponential dwell times and has slow log-normal fading.
The path manager is the real ``PathControl`` (and the real predictor) driven in virtual time;
a path change takes effect ``path_change_delay`` after it is decided and each prediction costs
a virtual compute time (the published Table 7.1 p90 times by default, as in the study).

The study did not publish its capacities, fading or buffer size (they come from [3]); the
values below are ours and are written into every result file. Everything is event-driven and
exact for the fluid: the level is piecewise linear, reactive triggers fire at the exact time
the queue crosses Q_HT (the study checks on every packet), and per-packet delays come from
the cumulative arrival and departure curves (FIFO), with partial loss when the buffer is full.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from path_manager.control import (
    Action,
    ControlMode,
    ControlSettings,
    Observation,
    PathControl,
    PathView,
    Trigger,
)
from path_manager.predictor import PathState, Solver, Variant, predict

Array = NDArray[np.float64]

# Published prediction time p90 (Table 7.1) by active paths: the study's compute penalty.
PUBLISHED_P90 = {
    Variant.CDF: {1: 2.3e-3, 2: 5.2e-3, 3: 5.3e-3, 4: 9.0e-3},
    Variant.FPT: {1: 1.8e-3, 2: 4.2e-3, 3: 4.4e-3, 4: 7.6e-3},
}


def published_penalty(paths: int, variant: Variant) -> float:
    table = PUBLISHED_P90[variant]
    return table[min(max(paths, 1), max(table))]


@dataclass(frozen=True)
class SimSetup:
    paths: int = 8
    arrival_bps: float = 2e9
    packet_bytes: int = 1500
    duration: float = 70.0
    los_bps: float = 800e6  # mean LoS capacity of a path
    nlos_bps: float = 100e6  # mean NLoS capacity of a path
    mean_los: float = 3.0  # s
    mean_nlos: float = 2.5  # s
    fading_sigma: float = 0.15  # std of the log of the fading factor
    fading_tau: float = 0.5  # s, correlation time of the fading
    fading_step: float = 0.05  # s, fading is piecewise constant over this
    path_change_delay: float = 0.020
    buffer_packets: float = 10_000.0
    initial_active: int = 4
    delay_sample_step: float = 0.0005  # s between delay samples (virtual packets)
    compute_penalty: str = "published"  # "published" (Table 7.1) or "none"
    published: str = "table-4.1"  # the published figures this setup is compared with

    @property
    def arrival_pps(self) -> float:
        return self.arrival_bps / (8 * self.packet_bytes)

    def pps(self, bps: float) -> float:
        return bps / (8 * self.packet_bytes)


@dataclass
class EventLoop:
    """Virtual time: a clock and a scheduler for ``PathControl``."""

    now: float = 0.0
    _queue: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    def __call__(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (max(when, self.now), next(self._seq), callback))

    def run_until(
        self, end: float, before_each: Callable[[float], None], after_each: Callable[[], None]
    ) -> None:
        """Run events up to ``end``; the hooks see the time before and the state after each."""
        while self._queue and self._queue[0][0] <= end:
            when, _, callback = heapq.heappop(self._queue)
            before_each(when)
            self.now = when
            callback()
            after_each()
        before_each(end)
        self.now = end


@dataclass
class Channel:
    """One run's radio: LoS/NLoS toggle times and fading factors of every path."""

    toggles: list[list[float]]  # per path, sorted toggle times
    initial_los: list[bool]
    fading: Array  # (steps, paths) multiplicative factors

    @classmethod
    def draw(cls, setup: SimSetup, rng: np.random.Generator) -> Channel:
        p_los = setup.mean_los / (setup.mean_los + setup.mean_nlos)
        initial = [bool(rng.random() < p_los) for _ in range(setup.paths)]
        toggles = []
        for los in initial:
            t, times = 0.0, []
            while t < setup.duration:
                t += rng.exponential(setup.mean_los if los else setup.mean_nlos)
                times.append(t)
                los = not los
            toggles.append(times)
        steps = math.ceil(setup.duration / setup.fading_step) + 1
        rho = math.exp(-setup.fading_step / setup.fading_tau)
        z = np.empty((steps, setup.paths))
        z[0] = rng.standard_normal(setup.paths)
        for i in range(1, steps):
            z[i] = rho * z[i - 1] + math.sqrt(1 - rho * rho) * rng.standard_normal(setup.paths)
        sigma = setup.fading_sigma
        return cls(toggles, initial, np.exp(sigma * z - sigma * sigma / 2))


class FluidProxy:
    """The proxy's queue as a fluid, its paths, and the operator (implements ``Plant``)."""

    def __init__(self, setup: SimSetup, channel: Channel, loop: EventLoop) -> None:
        self.setup = setup
        self.loop = loop
        self.channel = channel
        self.arrival = setup.arrival_pps
        self.los = list(channel.initial_los)
        self.factor = channel.fading[0].copy()
        self.active = [i < setup.initial_active for i in range(setup.paths)]
        self.control: PathControl | None = None
        self.level = 0.0
        self.t = 0.0
        self.accepted = 0.0  # cumulative accepted arrivals (packets)
        self.departed = 0.0
        self.curve_t: list[float] = [0.0]
        self.curve_acc: list[float] = [0.0]
        self.curve_dep: list[float] = [0.0]
        self.series: list[tuple[float, float, int, float]] = []  # t, level, active, capacity
        self._probe_version = 0  # a newer probe makes older ones stale
        self._probe_at: float | None = None
        self.reactive_times: list[float] = []

    # -- the radio --------------------------------------------------------------------
    def capacity(self, i: int, los: bool | None = None) -> float:
        los = self.los[i] if los is None else los
        bps = self.setup.los_bps if los else self.setup.nlos_bps
        return self.setup.pps(bps) * float(self.factor[i])

    def toggle(self, i: int) -> None:
        self.los[i] = not self.los[i]

    def set_fading(self, factors: Array) -> None:
        self.factor = factors

    def service(self) -> float:
        return sum(self.capacity(i) for i in range(self.setup.paths) if self.active[i])

    # -- fluid --------------------------------------------------------------------------
    def advance(self, to: float) -> None:
        """Move the fluid to time ``to`` (exact: at most one kink at 0 or at the buffer)."""
        dt = to - self.t
        if dt <= 0:
            return
        c = self.service()
        drift = self.arrival - c
        cap = self.setup.buffer_packets
        if drift < 0 and self.level + drift * dt < 0:
            hit = self.level / -drift
            self._segment(hit, self.arrival, c, -self.level)
            self._segment(dt - hit, self.arrival, self.arrival, 0.0)
        elif drift > 0 and self.level + drift * dt > cap:
            hit = (cap - self.level) / drift
            self._segment(hit, self.arrival, c, cap - self.level)
            self._segment(dt - hit, c, c, 0.0)
        else:
            self._segment(dt, self.arrival, c, drift * dt)

    def _segment(self, dt: float, accept_rate: float, depart_rate: float, change: float) -> None:
        if dt <= 0:
            return
        self.t += dt
        self.level = min(max(self.level + change, 0.0), self.setup.buffer_packets)
        self.accepted += accept_rate * dt
        self.departed += depart_rate * dt
        self.curve_t.append(self.t)
        self.curve_acc.append(self.accepted)
        self.curve_dep.append(self.departed)

    def record(self) -> None:
        n = sum(self.active)
        self.series.append((self.t, self.level, n, self.service()))

    # -- Plant ------------------------------------------------------------------------
    def observe(self) -> Observation:
        s = self.setup
        views = [
            PathView(
                id=f"path{i}",
                state=PathState(
                    capacity_los=self.capacity(i, True),
                    capacity_nlos=self.capacity(i, False),
                    to_los=1 / s.mean_nlos,
                    to_nlos=1 / s.mean_los,
                    in_los=self.los[i],
                ),
                active=self.active[i],
            )
            for i in range(s.paths)
        ]
        return Observation(queue=self.level, arrival_rate=self.arrival, paths=views)

    def change(self, action: Action, path_id: str) -> None:
        i = int(path_id.removeprefix("path"))

        def apply() -> None:
            self.active[i] = action is Action.ADD
            assert self.control is not None
            self.control.change_done()

        self.loop.call_at(self.loop.now + self.setup.path_change_delay, apply)

    # -- the reactive trigger: the queue is sampled exactly when it could fire ---------
    def schedule_probe(self) -> None:
        control = self.control
        if control is None or control.change_pending:
            self._probe_version += 1  # re-armed when the change is done
            self._probe_at = None
            return
        s = control.settings
        if s.mode.predictive and not s.mode.reactive_backup:
            return
        when = self._next_trigger_time(s)
        if when is None or when > self.setup.duration or when == self._probe_at:
            return
        self._probe_version += 1
        self._probe_at = when
        version = self._probe_version

        def probe() -> None:
            if version == self._probe_version and self.control is not None:
                self._probe_at = None
                self.control.on_queue(self.level)

        self.loop.call_at(when, probe)

    def _next_trigger_time(self, s: ControlSettings) -> float | None:
        drift = self.arrival - self.service()
        now = self.loop.now
        guard = (
            now if s.mode is ControlMode.REACTIVE else self.control_t_ic() + s.reactive_guard + 1e-9
        )
        candidates = []
        above = _time_to_exceed(self.level, drift, s.q_high)
        if above is not None and not all(self.active):
            candidates.append(max(now + above, guard))
        below = _time_to_fall_below(self.level, drift, s.q_low)
        if s.mode is ControlMode.REACTIVE and below is not None and sum(self.active) > 1:
            candidates.append(now + below)
        return min(candidates) if candidates else None

    def control_t_ic(self) -> float:
        return self.control.t_ic if self.control is not None else -math.inf


def _time_to_exceed(level: float, drift: float, threshold: float) -> float | None:
    if level > threshold:
        return 0.0
    if drift <= 0:
        return None
    return (threshold - level) / drift + 1e-9


def _time_to_fall_below(level: float, drift: float, threshold: float) -> float | None:
    if level < threshold:
        return 0.0
    if drift >= 0:
        return None
    return (level - threshold) / -drift + 1e-9


# -- one run ------------------------------------------------------------------------------
DELAY_BINS = np.concatenate([[0.0], np.logspace(-6, 1, 701)])  # seconds; last bin edge 10 s


@dataclass
class RunResult:
    mode: str
    reactive_guard: float
    seed: int
    reactive_changes: int
    predictive_changes: int
    predictive_controls: int
    discarded_predictions: int
    mean_active_paths: float
    loss_fraction: float
    delay_histogram: list[float]  # accepted share of virtual packets per DELAY_BINS bin
    reactive_times: list[float]
    series: dict[str, list[float]] | None = None


def run_once(
    setup: SimSetup,
    settings: ControlSettings,
    seed: int,
    *,
    keep_series: bool = False,
    solver: Solver | None = None,
) -> RunResult:
    """One run of one scheme; the channel depends on the seed only (common random numbers)."""
    channel = Channel.draw(setup, np.random.default_rng(seed))
    loop = EventLoop()
    proxy = FluidProxy(setup, channel, loop)
    solver = solver or Solver()

    def penalty(paths: int, variant: Variant) -> float:
        return published_penalty(paths, variant) if setup.compute_penalty == "published" else 0.0

    control = PathControl(
        settings,
        proxy,
        loop,
        loop,
        predictor=lambda sc, th: predict(sc, th, solver),
        compute_delay=penalty,
        on_decision=lambda d: (
            proxy.reactive_times.append(d.time)
            if d.trigger is Trigger.REACTIVE and d.action is not Action.NONE
            else None
        ),
    )
    proxy.control = control
    _schedule_channel(proxy, loop)
    control.start()
    proxy.record()
    proxy.schedule_probe()

    def after_each() -> None:
        proxy.record()
        proxy.schedule_probe()

    loop.run_until(setup.duration, proxy.advance, after_each)
    control.stop()
    return _result(setup, settings, seed, proxy, control, keep_series)


def _schedule_channel(proxy: FluidProxy, loop: EventLoop) -> None:
    setup, channel = proxy.setup, proxy.channel
    for i, times in enumerate(channel.toggles):
        for t in times:
            if t < setup.duration:
                loop.call_at(t, functools.partial(proxy.toggle, i))
    for step in range(1, channel.fading.shape[0]):
        t = step * setup.fading_step
        if t < setup.duration:
            loop.call_at(t, functools.partial(proxy.set_fading, channel.fading[step]))


def _result(
    setup: SimSetup,
    settings: ControlSettings,
    seed: int,
    proxy: FluidProxy,
    control: PathControl,
    keep_series: bool,
) -> RunResult:
    histogram, loss = _delays(setup, proxy)
    series = np.array(proxy.series)
    times, active = series[:, 0], series[:, 2]
    mean_active = float(np.sum(active[:-1] * np.diff(times)) / max(times[-1] - times[0], 1e-9))
    kept = None
    if keep_series:
        kept = _bands(setup, proxy)
    return RunResult(
        mode=settings.mode.value,
        reactive_guard=settings.reactive_guard,
        seed=seed,
        reactive_changes=control.counters.reactive_changes,
        predictive_changes=control.counters.predictive_changes,
        predictive_controls=control.counters.predictive_controls,
        discarded_predictions=control.counters.discarded_predictions,
        mean_active_paths=mean_active,
        loss_fraction=loss,
        delay_histogram=histogram.tolist(),
        reactive_times=proxy.reactive_times,
        series=kept,
    )


def _delays(setup: SimSetup, proxy: FluidProxy) -> tuple[Array, float]:
    """Histogram of FIFO delays of virtual packets sent every delay_sample_step, and loss."""
    t = np.array(proxy.curve_t)
    acc = np.array(proxy.curve_acc)
    dep = np.array(proxy.curve_dep)
    arrivals = np.arange(0.0, t[-1], setup.delay_sample_step)
    # The accepted share at each arrival is the slope of the accepted curve / arrival rate.
    segment = np.clip(np.searchsorted(t, arrivals, side="right") - 1, 0, len(t) - 2)
    slope = (acc[segment + 1] - acc[segment]) / np.maximum(t[segment + 1] - t[segment], 1e-15)
    accepted_share = np.clip(slope / proxy.arrival, 0.0, 1.0)
    leaving = np.interp(np.interp(arrivals, t, acc), dep, t)
    # Fluid that has not left by the end of the run is still queued: not counted.
    done = leaving < t[-1]
    delays = np.maximum(leaving - arrivals, 0.0)
    histogram, _ = np.histogram(
        np.clip(delays[done], 0.0, DELAY_BINS[-1] * 0.999),
        bins=DELAY_BINS,
        weights=accepted_share[done],
    )
    loss = float(np.sum(1.0 - accepted_share) / len(arrivals))
    return histogram, loss


def _bands(setup: SimSetup, proxy: FluidProxy, window: float = 0.2) -> dict[str, list[float]]:
    """Min/max of queue and delay, paths used and capacity per 200 ms window (for plots)."""
    series = np.array(proxy.series)
    t, level, active, capacity = series.T
    edges = np.arange(0.0, setup.duration + window, window)
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    out: dict[str, list[float]] = {"t": edges[:-1].tolist()}
    for name, values in (("queue", level), ("paths", active), ("capacity_pps", capacity)):
        lo = np.full(len(edges) - 1, np.nan)
        hi = np.full(len(edges) - 1, np.nan)
        np.fmin.at(lo, which, values)
        np.fmax.at(hi, which, values)
        out[f"{name}_min"], out[f"{name}_max"] = _fill(lo), _fill(hi)
    curve_t = np.array(proxy.curve_t)
    arrivals = np.arange(0.0, curve_t[-1], setup.delay_sample_step)
    leaving = np.interp(
        np.interp(arrivals, curve_t, np.array(proxy.curve_acc)),
        np.array(proxy.curve_dep),
        curve_t,
    )
    delay = leaving - arrivals
    which = np.clip(np.searchsorted(edges, arrivals, side="right") - 1, 0, len(edges) - 2)
    lo = np.full(len(edges) - 1, np.nan)
    hi = np.full(len(edges) - 1, np.nan)
    np.fmin.at(lo, which, delay)
    np.fmax.at(hi, which, delay)
    out["delay_min"], out["delay_max"] = _fill(lo), _fill(hi)
    out["reactive_times"] = proxy.reactive_times
    return out


def _fill(values: Array) -> list[float]:
    """Carry the last value over windows without an event (the state did not change)."""
    last = 0.0
    filled = []
    for v in values:
        last = last if math.isnan(v) else float(v)
        filled.append(last)
    return filled


def settings_for(
    mode: ControlMode, reactive_guard: float, base: ControlSettings
) -> ControlSettings:
    """The study's per-scheme Q_LT: 250 for CDF variants, 1 for FPT variants and reactive."""
    q_low = base.q_low if mode in (ControlMode.CDF, ControlMode.CDF_R) else 1.0
    return ControlSettings(
        mode=mode,
        period=base.period,
        horizon=base.horizon,
        q_high=base.q_high,
        q_low=q_low,
        p_high_bound=base.p_high_bound,
        p_low_bound=base.p_low_bound,
        reactive_guard=reactive_guard,
        safety_max_paths=base.safety_max_paths,
    )


def describe_setup(setup: SimSetup) -> dict[str, Any]:
    return asdict(setup)
