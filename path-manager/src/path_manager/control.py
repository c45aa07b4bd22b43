"""Path control: reactive, CDF, FPT and the two hybrids (research report §2.3–§2.8).

One ``PathControl`` per UE. It owns no thread and no clock: time comes from an injected
``Clock`` and timers from an injected ``Scheduler``, so the same code runs in real time in
the service, in virtual time in the discrete-event simulation, and step by step in tests.

- Predictive control runs every ``period`` (150 ms) and never early: each tick schedules the
  next one first, at its own start + period, carrying a token; a tick whose token is no longer
  the current one was superseded and does nothing.
- ADD if P_H < ``p_high_bound``; REMOVE if P_L > ``p_low_bound``; before a REMOVE with at most
  ``safety_max_paths`` active paths, predict again without the path that would go and keep it
  if that prediction says ADD; never remove the last path.
- Pure reactive: ADD when the queue is above Q_HT, REMOVE when below Q_LT, never while a
  change is pending.
- Hybrids (``cdf+r``, ``fpt+r``): a queue above Q_HT adds a path at once if at least T_R has
  passed since the last change (t_IC) and a path is left to add; it reschedules the next
  predictive control to now + period (the token invalidates the old one). A prediction during
  which a reactive change happened is discarded.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from path_manager.predictor import (
    PathState,
    Prediction,
    Scenario,
    Solver,
    Thresholds,
    Variant,
    predict,
)


class ControlMode(StrEnum):
    REACTIVE = "reactive"
    CDF = "cdf"
    FPT = "fpt"
    CDF_R = "cdf+r"
    FPT_R = "fpt+r"

    @property
    def predictive(self) -> bool:
        return self is not ControlMode.REACTIVE

    @property
    def reactive_backup(self) -> bool:
        return self in (ControlMode.CDF_R, ControlMode.FPT_R)

    @property
    def pure(self) -> ControlMode:
        """The scheme without its reactive backup."""
        return {ControlMode.CDF_R: ControlMode.CDF, ControlMode.FPT_R: ControlMode.FPT}.get(
            self, self
        )

    @property
    def variant(self) -> Variant:
        return Variant.CDF if self in (ControlMode.CDF, ControlMode.CDF_R) else Variant.FPT


@dataclass(frozen=True)
class ControlSettings:
    """Everything tunable at run time (``PUT /pm/v1/control``). Times in seconds."""

    mode: ControlMode = ControlMode.FPT_R
    period: float = 0.150  # PC_min_T
    horizon: float = 0.200  # H
    q_high: float = 500.0  # Q_HT, packets
    q_low: float = 250.0  # Q_LT, packets (the research uses 1 for FPT and reactive)
    p_high_bound: float = 0.99  # ADD if P_H is below
    p_low_bound: float = 0.99  # REMOVE if P_L is above
    reactive_guard: float = 0.050  # T_R
    safety_max_paths: int = 5

    def validate(self) -> None:
        """Raise ValueError with a clear message for inconsistent settings."""
        if not 0 < self.period <= 10:
            raise ValueError("period must be in (0, 10] s")
        if not 0 < self.horizon <= 10:
            raise ValueError("horizon must be in (0, 10] s")
        if not 0 <= self.q_low < self.q_high:
            raise ValueError("need 0 <= q_low < q_high")
        for name in ("p_high_bound", "p_low_bound"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1]")
        if not 0 <= self.reactive_guard < self.period:
            raise ValueError("reactive_guard (T_R) must be in [0, period): else it never fires")
        if self.safety_max_paths < 0:
            raise ValueError("safety_max_paths must be >= 0")

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds(high=self.q_high, low=self.q_low, horizon=self.horizon)


class Action(StrEnum):
    ADD = "add"
    REMOVE = "remove"
    NONE = "none"


class Trigger(StrEnum):
    PREDICTIVE = "predictive"
    REACTIVE = "reactive"


@dataclass(frozen=True)
class Decision:
    time: float
    trigger: Trigger
    action: Action
    path: str | None  # the path changed, if any
    reason: str
    queue: float
    active_paths: int
    p_high: float | None = None
    p_low: float | None = None
    prediction_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PathView:
    """A path as control sees it: id, model parameters, current capacity, active flag."""

    id: str
    state: PathState
    active: bool

    @property
    def capacity(self) -> float:
        s = self.state
        return s.capacity_los if s.in_los else s.capacity_nlos


@dataclass(frozen=True)
class Observation:
    """What control reads at a decision: queue (packets), arrival rate (packets/s), paths."""

    queue: float
    arrival_rate: float
    paths: Sequence[PathView]


class Clock(Protocol):
    def __call__(self) -> float: ...


class Scheduler(Protocol):
    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` at ``when`` (clock seconds) or later, never earlier."""


