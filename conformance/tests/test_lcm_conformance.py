"""MEC 010-2 v3.1.1 lifecycle management: AppLcmOpOccStateChangeSubscription, its
notifications delivered to a real HTTP receiver, each valid against the official schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from conftest import official_spec

from mec_platform.testing import (
    Receiver,
    Running,
    onboard,
    running_platform,
    wait_op,
    wait_termination_subscribed,
    wait_until,
)

LCM = "/app_lcm/v1"


def official_schema(specs: Path, name: str, file: str = "MEC01002_AppLcm.yaml") -> dict[str, Any]:
    """A component schema of a MEC 010-2 v3.1.1 file, placeholder enumerations dropped
    (``conftest.without_placeholders``)."""
    components = official_spec(specs / "mec010-2-v3.1.1" / file)["components"]
    return {"$ref": f"#/components/schemas/{name}", "components": components}


@pytest.fixture
def platform_and_receiver(tmp_path: Path) -> Iterator[tuple[Running, Receiver, str]]:
    """A platform, a notification receiver and the receiver's URL."""
    receiver = Receiver()
    url = receiver.start()
    try:
        with running_platform(tmp_path) as platform:
            yield platform, receiver, url
    finally:
        receiver.stop()


def test_op_occ_notifications_reach_a_real_receiver(
    specs: Path, platform_and_receiver: tuple[Running, Receiver, str]
) -> None:
    platform, receiver, url = platform_and_receiver
    created = platform.admin.post(f"{LCM}/subscriptions", json={
        "subscriptionType": "AppLcmOpOccStateChangeSubscription", "callbackUri": url})  # fmt: skip
    assert created.status_code == 201, created.text
    info = created.json()
    assert created.headers["location"] == info["_links"]["self"]["href"]
    assert platform.admin.get(created.headers["location"]).headers["etag"]
    jsonschema_rs.validate(official_schema(specs, "AppLcmOpOccSubscriptionInfo"), info)

    onboard(platform)
    instance = platform.admin.post(f"{LCM}/app_instances", json={"appDId": "test-app"}).json()
    op = platform.admin.post(f"{LCM}/app_instances/{instance['id']}/instantiate", json={}).json()
    op = wait_op(platform, op)
    states = [n["operationState"] for n in receiver.wait_for(3, timeout=60)
              if n["appLcmOpOccId"] == op["id"]]  # fmt: skip
    assert states[0] == "STARTING" and states[-1] == op["operationState"], states
    schema = official_schema(specs, "AppLcmOpOccNotification")
    for note in receiver.received:
        jsonschema_rs.validate(schema, note)
        assert note["subscriptionId"] == info["id"]
        assert note["operationType"] == "INSTANTIATE"
        assert note["_links"]["appLcmOpOcc"]["href"].endswith(op["id"])
    absent = "AppInstanceIdentifierCreationSubscription"
    bad = platform.admin.post(f"{LCM}/subscriptions",
                              json={"subscriptionType": absent, "callbackUri": url})  # fmt: skip
    assert bad.status_code == 400
    assert platform.admin.delete(created.headers["location"]).status_code == 204


def test_packages_under_mec010_2_resource_names(
    platform_and_receiver: tuple[Running, Receiver, str],
) -> None:
    platform, _, _ = platform_and_receiver
    package = onboard(platform)
    base = "/app_pkgm/v1/onboarded_app_packages"
    listed = platform.admin.get(base)
    assert [p["appDId"] for p in listed.json()] == ["test-app"]
    one = platform.admin.get(f"{base}/test-app")  # by appDId, as MEC 010-2 names it
    assert one.status_code == 200 and one.json()["id"] == package["id"]
    assert platform.admin.get(f"{base}/test-app/appd").json()["appDId"] == "test-app"
    r = platform.admin.patch(f"{base}/test-app", json={"operationState": "DISABLED"},
                             headers={"If-Match": one.headers["etag"]})  # fmt: skip
    assert r.status_code == 200 and r.json()["operationalState"] == "DISABLED"
    assert platform.admin.get(f"{base}/nope").status_code == 404
    assert platform.admin.delete(f"{base}/test-app").status_code == 204
    assert platform.admin.get(base).json() == []


