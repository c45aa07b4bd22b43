"""Control timing and rules with an injected clock, scheduler and plant (no real time)."""

from dataclasses import dataclass, field

import pytest

from mts_lab.pathmgr.simulate import EventLoop
from path_manager.control import (
    Action,
    ControlMode,
    ControlSettings,
    Observation,
    PathControl,
    PathView,
    Trigger,
)
from path_manager.predictor import PathState, Prediction, Scenario, Thresholds


def prediction(p_high: float, p_low: float) -> Prediction:
    return Prediction(p_high, p_low, p_high, p_low, "full", 2, 0.0, 0.0)


@dataclass
class FakePlant:
    loop: EventLoop
    paths: int = 4
    active: list[bool] = field(default_factory=lambda: [True, False, False, False])
    queue: float = 0.0
    changes: list[tuple[float, Action, str]] = field(default_factory=list)
    delay: float = 0.020
    control: PathControl | None = None

    def observe(self) -> Observation:
        views = [
            PathView(f"p{i}", PathState(1000.0 * (i + 1), 100.0, 0.4, 0.33, True), self.active[i])
            for i in range(self.paths)
        ]
        return Observation(self.queue, 5000.0, views)

    def change(self, action: Action, path_id: str) -> None:
        self.changes.append((self.loop.now, action, path_id))
        i = int(path_id[1:])

        def done() -> None:
            self.active[i] = action is Action.ADD
            assert self.control is not None
            self.control.change_done()

        self.loop.call_at(self.loop.now + self.delay, done)


class ScriptedPredictor:
    """Returns queued predictions; records when it was called and with how many paths."""

    def __init__(self, loop: EventLoop, default: Prediction) -> None:
        self.loop, self.default = loop, default
        self.calls: list[tuple[float, int]] = []
        self.script: list[Prediction] = []
        self.during: list = []  # callbacks run inside the prediction (concurrent events)

    def __call__(self, scenario: Scenario, thresholds: Thresholds) -> Prediction:
        self.calls.append((self.loop.now, len(scenario.paths)))
        if self.during:
            self.during.pop(0)()
        return self.script.pop(0) if self.script else self.default


QUIET = prediction(0.999, 0.5)  # neither ADD nor REMOVE


def make(mode=ControlMode.FPT_R, default=QUIET, **settings):
    loop = EventLoop()
    plant = FakePlant(loop)
    predictor = ScriptedPredictor(loop, default)
    control = PathControl(
        ControlSettings(mode=mode, **settings), plant, loop, loop, predictor=predictor
    )
    plant.control = control
    control.start()
    return loop, plant, predictor, control


def run(loop: EventLoop, until: float) -> None:
    loop.run_until(until, lambda t: None, lambda: None)


def test_predictive_control_every_period_never_early():
    loop, _, predictor, control = make()
    run(loop, 1.0)
    times = [t for t, _ in predictor.calls]
    assert times == pytest.approx([0.15 * k for k in range(1, 7)])
    assert min(control.counters.control_intervals) >= 0.15 - 1e-12


def test_reactive_add_invalidates_the_scheduled_prediction():
    loop, plant, predictor, control = make()
    run(loop, 0.20)  # one prediction at 0.15, the next is scheduled for 0.30
    plant.queue = 600.0
    control.on_queue(600.0)  # at 0.20: reactive ADD, next prediction at 0.35
    assert plant.changes == [(0.20, Action.ADD, "p3")]  # the highest-capacity inactive path
    run(loop, 0.45)
    times = [t for t, _ in predictor.calls]
    assert times == pytest.approx([0.15, 0.35])  # 0.30 was superseded
    assert control.counters.superseded_controls == 1


def test_reactive_guard_t_r():
    loop, plant, _, control = make(reactive_guard=0.050)
    run(loop, 0.01)
    control.on_queue(600.0)  # first reactive change at 0.01
    run(loop, 0.05)  # 40 ms later, change done (20 ms) but within T_R
    control.on_queue(600.0)
    assert len(plant.changes) == 1
    run(loop, 0.0601)  # just past t_IC + T_R
    control.on_queue(600.0)
    assert [c[1] for c in plant.changes] == [Action.ADD, Action.ADD]
    assert control.counters.reactive_changes == 2


