"""The benchmark's small version: every measurement runs and yields sane numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mts_lab.pep import bench, cost

pytestmark = [pytest.mark.netns, pytest.mark.slow]


def test_bench_small(tmp_path: Path) -> None:
    results = bench.run(tmp_path, seconds=1, rounds=1, idle=300, conn_seconds=1)
    assert json.loads((tmp_path / "bench.json").read_text()) == json.loads(json.dumps(results))
    assert (tmp_path / "bench.png").stat().st_size > 10_000
    for case in ("download_1", "upload_1", "download_8", "upload_8"):
        for system in bench.SYSTEMS:
            assert results["throughput"][case][system]["gbps_median"] > 0.05, (case, system)
        assert results["throughput"][case]["pep"]["cpu_s_per_gbit_median"] > 0
    for system in bench.SYSTEMS:
        assert results["connections_per_second"][system]["median"] > 10
        assert results["connections_per_second"][system]["errors"] == 0
        for size in bench.SHORT_FLOWS:
            short = results["short_flows"][size][system]
            assert short["median"] > 1 and short["errors"] == 0, (size, system)
            assert 0 < short["p50_ms"] <= short["p99_ms"], (size, system)
        idle = results["idle_connections"][system]
        assert idle["connections"] == 300
        assert idle["new_connection_ms_loaded"]["p99"] > 0
    assert 0 < results["idle_connections"]["pep"]["kib_per_connection"] < 10


def test_cost_small(tmp_path: Path) -> None:
    """``mts_lab.pep.cost``: system calls per connection, counted by strace."""
    results = cost.run("syscalls", {"installed": None}, rounds=1, seconds=1.0, out=tmp_path)
    assert json.loads((tmp_path / "cost-syscalls.json").read_text())["measure"] == "syscalls"
    per = results["summary"]["installed"]
    assert per["flows"] > 10
    assert 10 < per["syscalls_per_connection"] < 200
    # every connection accepts its RAN leg and connects its WAN leg once
    assert per["by_call"]["connect"] == pytest.approx(1.0, abs=0.2)
    assert per["by_call"]["accept4"] >= 0.9
