"""A small version of the simulation study (the full one: make experiment-pathmgr-sim)."""

import json

import numpy as np
import pytest

from mts_lab.pathmgr.simulate import (
    Channel,
    EventLoop,
    FluidProxy,
    SimSetup,
    run_once,
    settings_for,
)
from mts_lab.pathmgr.study import run_study, table_lines
from path_manager.control import ControlMode, ControlSettings

SMALL = SimSetup(duration=12.0)


def test_fluid_conserves_packets():
    setup = SimSetup(duration=5.0, buffer_packets=2000.0)
    proxy = FluidProxy(setup, Channel.draw(setup, np.random.default_rng(3)), EventLoop())
    for t in np.linspace(0.1, 5.0, 50):
        proxy.advance(float(t))
        assert proxy.accepted == pytest.approx(proxy.departed + proxy.level, rel=1e-9)
        assert 0.0 <= proxy.level <= setup.buffer_packets


def test_schemes_on_the_same_channel():
    base = ControlSettings()
    results = {
        mode: run_once(SMALL, settings_for(mode, 0.025, base), seed=5)
        for mode in (ControlMode.REACTIVE, ControlMode.FPT, ControlMode.FPT_R)
    }
    reactive, fpt, hybrid = (
        results[ControlMode.REACTIVE],
        results[ControlMode.FPT],
        results[ControlMode.FPT_R],
    )
    # Reactive flaps: far more path changes than the predictive schemes.
    assert reactive.reactive_changes > 10 * (fpt.predictive_changes + 1)
    assert fpt.reactive_changes == 0 and fpt.predictive_controls >= 75  # 12 s / 150 ms
    assert hybrid.predictive_controls >= 70
    # Every virtual packet is delivered, lost, or still queued at the end.
    for r in results.values():
        delivered = sum(r.delay_histogram) * SMALL.delay_sample_step / SMALL.duration
        assert delivered + r.loss_fraction <= 1.0 + 1e-9


def test_reactive_guard_limits_reactive_changes():
    base = ControlSettings()

    def reactive_changes(guard: float) -> int:
        settings = settings_for(ControlMode.CDF_R, guard, base)
        return sum(run_once(SMALL, settings, seed=s).reactive_changes for s in (1, 2))

    short, long_ = reactive_changes(0.025), reactive_changes(0.100)
    assert long_ <= short


def test_study_writes_json_table_and_plots(tmp_path):
    setup = SimSetup(duration=3.0)
    summary = run_study(
        setup, ControlSettings(), 1, [0.025, 0.1], tmp_path, progress=lambda _: None
    )
    data = json.loads((tmp_path / "simulation.json").read_text())
    assert data["complete"] and set(data["configs"]) == {
        "reactive", "cdf", "fpt", "cdf+r@25ms", "fpt+r@25ms", "cdf+r@100ms", "fpt+r@100ms"
    }  # fmt: skip
    for config in data["configs"].values():
        # Delivered within the last bin + lost (+ still queued at the end) = every packet.
        assert config["delay_cdf"][-1] + config["loss_fraction"] == pytest.approx(1.0, abs=0.02)
    for name in ("delay_cdf", "tr_sweep_cdf", "reactive_triggers", "single_run"):
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000
    assert "9.14" in "\n".join(table_lines(summary))  # published values beside ours