class Plant(Protocol):
    """The system under control: its state, and the operator that changes paths."""

    def observe(self) -> Observation: ...

    def change(self, action: Action, path_id: str) -> None:
        """Start activating (ADD) or deactivating (REMOVE) a path; call back ``done``."""


Predict = Callable[[Scenario, Thresholds], Prediction]
ComputeDelay = Callable[[int, Variant], float]
"""Virtual compute time of one prediction (active paths, variant): simulation only."""


@dataclass
class Counters:
    predictive_controls: int = 0
    superseded_controls: int = 0
    discarded_predictions: int = 0
    reactive_changes: int = 0
    predictive_changes: int = 0
    safety_vetoes: int = 0
    prediction_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    control_intervals: deque[float] = field(default_factory=lambda: deque(maxlen=2000))


class PathControl:
    """The control loop of one UE (thread-safe; see the module docstring)."""

    def __init__(
        self,
        settings: ControlSettings,
        plant: Plant,
        clock: Clock,
        scheduler: Scheduler,
        *,
        predictor: Predict | None = None,
        compute_delay: ComputeDelay | None = None,
        on_decision: Callable[[Decision], None] | None = None,
        log_size: int = 1000,
    ) -> None:
        settings.validate()
        self._settings = settings
        self._plant = plant
        self._clock = clock
        self._scheduler = scheduler
        self._predict: Predict = predictor or (lambda s, t: predict(s, t, Solver()))
        self._compute_delay = compute_delay
        self._on_decision = on_decision
        self._lock = threading.RLock()
        self.t_ic = float("-inf")  # time of the last initiated change
        self.pc_token = 0
        self.change_pending = False
        self._last_tick: float | None = None
        self._running = False
        self.counters = Counters()
        self.log: deque[Decision] = deque(maxlen=log_size)

    # -- settings -----------------------------------------------------------------------
    @property
    def settings(self) -> ControlSettings:
        return self._settings

    def update(self, **changes: Any) -> ControlSettings:
        """Change settings at run time; invalid values raise ValueError and change nothing."""
        with self._lock:
            new = replace(self._settings, **changes)
            new.validate()
            self._settings = new
            return new

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        with self._lock:
            self._running = True
            self._schedule_control(self._clock() + self._settings.period)

    def stop(self) -> None:
        with self._lock:
            self._running = False
            self.pc_token += 1

    # -- events -------------------------------------------------------------------------
    def on_queue(self, queue: float) -> None:
        """A new queue sample (call it on every sample; it is the reactive trigger)."""
        s = self._settings
        if not self._running or (s.mode.predictive and not s.mode.reactive_backup):
            return
        with self._lock:
            if s.mode is ControlMode.REACTIVE:
                self._reactive_pure(queue)
            elif queue > s.q_high:
                self._reactive_add(queue)

    def change_done(self) -> None:
        """The plant finished the change it was asked for."""
        with self._lock:
            self.change_pending = False

    # -- reactive -----------------------------------------------------------------------
    def _reactive_pure(self, queue: float) -> None:
        s = self._settings
        if self.change_pending:
            return
        if queue > s.q_high:
            action, why = Action.ADD, f"queue {queue:.0f} > Q_HT"
        elif queue < s.q_low:
            action, why = Action.REMOVE, f"queue {queue:.0f} < Q_LT"
        else:
            return
        if self._pick(action, self._plant.observe().paths) is not None:
            self._change(Trigger.REACTIVE, action, queue, why)

    def _reactive_add(self, queue: float) -> None:
        now = self._clock()
        s = self._settings
        if now <= self.t_ic + s.reactive_guard or self.change_pending:
            return
        if self._pick(Action.ADD, self._plant.observe().paths) is None:
            return  # nothing left to add: the trigger is ignored
        self._schedule_control(now + s.period)  # invalidates the scheduled prediction
        self._change(Trigger.REACTIVE, Action.ADD, queue, f"queue {queue:.0f} > Q_HT, T_R passed")

    # -- predictive ---------------------------------------------------------------------
    def _schedule_control(self, when: float) -> None:
        self.pc_token += 1
        token = self.pc_token
        self._scheduler.call_at(when, lambda: self._control(token))

    def _control(self, token: int) -> None:
        with self._lock:
            if not self._running:
                return
            if token != self.pc_token:
                self.counters.superseded_controls += 1
                return
            s = self._settings
            started = self._clock()
            if self._last_tick is not None:
                self.counters.control_intervals.append(started - self._last_tick)
            self._last_tick = started
            self._schedule_control(started + s.period)
            if not s.mode.predictive:
                return
            self.counters.predictive_controls += 1
            observation = self._plant.observe()
        # Predict without the lock: queue samples (reactive triggers) go on meanwhile.
        outcome = self._evaluate(observation, s)
        if self._compute_delay is None:
            self._conclude(started, observation, outcome)
            return
        delay = outcome.predictions * self._compute_delay(
            sum(p.active for p in observation.paths), s.mode.variant
        )
        self._scheduler.call_at(
            started + delay, lambda: self._conclude(started, observation, outcome)
        )

    def _conclude(self, started: float, observation: Observation, outcome: _Outcome) -> None:
        with self._lock:
            if not self._running:
                return
            if self.t_ic > started:
                self.counters.discarded_predictions += 1
                self._record(
                    Trigger.PREDICTIVE,
                    Action.NONE,
                    None,
                    observation,
                    outcome,
                    "discarded: a reactive change happened during the prediction",
                )
                return
            if outcome.action is Action.NONE:
                self._record(
                    Trigger.PREDICTIVE, Action.NONE, None, observation, outcome, outcome.reason
                )
                return
            self._change(
                Trigger.PREDICTIVE,
                outcome.action,
                observation.queue,
                outcome.reason,
                outcome,
                observation,
            )

    def _evaluate(self, observation: Observation, s: ControlSettings) -> _Outcome:
        if not observation.paths:
            return _Outcome(Action.NONE, "no path known yet (no radio data)", predictions=0)
        active = [p for p in observation.paths if p.active]
        if not active:
            return _Outcome(Action.ADD, "no active path", predictions=0)
        first = self._predict(_scenario(observation, active), s.thresholds)
        outcome = _Outcome.from_prediction(first, s)
        if outcome.action is Action.ADD and len(active) == len(observation.paths):
            outcome.action, outcome.reason = Action.NONE, outcome.reason + "; no path to add"
        if outcome.action is not Action.REMOVE:
            return outcome
        if len(active) < 2:
            outcome.action, outcome.reason = Action.NONE, outcome.reason + "; last path kept"
        elif len(active) <= s.safety_max_paths:
            victim = self._pick(Action.REMOVE, observation.paths)
            rest = [p for p in active if p is not victim]
            second = self._predict(_scenario(observation, rest), s.thresholds)
            outcome.seconds += second.seconds
            outcome.predictions += 1
            if second.p_high(s.mode.variant) < s.p_high_bound:
                self.counters.safety_vetoes += 1
                outcome.action = Action.NONE
                outcome.reason += (
                    f"; kept: without {victim.id if victim else '?'} P_H would be"
                    f" {second.p_high(s.mode.variant):.4f}"
                )
        return outcome

    # -- changes ------------------------------------------------------------------------
    def _pick(self, action: Action, paths: Sequence[PathView]) -> PathView | None:
        """ADD the highest-capacity inactive path; REMOVE the lowest-capacity active one."""
        if action is Action.ADD:
            candidates = [p for p in paths if not p.active]
            return max(candidates, key=_capacity_key, default=None)
        candidates = [p for p in paths if p.active]
        if len(candidates) < 2:
            return None  # never remove the last path
        return min(candidates, key=_capacity_key)

    def _change(
        self,
        trigger: Trigger,
        action: Action,
        queue: float,
        reason: str,
        outcome: _Outcome | None = None,
        observation: Observation | None = None,
    ) -> None:
        observation = observation or self._plant.observe()
        path = self._pick(action, observation.paths)
        if path is None:
            self._record(
                trigger,
                Action.NONE,
                None,
                observation,
                outcome,
                reason + ("; no path to add" if action is Action.ADD else "; last path"),
            )
            return
        self.t_ic = self._clock()
        self.change_pending = True
        if trigger is Trigger.REACTIVE:
            self.counters.reactive_changes += 1
        else:
            self.counters.predictive_changes += 1
            self._schedule_control(self.t_ic + self._settings.period)
        self._record(trigger, action, path.id, observation, outcome, reason, queue)
        self._plant.change(action, path.id)

    def _record(
        self,
        trigger: Trigger,
        action: Action,
        path: str | None,
        observation: Observation,
        outcome: _Outcome | None,
        reason: str,
        queue: float | None = None,
    ) -> None:
        if outcome is not None and outcome.seconds:
            self.counters.prediction_seconds.append(outcome.seconds)
        decision = Decision(
            time=self._clock(),
            trigger=trigger,
            action=action,
            path=path,
            reason=reason,
            queue=observation.queue if queue is None else queue,
            active_paths=sum(p.active for p in observation.paths),
            p_high=outcome.p_high if outcome else None,
            p_low=outcome.p_low if outcome else None,
            prediction_ms=outcome.seconds * 1e3 if outcome and outcome.seconds else None,
        )
        self.log.append(decision)
        if self._on_decision is not None:
            self._on_decision(decision)


