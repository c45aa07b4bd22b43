"""What an app started by the platform gets and what happens when it dies (issue 20):
only the environment its AppD grants; a ready confirmed during the start-up grace stays;
a killed app is noticed, its services leave discovery, subscribers are told, it is reaped."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from mec_platform.backends import process
from mec_platform.testing import (
    Receiver,
    Running,
    external_app,
    make_settings,
    onboard,
    wait_op,
    wait_until,
)

BARE = Path(__file__).with_name("bare_app.py")
LCM = "/app_lcm/v1"
SERVICES = "/mec_service_mgmt/v1/services"
# What the platform's own environment holds and no app may see.
PLATFORM_SECRETS = {
    "PLATFORM_ADMIN_CLIENT_SECRET": "admin-secret-of-the-platform",
    "PEP_API_TOKENS": "pep-static-token",
    "TESTBED_EMULATOR_TOKEN": "emulator-token",
    "RNIS_AMQP_URL": "amqp://rnis:rnis-broker-password@127.0.0.1:5672/%2F",
}


def bare_appd(appd_id: str = "bare", inherit: str = '["BARE_*"]') -> str:
    return f"""
appDId: {appd_id}
appName: bare
appProvider: mts-tests
appSoftVersion: "1.0"
appDVersion: "1"
deployment:
  process:
    command: ["{sys.executable}", "{BARE}"]
    env: {{BARE_SER_NAME: {appd_id}}}
    inheritEnv: {inherit}
    envPrefix: BARE_
