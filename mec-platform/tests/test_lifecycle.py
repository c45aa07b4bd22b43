"""App lifecycle with the process backend: a real app registers, then terminates gracefully."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from mec_common.health import Health
from mec_common.mp1 import MecAppRegistration, Mp1Client
from mec_platform.testing import (
    Running,
    external_app,
    make_settings,
    onboard,
    wait_op,
    wait_termination_subscribed,
    wait_until,
)

SAMPLE = Path(__file__).with_name("sample_app.py")
LCM = "/app_lcm/v1"


def sample_appd(appd_id: str = "sample") -> str:
    return f"""
appDId: {appd_id}
appName: sample
appProvider: mts-tests
appSoftVersion: "1.0"
appDVersion: "1"
appServiceProduced: [{{serName: sample, version: v1}}]
terminateAppInstanceOpConfig: {{minGracefulTerminationTimeout: 1}}
deployment:
  process:
    command: ["{sys.executable}", "{SAMPLE}"]
    env: {{SAMPLE_SER_NAME: sample}}
"""


def test_instantiate_register_terminate_gracefully(platform: Running) -> None:
    admin = platform.admin
    onboard(platform, sample_appd())
    instance = admin.post(f"{LCM}/app_instances", json={"appDId": "sample"}).json()
    iid = instance["id"]
    assert instance["instantiationState"] == "NOT_INSTANTIATED"

    r = admin.post(f"{LCM}/app_instances/{iid}/instantiate", json={})
    assert r.status_code == 202 and r.headers["location"].endswith(r.json()["id"])
    assert wait_op(platform, r.json())["operationState"] == "COMPLETED"
    # The app itself confirms ready and registers its service through mec_common.mp1.
    services = "/mec_service_mgmt/v1/services"
    wait_until(lambda: admin.get(services, params={"ser_name": "sample"}).json(), what="service")
    wait_until(lambda: admin.get(f"{LCM}/app_instances/{iid}").json()["ready"], what="ready")
    wait_termination_subscribed(platform, iid)
    info = admin.get(f"{LCM}/app_instances/{iid}").json()
    assert info["instantiatedAppState"] == {"operationalState": "STARTED"}
    again = admin.post(f"{LCM}/app_instances/{iid}/instantiate", json={})
    assert again.status_code == 409

    started = time.monotonic()
    r = admin.post(
        f"{LCM}/app_instances/{iid}/terminate",
        json={"terminationType": "GRACEFUL", "gracefulTerminationTimeout": 60},
    )
    op = wait_op(platform, r.json())
    assert op["operationState"] == "COMPLETED", op
    # The app confirmed: the platform did not wait for the 60 s timeout.
    assert time.monotonic() - started < 30
    assert admin.get(services, params={"ser_name": "sample"}).json() == []
    assert admin.get(f"{LCM}/app_instances/{iid}").json()["instantiationState"] == (
        "NOT_INSTANTIATED")  # fmt: skip
    log = (platform.settings.apps_path() / iid / "app.log").read_text()
    assert "termination requested by the platform" in log and "sample app exited" in log
    ops = admin.get(f"{LCM}/app_lcm_op_occs", params={"appInstanceId": iid}).json()
    assert [(o["lcmOperation"], o["operationState"]) for o in ops] == [
        ("INSTANTIATE", "COMPLETED"), ("TERMINATE", "COMPLETED")]  # fmt: skip
    assert admin.delete(f"{LCM}/app_instances/{iid}").status_code == 204


def test_forceful_termination_and_failed_instantiation(platform: Running) -> None:
    admin = platform.admin
    onboard(platform, sample_appd())
    bad = sample_appd("broken").replace(sys.executable, "/nonexistent/python")
    onboard(platform, bad)
    iid = admin.post(f"{LCM}/app_instances", json={"appDId": "broken"}).json()["id"]
    op = wait_op(platform, admin.post(f"{LCM}/app_instances/{iid}/instantiate").json())
    assert op["operationState"] == "FAILED" and "nonexistent" in op["error"]["detail"]
    assert admin.get(f"{LCM}/app_instances/{iid}").json()["instantiationState"] == (
        "NOT_INSTANTIATED")  # fmt: skip

    # A command that starts but exits at once (here: a usage error) fails too, with its log.
    quits = sample_appd("quits").replace(str(SAMPLE), "--no-such-option")
    onboard(platform, quits)
    iid = admin.post(f"{LCM}/app_instances", json={"appDId": "quits"}).json()["id"]
    op = wait_op(platform, admin.post(f"{LCM}/app_instances/{iid}/instantiate").json())
    assert op["operationState"] == "FAILED" and "at start" in op["error"]["detail"], op
    assert "no-such-option" in op["error"]["detail"]

    iid = admin.post(f"{LCM}/app_instances", json={"appDId": "sample"}).json()["id"]
    wait_op(platform, admin.post(f"{LCM}/app_instances/{iid}/instantiate").json())
    wait_until(lambda: admin.get("/mec_service_mgmt/v1/services").json(), what="service")
    op = admin.post(f"{LCM}/app_instances/{iid}/terminate", json={"terminationType": "FORCEFUL"})
    assert wait_op(platform, op.json())["operationState"] == "COMPLETED"
    assert admin.get("/mec_service_mgmt/v1/services").json() == []
    r = admin.patch("/app_pkgm/v1/app_packages/sample", json={"operationState": "DISABLED"})
    assert r.json()["operationalState"] == "DISABLED"
    r = admin.post(f"{LCM}/app_instances", json={"appDId": "sample"})
    assert r.status_code == 409 and "DISABLED" in r.json()["detail"]
    assert admin.delete("/app_pkgm/v1/app_packages/sample").status_code == 409  # in use
    admin.delete(f"{LCM}/app_instances/{iid}")
    assert admin.delete("/app_pkgm/v1/app_packages/sample").status_code == 204


def test_invalid_appd_is_refused_with_every_reason(platform: Running) -> None:
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=b"appDId: x\nappName: [\n",
                            headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert r.status_code == 400 and "neither valid YAML nor JSON" in r.json()["detail"]
    appd = ('{"appDId": "x", "appName": "a", "appProvider": "p", "appDVersion": "1",'
            ' "appTrafficRule": [{"trafficRuleId": "r", "filterType": "FLOW", "priority": -1,'
            ' "trafficFilter": [], "action": "FORWARD"}], "colour": "red"}')  # fmt: skip
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=appd)
    detail = r.json()["detail"]
    for reason in ("appSoftVersion: Field required", "appTrafficRule.0.priority",
                   "appTrafficRule.0.action", "colour: unknown field"):  # fmt: skip
        assert reason in detail, detail
    assert platform.admin.get("/app_pkgm/v1/app_packages").json() == []
    onboard(platform)
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=sample_appd("test-app"))
    assert r.status_code == 409


def test_restart_keeps_everything_and_apps_retry_until_the_platform_is_back(
    tmp_path: Path,
) -> None:
    settings = make_settings(tmp_path)
    first = Running(settings)
    onboard(first)
    iid, app = external_app(first)
    creds = first.admin.post(f"{LCM}/app_instances/{iid}/credentials").json()
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": "http://127.0.0.1:9/cb"}  # fmt: skip
    app.post(f"/mec_service_mgmt/v1/applications/{iid}/subscriptions", json=sub)
    first.stop()

    # The platform is down: the app's registration loop retries and says so in its health.
    health = Health()
    client = Mp1Client(first.url, iid, creds["clientId"], creds["clientSecret"], timeout=1)
    service = {"serName": "late", "version": "v1", "state": "ACTIVE", "serializer": "JSON",
               "transportId": "rest-http"}  # fmt: skip
    registration = MecAppRegistration(client, [service], health=health, retry_initial=0.1,
                                      retry_max=0.5)  # fmt: skip
    registration.start()
    wait_until(lambda: "retrying" in health.report()["checks"]["platform"]["detail"], 10)
    assert health.report()["status"] == "degraded"

    second = Running(settings)  # same database, same port, same keys
    try:
        assert registration.ready.wait(15), health.report()
        assert health.report()["status"] == "ok"
        admin = second.admin
        assert [p["appDId"] for p in admin.get("/app_pkgm/v1/app_packages").json()] == ["test-app"]
        assert admin.get(f"{LCM}/app_instances/{iid}").status_code == 200
        links = admin.get(f"/mec_service_mgmt/v1/applications/{iid}/subscriptions").json()
        assert len(links["_links"]["subscriptions"]) == 1
        assert [s["serName"] for s in admin.get("/mec_service_mgmt/v1/services").json()] == [
            "late"]  # fmt: skip
        registration.stop()
        assert admin.get("/mec_service_mgmt/v1/services").json() == []
        # A token issued before the restart still verifies (keys persisted).
        assert app.get("/mec_service_mgmt/v1/transports").status_code == 200
    finally:
        client.close()
        second.stop()
