"""The split-TCP experiment's small version on the emulated RAN: both paths complete."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mts_lab.pep import experiment

pytestmark = [pytest.mark.netns, pytest.mark.slow]

EMULATOR = Path(__file__).resolve().parents[2] / "build" / "bin" / "ran-emulator"


def test_experiment_small(tmp_path: Path) -> None:
    if not EMULATOR.is_file():
        pytest.fail(f"{EMULATOR} is missing: run `make build`")
    setup = experiment.Setup(
        size=6_000_000, step_after_s=1.0, low_mbps=15, high_mbps=70,
        wan_delay_ms=20, wan_rate_mbps=100, ran_delay_ms=5, runs=1,
    )  # fmt: skip
    results = experiment.run(setup, ["fq_codel"], tmp_path)
    saved = json.loads((tmp_path / "split.json").read_text())
    assert saved["queues"].keys() == {"fq_codel"}
    assert (tmp_path / "split.png").stat().st_size > 10_000
    r = results["queues"]["fq_codel"]
    ideal = experiment.ideal_fct(setup)
    for path in ("e2e", "pep"):
        (fct,) = r[path]["fct_s"]
        assert ideal * 0.9 < fct < 60, (path, fct, ideal)  # cannot beat the radio
        assert r[path]["timeline_first_run"][-1][1] == setup.size
        # the sender's socket toward the UE was sampled, with the fields the plot uses
        trace = r[path]["sender_first_run"]
        assert trace and all({"t", "cwnd", "mss", "rtt_ms"} <= x.keys() for x in trace), trace
        # Table 5.2's interactive pings over the pair's longest FCT: most were answered
        (answered,) = r["interactive"][path]["answered_share"]
        assert answered > 0.5 and r["interactive"][path]["mean"]["runs"][0] > 0, r["interactive"]
