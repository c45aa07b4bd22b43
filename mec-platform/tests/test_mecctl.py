"""mecctl against a real platform: onboard, instantiate, list, terminate."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from mec_platform import mecctl
from mec_platform.testing import ADMIN_SECRET, Running, wait_until

SAMPLE = Path(__file__).with_name("sample_app.py")


def run(platform: Running, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert mecctl.main(["--url", platform.url, *args]) == 0
    # The in-process platform logs to stdout too; keep mecctl's own output.
    lines = capsys.readouterr().out.splitlines()
    return "\n".join(line for line in lines if not re.match(r"\d{4}-\d\d-\d\d[ T]", line))


def test_mecctl_drives_the_lifecycle(
    platform: Running, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("MECCTL_CLIENT_SECRET", ADMIN_SECRET)
    appd = tmp_path / "sample.yaml"
    appd.write_text(f"""
appDId: sample
appName: sample
appProvider: mts-tests
appSoftVersion: "1"
appDVersion: "1"
deployment:
  process: {{command: ["{sys.executable}", "{SAMPLE}"]}}
""")
    assert json.loads(run(platform, capsys, "onboard", str(appd)))["appDId"] == "sample"
    assert "sample" in run(platform, capsys, "packages")
    out = json.loads(run(platform, capsys, "instantiate", "sample"))
    assert out["operation"]["operationState"] == "COMPLETED"
    instance = out["appInstanceId"]
    assert "INSTANTIATED" in run(platform, capsys, "apps")
    services = "/mec_service_mgmt/v1/services"
    wait_until(lambda: platform.admin.get(services).json(), what="registration")
    assert "sample" in run(platform, capsys, "services")
    assert json.loads(run(platform, capsys, "terminate", instance))["operationState"] == (
        "COMPLETED")  # fmt: skip
    assert json.loads(run(platform, capsys, "--json", "apps")) == []
    assert "TERMINATE" in run(platform, capsys, "ops")


def test_mecctl_reports_errors_plainly(
    platform: Running, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MECCTL_CLIENT_SECRET", "wrong")
    with pytest.raises(SystemExit, match="401 invalid_client"):
        mecctl.main(["--url", platform.url, "apps"])
    monkeypatch.setenv("MECCTL_CLIENT_SECRET", ADMIN_SECRET)
    with pytest.raises(SystemExit, match="404 no onboarded AppD with appDId nope"):
        mecctl.main(["--url", platform.url, "instantiate", "nope"])