def test_reactive_ignored_without_a_path_to_add():
    loop, plant, predictor, control = make()
    plant.active = [True] * 4
    run(loop, 0.01)
    control.on_queue(10_000.0)
    assert plant.changes == []
    run(loop, 0.16)
    assert [t for t, _ in predictor.calls] == pytest.approx([0.15])  # schedule unchanged


def test_pure_predictive_ignores_the_queue():
    _, plant, _, control = make(mode=ControlMode.CDF)
    control.on_queue(10_000.0)
    assert plant.changes == []


def test_prediction_discarded_when_a_reactive_change_happens_meanwhile():
    loop, plant, predictor, control = make(default=prediction(0.5, 0.0))  # would ADD

    def reactive_during_prediction() -> None:
        loop.now += 0.001  # the prediction takes 1 ms; a queue sample arrives meanwhile
        control.on_queue(600.0)

    predictor.during.append(reactive_during_prediction)
    run(loop, 0.16)
    assert [(c[1], c[2]) for c in plant.changes] == [(Action.ADD, "p3")]  # only the reactive one
    assert control.counters.discarded_predictions == 1
    assert control.log[-1].reason.startswith("discarded")


def test_add_and_remove_rules():
    loop, plant, predictor, _ = make(mode=ControlMode.CDF, default=prediction(0.98, 0.0))
    run(loop, 0.16)
    assert plant.changes == [(0.15, Action.ADD, "p3")]
    predictor.default = prediction(1.0, 0.995)
    predictor.script = [prediction(1.0, 0.995), prediction(1.0, 0.0)]  # safety: still fine
    run(loop, 0.31)  # next control at 0.15 + 0.15 (rescheduled after the change)
    assert plant.changes[-1] == (pytest.approx(0.30), Action.REMOVE, "p0")
    assert predictor.calls[-1][1] == 1  # the safety re-prediction without the removed path


def test_remove_safety_veto():
    loop, plant, predictor, control = make(mode=ControlMode.FPT, default=prediction(1.0, 0.999))
    plant.active = [True, True, False, False]
    predictor.script = [prediction(1.0, 0.999), prediction(0.5, 0.0)]  # without it: ADD
    run(loop, 0.16)
    assert plant.changes == []
    assert control.counters.safety_vetoes == 1
    assert "kept" in control.log[-1].reason


def test_no_safety_check_above_its_bound():
    loop, plant, predictor, _ = make(
        mode=ControlMode.FPT, default=prediction(1.0, 0.999), safety_max_paths=1
    )
    plant.active = [True, True, False, False]
    run(loop, 0.16)
    assert [c[1] for c in plant.changes] == [Action.REMOVE]
    assert len(predictor.calls) == 1


def test_never_removes_the_last_path():
    loop, plant, _, control = make(mode=ControlMode.FPT, default=prediction(1.0, 1.0))
    run(loop, 0.5)
    assert plant.changes == []
    assert "last path" in control.log[-1].reason


def test_pure_reactive_with_pending_change_guard():
    loop, plant, _, control = make(mode=ControlMode.REACTIVE, q_low=1.0)
    control.on_queue(600.0)
    control.on_queue(700.0)  # change pending: no second ADD
    assert len(plant.changes) == 1
    run(loop, 0.021)  # done
    control.on_queue(800.0)
    assert len(plant.changes) == 2
    run(loop, 0.05)
    control.on_queue(0.0)
    assert plant.changes[-1][1] is Action.REMOVE
    assert all(d.trigger is Trigger.REACTIVE for d in control.log)


def test_settings_change_at_run_time_and_bad_values_change_nothing():
    loop, _, predictor, control = make()
    control.update(period=0.1, mode=ControlMode.CDF_R)
    with pytest.raises(ValueError, match="T_R"):
        control.update(reactive_guard=0.2)
    with pytest.raises(ValueError, match="q_low"):
        control.update(q_low=600.0)
    assert control.settings.period == 0.1 and control.settings.reactive_guard == 0.05
    run(loop, 0.36)
    # The tick already scheduled at 0.15 keeps its time; later ones use the new period.
    assert [t for t, _ in predictor.calls] == pytest.approx([0.15, 0.25, 0.35])
