"""Tables 8.x split across measurement-lock holds (``tables8 --resume``): earlier runs are
kept, a file of another run length is refused, and the aggregate covers every scenario."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mts_lab.l4s.tables8 import SCENARIOS, aggregate, earlier_runs, key


def _run(scenario: str, run: int, mbit_s: float) -> dict[str, object]:
    rtts = ("tcp_info_mean_ms", "delay_raw_mean_ms", "delay_filtered_mean_ms")
    flow = {"mib": 1.0, "mbit_s": mbit_s, "retrans": 0, "tcp_info_std_ms": 1.0}
    flow |= dict.fromkeys(rtts, 60.0)
    return {"scenario": scenario, "run": run, "load": 1.0, "prague": flow, "cubic": flow}


def test_resume_keeps_earlier_runs_and_refuses_other_lengths(tmp_path: Path) -> None:
    runs = [_run("8.3/30 ms", 0, 50.0), _run("8.3/15 ms", 0, 40.0)]
    (tmp_path / "tables-8.json").write_text(json.dumps({
        "seconds": 60.0, "rate_mbps": 100.0, "load_before": [1, 1, 1],
        "load_after": [2, 2, 2], "per_run": runs,
    }))  # fmt: skip
    args = argparse.Namespace(out=tmp_path, seconds=60.0, rate_mbps=100.0)
    earlier, holds = earlier_runs(args)
    assert earlier == runs
    assert holds == [{"load_before": [1, 1, 1], "load_after": [2, 2, 2]}]
    assert earlier_runs(argparse.Namespace(out=tmp_path / "none", seconds=60.0,
                                           rate_mbps=100.0)) == ([], [])  # fmt: skip
    with pytest.raises(SystemExit):
        earlier_runs(argparse.Namespace(out=tmp_path, seconds=15.0, rate_mbps=100.0))
    merged = [*earlier, _run("8.3/30 ms", 1, 60.0)]
    tables = aggregate(merged, [s for s in SCENARIOS if key(s).startswith("8.3/")])
    assert tables["8.3/30 ms"]["runs"] == 2
    assert tables["8.3/30 ms"]["prague"]["mbit_s"][0] == pytest.approx(55.0)
    assert tables["8.3/15 ms"]["runs"] == 1
