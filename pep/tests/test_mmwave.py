"""Research 000's 5G-trace runs in small: the trace conversion, and a short buffer sweep on
the emulated RAN replaying a trace restarted at each download's start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mts_lab.pep import mmwave
from mts_testbed.scenario import Channel

EMULATOR = Path(__file__).resolve().parents[2] / "build" / "bin" / "ran-emulator"


def test_convert_keeps_times_scales_rates_and_blocks_at_zero(tmp_path: Path) -> None:
    rows = mmwave.convert([(2310, 0.26), (0, 0.3), (3850, 0.25)], scale=40)
    assert rows == [(0.0, 13, 57.75), (0.26, 0, 0.0), (0.56, 15, 96.25), (0.81, 15, 96.25)]
    # the CQI is the highest whose 100-PRB TBS fits in the capacity
    assert mmwave.cqi_for(75.4) == 15 and mmwave.cqi_for(75.3) == 14 and mmwave.cqi_for(0.01) == 1
    path = tmp_path / "t.csv"
    mmwave.write_trace(rows, path, "test", 40)
    assert mmwave.read_trace(path) == rows
    assert mmwave.trace_mean_mbps(rows, 0.56) == pytest.approx(57.75 * 0.26 / 0.56)


def test_the_experiments_trace_is_a_valid_channel() -> None:
    if not mmwave.TRACE.is_file():  # kept beside the repository (derived data, not ours)
        pytest.skip(f"{mmwave.TRACE} is absent")
    rows = mmwave.read_trace()
    Channel(model="trace", trace=rows)  # what the testbed hands the emulator
    assert rows[-1][0] == pytest.approx(110.62)
    # the Witestlab mobility trace's mean (2,960.7 Mbit/s time-weighted) at 1/40
    assert mmwave.trace_mean_mbps(rows, rows[-1][0]) == pytest.approx(2960.7 / 40, rel=1e-3)
    assert sum(1 for r in rows if r[2] == 0 and r[1] == 0) == 2  # the two blockages


@pytest.mark.netns
@pytest.mark.slow
def test_sweep_small_follows_the_trace_from_each_start(tmp_path: Path) -> None:
    if not EMULATOR.is_file():
        pytest.fail(f"{EMULATOR} is missing: run `make build`")
    trace = tmp_path / "slow-then-fast.csv"
    mmwave.write_trace([(0.0, 9, 10.0), (3.0, 13, 40.0), (10.0, 13, 40.0)], trace, "test", 1)
    results = mmwave.run_sweep(2, 5.0, [15, 128], tmp_path / "out", trace)
    saved = json.loads((tmp_path / "out" / "sweep.json").read_text())
    assert saved["summary"].keys() == {"pep-15MB", "pep-128MB"}
    assert (tmp_path / "out" / "sweep.png").stat().st_size > 10_000
    mean = results["setup"]["trace_mean_mbps"]  # (3 s x 10 + 2 s x 40) / 5 = 22 Mbit/s
    for arm, runs in results["runs"].items():
        for d in runs:
            # cannot beat the trace; it carried data
            assert 0 < d["mbps"] <= mean * 1.1, (arm, d["mbps"], mean)
            # the trace restarted with the download: its first 3 s run at 10 Mbit/s (had it
            # not, the cell would carry 40 from the start)
            early = max(n for t, n in d["timeline"] if t <= 2.5)
            assert early * 8 / 2.5 / 1e6 <= 10 * 1.2, (arm, early)
            assert d["pings"] > 20
