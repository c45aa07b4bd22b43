"""Tables 8.x split across measurement-lock holds (``tables8 --resume``): earlier runs are
kept, a file of another run length is refused, and the aggregate covers every scenario;
Tables 7.2/7.3 assembled from the runs that carry them (``mts_lab.l4s.reorder``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from mts_lab.l4s.experiment import earlier_runs
from mts_lab.l4s.reorder import assemble
from mts_lab.l4s.tables8 import SCENARIOS, aggregate, key


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
    earlier, holds = earlier_runs(args, "tables-8")
    assert earlier == runs
    assert holds == [{"load_before": [1, 1, 1], "load_after": [2, 2, 2]}]
    assert earlier_runs(argparse.Namespace(out=tmp_path / "none", seconds=60.0,
                                           rate_mbps=100.0), "tables-8") == ([], [])  # fmt: skip
    with pytest.raises(SystemExit):
        earlier_runs(argparse.Namespace(out=tmp_path, seconds=15.0, rate_mbps=100.0), "tables-8")
    with pytest.raises(SystemExit):  # runs with the endpoints' spin guard are not mixed in
        earlier_runs(argparse.Namespace(out=tmp_path, seconds=60.0, rate_mbps=100.0,
                                        spin_guard=True), "tables-8")  # fmt: skip
    merged = [*earlier, _run("8.3/30 ms", 1, 60.0)]
    tables = aggregate(merged, [s for s in SCENARIOS if key(s).startswith("8.3/")])
    assert tables["8.3/30 ms"]["runs"] == 2
    assert tables["8.3/30 ms"]["prague"]["mbit_s"][0] == pytest.approx(55.0)
    assert tables["8.3/15 ms"]["runs"] == 1


def _method_row(mean: float, runs: int) -> dict[str, object]:
    fields = ("truth_mean_ms", "truth_std_ms", "raw_mean_ms", "raw_std_ms", "filtered_mean_ms",
              "filtered_std_ms", "raw_vs_tcp_p90_ms", "filtered_vs_tcp_p90_ms")  # fmt: skip
    return {"runs": runs} | {f: [mean, 1.0] for f in fields}


def test_tables_7_2_3_take_each_row_from_its_source(tmp_path: Path) -> None:
    """0 %: Table 7.1's runs; the delay bit per rate: Table 8.2's; the spin bit per rate
    (and with the endpoints' guard): the spin runs'; each row keeps its runs and length."""
    both = {
        f"{t}/{c}": _method_row(60.0, 5) for t in ("spin", "delay") for c in ("prague", "cubic")
    }
    (tmp_path / "t71.json").write_text(json.dumps({"seconds": 60.0, "table": both}))
    spin = {rate: {f"{t}/{c}": _method_row(20.0, 4) for t in ("spin", "delay")
                   for c in ("prague", "cubic")} for rate in ("0", "0.1")}  # fmt: skip
    (tmp_path / "spin.json").write_text(json.dumps({"seconds": 30.0, "tables": spin}))
    guard = {"0.1": {f"spin/{c}": _method_row(59.0, 3) for c in ("prague", "cubic")}}
    (tmp_path / "guard.json").write_text(json.dumps({"seconds": 30.0, "tables": guard}))
    flow = {"tcp_info_mean_ms": 61.0, "tcp_info_std_ms": 1.0, "delay_raw_mean_ms": 62.0,
            "delay_raw_std_ms": 5.0, "delay_filtered_mean_ms": 62.5, "delay_filtered_std_ms": 6.0,
            "delay_raw_vs_tcp_p90_ms": 8.0, "delay_filtered_vs_tcp_p90_ms": 7.0,
            "mbit_s": 1.0, "mib": 1.0, "retrans": 0}  # fmt: skip
    runs = [{"scenario": "8.2/0.1 %", "run": n, "prague": flow, "cubic": flow} for n in range(5)]
    tables8 = aggregate(runs, [s for s in SCENARIOS if key(s) == "8.2/0.1 %"])
    (tmp_path / "t8.json").write_text(json.dumps({"seconds": 60.0, "tables": tables8}))

    out = assemble(tmp_path / "t71.json", tmp_path / "t8.json", tmp_path / "spin.json",
                   tmp_path / "guard.json")["tables"]  # fmt: skip
    assert list(out) == ["0", "0.1"]
    assert out["0"]["delay/cubic"]["filtered_mean_ms"] == [60.0, 1.0]
    assert (out["0"]["spin/prague"]["runs"], out["0"]["spin/prague"]["seconds"]) == (5, 60.0)
    assert out["0"]["spin/cubic"]["raw_mean_ms"] == [60.0, 1.0]  # 7.1's, not the spin runs' 0 %
    delay = out["0.1"]["delay/prague"]  # from Table 8.2, not from the spin runs' file
    assert delay["raw_mean_ms"][0] == 62.0 and delay["filtered_vs_tcp_p90_ms"][0] == 7.0
    assert (delay["runs"], delay["seconds"]) == (5, 60.0)
    assert out["0.1"]["spin/cubic"]["raw_mean_ms"] == [20.0, 1.0]
    assert out["0.1"]["spin+guard/cubic"]["filtered_mean_ms"] == [59.0, 1.0]
    assert out["0.1"]["spin+guard/cubic"]["runs"] == 3
