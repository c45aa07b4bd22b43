"""`testbed up` / `down`: the topology file, the address plan, and nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mts_testbed import builder, netns
from mts_testbed.topology import RUN_DIR, Topology

from .conftest import REPO, require_root, unique_name

pytestmark = pytest.mark.netns

CONFIGS = REPO / "testbed" / "configs"


def our_traces(name: str) -> dict[str, object]:
    return {
        "namespaces": [ns for ns in netns.list_namespaces() if ns.startswith(f"{name}-")],
        "links": [d for d in os.listdir("/sys/class/net") if d.startswith(f"{name}-")],
        "files": sorted(p.name for p in RUN_DIR.glob(f"{name}.*")),
    }


def test_down_leaves_nothing_even_after_a_crash(tmp_path: Path) -> None:
    require_root()
    name = unique_name()
    scenario = yaml.safe_load((CONFIGS / "lte-multi-ue.yaml").read_text())
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    topo = builder.up(path, name, log=lambda _: None)
    try:
        loaded = Topology.load(name)
        assert loaded == topo
        assert len(topo.ues) == 4 and topo.ues[3].ns == f"{name}-ue4"
        assert [p.ip for u in topo.ues for p in u.paths] == [f"10.30.0.{i}" for i in range(1, 5)]
        assert oct(os.stat(Topology.path_for(name)).st_mode & 0o777) == "0o600"  # it holds a token
        assert (
            topo.exec(topo.server.ns, "ping", "-c1", "-W", "2", topo.ues[3].paths[0].ip).returncode
            == 0
        )
        os.kill(topo.emulator.pid, signal.SIGKILL)  # a crash
    finally:
        assert builder.down(name, log=None) is True
    assert our_traces(name) == {"namespaces": [], "links": [], "files": []}
    assert not Path(f"/proc/{topo.emulator.pid}").exists()
    assert builder.down(name, log=None) is False  # idempotent


# Only a guard against a hang: `up` of four paths takes seconds on an idle machine and
# over a minute at a load average of 10 (CI once timed out at 60 s).
CLI_TIMEOUT = 300


def test_cli_up_status_down(tmp_path: Path) -> None:
    require_root()
    name = unique_name()
    cli = [sys.executable, "-m", "mts_testbed.cli"]
    try:  # a timed-out `up` leaves a half-built topology: `down` in finally removes it
        up = subprocess.run(
            [*cli, "up", "--config", str(CONFIGS / "multipath-4path.yaml"), "--name", name],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        assert up.returncode == 0, up.stderr
        topo = Topology.load(name)
        assert [p.cell for p in topo.ues[0].paths] == [
            f"{b}-0" for b in (10001, 10002, 10003, 10004)
        ]
        assert len({p.rnti for p in topo.ues[0].paths}) == 4
        status = subprocess.run(
            [*cli, "status", "--name", name], capture_output=True, text=True, timeout=CLI_TIMEOUT
        )
        assert status.returncode == 0 and len(re.findall(r"10\.30\.\d\.1", status.stdout)) == 4, (
            status.stdout
        )
        again = subprocess.run(
            [*cli, "up", "--config", str(CONFIGS / "multipath-4path.yaml"), "--name", name],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        assert again.returncode == 1 and "exists" in again.stderr
    finally:
        down = subprocess.run(
            [*cli, "down", "--name", name], capture_output=True, text=True, timeout=CLI_TIMEOUT
        )
    assert down.returncode == 0
    assert our_traces(name) == {"namespaces": [], "links": [], "files": []}


@pytest.mark.parametrize("config", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_shipped_scenarios_validate(config: str) -> None:
    from mts_testbed.scenario import Scenario

    Scenario.load(CONFIGS / config)


def test_bad_scenario_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    require_root()
    name = unique_name()
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"cells": [{"bs_id": 10000}], "ues": [{"cells": [{"bs_id": 999}]}]})
    )
    with pytest.raises(ValueError, match="unknown cell"):
        builder.up(path, name, log=lambda _: None)
    assert our_traces(name) == {"namespaces": [], "links": [], "files": []}
