"""The benchmark's small version: every measurement runs and yields sane numbers."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest

from mts_lab.line import Lab, in_netns
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


def test_pep_processes_share_the_listeners(tmp_path: Path) -> None:
    """The A/B variant PROCESSES=2: two PEP processes on the same listeners both relay, and
    a flow run reports what bound it (the proxy's cores, its run-queue wait, idle CPU)."""
    lab = Lab.create("pt")
    b = bench.Bench(lab, tmp_path)
    try:
        b.start()
        b.restart_pep({"PROCESSES": "2", "PEP_RELAY_THREADS": "1"})
        assert len(b.processes("pep")) == 2
        x = bench.tcpload_flows(b, "pep", clients=8, request=1, response=1, seconds=1.0)
        assert x["flows"] > 10 and x["errors"] == 0
        assert x["proxy_cores"] > 0 and x["proxy_waiting_cores"] >= 0
        assert 0 <= x["machine_idle_pct"] <= 100
        accepted = [
            in_netns(lab.pep_ns, partial(bench._pep_stats, bench.PEP_API_PORT + i))
            for i in range(2)
        ]
        assert all(a["accepted"] > 0 for a in accepted), accepted  # SO_REUSEPORT spread them
    finally:
        b.stop()
        lab.down()