@dataclass
class _Outcome:
    action: Action
    reason: str
    p_high: float | None = None
    p_low: float | None = None
    seconds: float = 0.0
    predictions: int = 1

    @classmethod
    def from_prediction(cls, p: Prediction, s: ControlSettings) -> _Outcome:
        v = s.mode.variant
        high, low = p.p_high(v), p.p_low(v)
        if high < s.p_high_bound:
            action, why = Action.ADD, f"P_H {high:.4f} < {s.p_high_bound}"
        elif low > s.p_low_bound:
            action, why = Action.REMOVE, f"P_L {low:.4f} > {s.p_low_bound}"
        else:
            action, why = Action.NONE, f"P_H {high:.4f}, P_L {low:.4f} within bounds"
        return cls(action, f"{v.value}: {why}", high, low, p.seconds)


def _capacity_key(path: PathView) -> tuple[float, float]:
    s = path.state
    total = s.to_los + s.to_nlos
    expected = (
        (s.capacity_los * s.to_los + s.capacity_nlos * s.to_nlos) / total
        if total > 0
        else path.capacity
    )
    return (path.capacity, expected)


def _scenario(observation: Observation, active: Sequence[PathView]) -> Scenario:
    return Scenario(
        paths=tuple(p.state for p in active),
        arrival_rate=observation.arrival_rate,
        queue=observation.queue,
    )