def test_operate_stops_with_mp1_handshake_and_starts_again(
    specs: Path, platform_and_receiver: tuple[Running, Receiver, str]
) -> None:
    """MEC 010-2 operate: STOPPED (graceful: the app gets AppTerminationNotification with
    STOPPING, confirms, exits; its service leaves discovery), then STARTED (a new process
    registers again); an operation for the state the app is already in is 409."""
    from test_lifecycle import sample_appd  # the platform tests' sample app

    platform, receiver, url = platform_and_receiver
    admin = platform.admin
    sub = admin.post(f"{LCM}/subscriptions", json={
        "subscriptionType": "AppInstanceStateChangeSubscription", "callbackUri": url})  # fmt: skip
    assert sub.status_code == 201, sub.text
    jsonschema_rs.validate(official_schema(specs, "AppInstSubscriptionInfo"), sub.json())
    onboard(platform, sample_appd())
    iid = admin.post(f"{LCM}/app_instances", json={"appDId": "sample"}).json()["id"]
    op = admin.post(f"{LCM}/app_instances/{iid}/instantiate", json={}).json()
    assert wait_op(platform, op)["operationState"] == "COMPLETED"
    services = "/mec_service_mgmt/v1/services"
    wait_until(lambda: admin.get(services, params={"ser_name": "sample"}).json(), what="service")
    wait_termination_subscribed(platform, iid)
    again = admin.post(f"{LCM}/app_instances/{iid}/operate", json={"changeStateTo": "STARTED"})
    assert again.status_code == 409, again.text
    r = admin.post(f"{LCM}/app_instances/{iid}/operate",
                   json={"changeStateTo": "STOPPED", "stopType": "GRACEFUL",
                         "gracefulStopTimeout": 60})  # fmt: skip
    assert r.status_code == 202, r.text
    assert wait_op(platform, r.json())["operationState"] == "COMPLETED"
    info = admin.get(f"{LCM}/app_instances/{iid}").json()
    assert info["instantiationState"] == "INSTANTIATED"
    assert info["instantiatedAppState"] == {"operationalState": "STOPPED"}
    assert admin.get(services, params={"ser_name": "sample"}).json() == []
    log = (platform.settings.apps_path() / iid / "app.log").read_text()
    assert "termination requested by the platform" in log, log

    r = admin.post(f"{LCM}/app_instances/{iid}/operate", json={"changeStateTo": "STARTED"})
    assert wait_op(platform, r.json())["operationState"] == "COMPLETED"
    wait_until(lambda: admin.get(services, params={"ser_name": "sample"}).json(),
               what="the service registered again")  # fmt: skip
    bad = admin.post(f"{LCM}/app_instances/{iid}/operate", json={"changeStateTo": "PAUSED"})
    assert bad.status_code == 400
    notes = receiver.wait_for(3, timeout=60)
    assert [n["appInstanceState"] for n in notes] == ["STARTED", "STOPPED", "STARTED"], notes
    schema = official_schema(specs, "AppInstNotification")
    for note in notes:
        jsonschema_rs.validate(schema, note)
        assert note["appInstanceId"] == iid and note["subscriptionId"] == sub.json()["id"]


def test_package_notifications_reach_a_real_receiver(
    specs: Path, platform_and_receiver: tuple[Running, Receiver, str]
) -> None:
    platform, receiver, url = platform_and_receiver
    pkgm = "/app_pkgm/v1"
    for kind in ("AppPackageOnBoardingSubscription", "AppPackageChangeSubscription",
                 "AppPackageDeletionSubscription"):  # fmt: skip
        r = platform.admin.post(f"{pkgm}/subscriptions",
                                json={"subscriptionType": kind, "callbackUri": url})  # fmt: skip
        assert r.status_code == 201, r.text
    onboard(platform)
    item = f"{pkgm}/onboarded_app_packages/test-app"
    assert platform.admin.patch(item, json={"operationState": "DISABLED"}).status_code == 200
    assert platform.admin.delete(item).status_code == 204
    notes = receiver.wait_for(3, timeout=60)
    assert [n["notificationType"] for n in notes] == [
        "AppPackageOnBoarded", "AppPackageDisabled", "AppPackageDeleted"]  # fmt: skip
    schema = official_schema(specs, "AppPkgNotification", "MEC01002_AppPkgMgmt.yaml")
    for note in notes:
        jsonschema_rs.validate(schema, note)
        assert note["appDId"] == "test-app"
    assert [n["operationalState"] for n in notes] == ["ENABLED", "DISABLED", "DISABLED"]
    listing = platform.admin.get(f"{pkgm}/subscriptions").json()
    assert len(listing["_links"]["subscriptions"]) == 3