"""


def instantiate(platform: Running, appd_id: str) -> str:
    admin = platform.admin
    iid = str(admin.post(f"{LCM}/app_instances", json={"appDId": appd_id}).json()["id"])
    op = wait_op(platform, admin.post(f"{LCM}/app_instances/{iid}/instantiate").json(), 120)
    assert op["operationState"] == "COMPLETED", op
    return iid


@pytest.fixture
def platform_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**PLATFORM_SECRETS, "BARE_GRANTED": "granted-value"}.items():
        monkeypatch.setenv(name, value)


def test_an_app_gets_only_what_its_appd_grants_and_stays_ready(
    tmp_path: Path, platform_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The start-up grace lasts until the app has confirmed ready (however busy the machine),
    # so the confirmation surely comes while instantiation still waits in it.
    check = process._check_it_stays_up

    def grace_until_confirmed(child: Any, command: str, log: Path) -> None:
        wait_until(lambda: (log.parent / "confirmed").exists() or child.poll() is not None,
                   120, "the app's confirm_ready")  # fmt: skip
        check(child, command, log)

    monkeypatch.setattr(process, "_check_it_stays_up", grace_until_confirmed)
    platform = Running(make_settings(tmp_path))
    try:
        onboard(platform, bare_appd())
        iid = instantiate(platform, "bare")
        workdir = platform.settings.apps_path() / iid
        assert (workdir / "confirmed").exists(), "the app did not confirm within the grace"
        # Defect 9: instantiation used to overwrite the early confirmation with false.
        assert platform.admin.get(f"{LCM}/app_instances/{iid}").json()["ready"] is True

        env: dict[str, str] = json.loads((workdir / "env.json").read_text())
        issued = {"PLATFORM_URL", "APP_INSTANCE_ID", "CLIENT_ID", "CLIENT_SECRET"}
        expected = {*issued, *(f"BARE_{n}" for n in issued), "BARE_SER_NAME", "BARE_GRANTED",
                    "HOME", "PATH"}  # fmt: skip
        basics = {"LANG", "LANGUAGE", "TZ", "TMPDIR"}
        extra = {n for n in env if n not in expected | basics and not n.startswith("LC_")}
        assert not extra, f"the app got variables its AppD did not grant: {sorted(extra)}"
        assert expected <= set(env)
        assert env["BARE_GRANTED"] == "granted-value" and env["HOME"] == str(workdir)
        leaked = [v for v in PLATFORM_SECRETS.values() if v in json.dumps(env)]
        assert not leaked
    finally:
        platform.stop()


@pytest.mark.parametrize("pattern", ['["PLATFORM_*"]', '["PLAT*"]', '["*"]',
                                     '["PLATFORM_ADMIN_CLIENT_SECRET"]', '["A-B"]'])  # fmt: skip
def test_an_appd_cannot_grant_the_platforms_settings(platform: Running, pattern: str) -> None:
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=bare_appd(inherit=pattern),
                            headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert r.status_code == 400 and "inheritEnv" in r.json()["detail"], r.text
    assert platform.admin.get("/app_pkgm/v1/app_packages").json() == []


def test_a_killed_app_is_noticed_deregistered_and_reaped(
    platform: Running, receiver: Receiver
) -> None:
    admin = platform.admin
    onboard(platform, bare_appd("victim"))
    onboard(platform, bare_appd("survivor"))
    watcher = admin.post(f"{LCM}/app_instances", json={"appDId": "survivor"}).json()["id"]
    subscription = {"subscriptionType": "SerAvailabilityNotificationSubscription",
                    "callbackReference": receiver.start(),
                    "filteringCriteria": {"serNames": ["victim"]}}  # fmt: skip
    r = admin.post(f"/mec_service_mgmt/v1/applications/{watcher}/subscriptions", json=subscription)
    assert r.status_code == 201, r.text
    victim, survivor = instantiate(platform, "victim"), instantiate(platform, "survivor")

    def active(name: str) -> list[Any]:
        services = admin.get(SERVICES, params={"ser_name": name}).json()
        return [s for s in services if s["state"] == "ACTIVE"]

    wait_until(lambda: active("victim") and active("survivor"), 60, "both services")
    info = admin.get(f"{LCM}/app_instances/{victim}").json()
    pid = _pid_of(platform, victim)
    os.kill(pid, signal.SIGKILL)

    wait_until(lambda: not active("victim"), 15, "the dead app's service to leave discovery")
    info = admin.get(f"{LCM}/app_instances/{victim}").json()
    assert info["instantiatedAppState"] == {"operationalState": "STOPPED"}
    assert info["ready"] is False
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 15, "the dead app to be reaped")
    changes = [n["serviceReferences"][0]["changeType"] for n in receiver.wait_for(2)]
    assert changes == ["ADDED", "REMOVED"]
    # The other app is untouched; the dead one is terminated without waiting for a confirmation.
    assert active("survivor")
    assert admin.get(f"{LCM}/app_instances/{survivor}").json()["instantiatedAppState"] == {
        "operationalState": "STARTED"}  # fmt: skip
    r = admin.post(
        f"{LCM}/app_instances/{victim}/terminate",
        json={"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 600},
    )
    assert wait_op(platform, r.json(), 60)["operationState"] == "COMPLETED"


def _pid_of(platform: Running, instance_id: str) -> int:
    """The app's pid, from the platform's record (the API does not show backend refs)."""
    from mec_platform.db import AppInstance

    with platform.platform.db.session() as s:
        row = s.get(AppInstance, instance_id)
        assert row is not None and row.backend_ref
        return int(row.backend_ref.split(":")[0])


def test_an_app_may_only_narrow_or_toggle_its_declared_traffic_rules(platform: Running) -> None:
    onboard(platform)  # SIMPLE_APPD: TCP to port 80 -> the app's proxy at 127.0.0.1:5000
    app_id, app = external_app(platform)
    url = f"/mec_app_support/v1/applications/{app_id}/traffic_rules/intercept-http"
    declared = app.get(url).json()
    flt = declared["trafficFilter"][0]

    def put(**change: Any) -> Any:
        return app.put(url, json={**declared, **change})

    narrower = [{**flt, "srcAddress": ["10.30.0.0/16"]}]
    assert put(state="INACTIVE").status_code == 200
    assert put(trafficFilter=narrower).status_code == 200
    stored = app.get(url).json()
    assert stored["trafficFilter"] == narrower and stored["state"] == "ACTIVE"

    widenings = {
        "UE SSH to the app": {"trafficFilter": [{**flt, "dstPort": ["22"]}]},
        "one more port": {"trafficFilter": [{**flt, "dstPort": ["80", "22"]}]},
        "every packet": {"trafficFilter": []},
        "another proxy port": {"dstInterface": {**declared["dstInterface"], "dstPort": 22}},
        "another action": {"action": "DROP"},
        "a higher priority": {"priority": 0},
    }
    for what, change in widenings.items():
        r = put(**change)
        assert r.status_code == 403, (what, r.text)
        assert r.headers["content-type"] == "application/problem+json"
    for bad in ("70000", "-1", "0", "http"):
        r = put(trafficFilter=[{**flt, "dstPort": [bad]}])
        assert r.status_code == 400 and "dstPort" in r.json()["detail"], (bad, r.text)
    r = put(trafficFilter=[{**flt, "srcAddress": ["10.30.0.0/33"]}])
    assert r.status_code == 400 and "srcAddress" in r.json()["detail"], r.text
    assert app.get(url).json() == stored  # nothing refused was stored
