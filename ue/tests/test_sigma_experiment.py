"""`make experiment-sigma` in small: one run of the single-flow scenario (10 BDP) with
SIGMA and Reno, through the experiment's own code, and what it must show even then."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mts_lab.results import save_results
from mts_lab.sigma import experiment
from mts_lab.sigma.bed import Scale

from .conftest import require_root

pytestmark = pytest.mark.netns


def test_small_experiment(tmp_path: Path) -> None:
    require_root()
    results = experiment.run(1, ["single_10bdp"], ("sigma", "reno"), Scale())
    save_results(results, tmp_path, "sigma", experiment.plot, experiment.table)
    saved = json.loads((tmp_path / "sigma.json").read_text())
    assert (tmp_path / "sigma.png").stat().st_size > 0
    by = saved["scenarios"]["single_10bdp"]["by_cc"]
    for cc in ("sigma", "reno"):
        assert by[cc]["all_received"] and by[cc]["duration_s"] > 0
    # a 10-BDP upload takes at least its bytes at the uplink's rate
    floor = 10 * saved["scale"]["bdp_bytes"] * 8 / (saved["scale"]["rate_mbps"] * 1e6)
    assert by["sigma"]["duration_s"] > floor and by["reno"]["duration_s"] > floor
    # Reno's slow start fills the modem buffer; SIGMA's window stays near the BDP
    assert by["sigma"]["buffer_max_bytes"] < by["reno"]["buffer_max_bytes"] / 2
    assert by["sigma"]["rtt_p90_ms"] < by["reno"]["rtt_p90_ms"]
