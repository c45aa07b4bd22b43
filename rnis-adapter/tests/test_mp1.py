"""Mp1 registration on the real MEC platform (mec_platform.testing runs it in-process):
confirm ready, two transports, termination subscription, deregistration, retry while the
platform is down."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from rnis_helpers import RNIS_APPD, Adapter, FlexranSource, app_credentials, wait_for

from mec_platform.testing import Running, make_settings, onboard


def rnis_services(platform: Running) -> list[dict[str, Any]]:
    r = platform.admin.get("/mec_service_mgmt/v1/services", params={"ser_name": "rnis"})
    assert r.status_code == 200, r.text
    return list(r.json())


def start_adapter(tmp: Path, source: FlexranSource, exchange: str, platform_url: str,
                  instance: str, client: str, secret: str) -> Adapter:  # fmt: skip
    env = {
        "RNIS_PLATFORM_URL": platform_url,
        "RNIS_APP_INSTANCE_ID": instance,
        "RNIS_CLIENT_ID": client,
        "RNIS_CLIENT_SECRET": secret,
    }
    return Adapter(tmp, source.url, exchange, env=env).start()


@pytest.fixture
def platform(tmp_path: Path) -> Running:
    running = Running(make_settings(tmp_path))
    onboard(running, RNIS_APPD)
    yield running
    running.stop()


def test_registers_two_transports_and_deregisters(
    tmp_path: Path, platform: Running, source: FlexranSource, exchange: str
) -> None:
    instance, client, secret = app_credentials(platform)
    a = start_adapter(tmp_path, source, exchange, platform.url, instance, client, secret)
    try:
        wait_for(lambda: len(rnis_services(platform)) == 2, 15, "two RNIS registrations")
        by_type = {s["transportInfo"]["type"]: s for s in rnis_services(platform)}
        rest, amqp = by_type["REST_HTTP"], by_type["MB_TOPIC_BASED"]
        assert rest["state"] == "ACTIVE"
        assert rest["transportInfo"]["endpoint"]["uris"] == [f"{a.url}/rni/v2"]
        assert amqp["transportInfo"]["protocol"] == "AMQP"
        assert amqp["transportInfo"]["implSpecificInfo"]["exchange"] == exchange
        uri = amqp["transportInfo"]["endpoint"]["uris"][0]
        assert uri.startswith("amqp://127.0.0.1") and "guest" not in uri, "no credentials"
        wait_for(lambda: a.health()["checks"].get("platform", {}).get("ok"), 10, "health")
        # The REST endpoint found through Mp1 answers (with the adapter's token).
        r = httpx.get(rest["transportInfo"]["endpoint"]["uris"][0] + "/queries/layer2_meas",
                      headers={"Authorization": "Bearer test-token"})  # fmt: skip
        assert r.status_code == 200
    finally:
        assert a.stop() == 0
    assert rnis_services(platform) == [], "deregistered on shutdown"
    assert "registered on the MEC platform" in (a.proc.output() if a.proc else "")


def test_termination_notification_stops_the_adapter(
    tmp_path: Path, platform: Running, source: FlexranSource, exchange: str
) -> None:
    instance, client, secret = app_credentials(platform)
    a = start_adapter(tmp_path, source, exchange, platform.url, instance, client, secret)
    wait_for(lambda: len(rnis_services(platform)) == 2, 15, "registration")
    app = platform.client(client, secret)
    subs = app.get(f"/mec_app_support/v1/applications/{instance}/subscriptions").json()
    [link] = subs["_links"]["subscriptions"]
    sub = app.get(link["href"].removeprefix(platform.url)).json()
    callback = sub["callbackReference"]
    assert callback.startswith(a.url + "/mec/notifications/app_termination/")
    guess = httpx.post(a.url + "/mec/notifications/app_termination/x", json={})
    assert guess.status_code in (401, 404), "only the registered (secret) path exists"
    note = {"notificationType": "AppTerminationNotification", "operationAction": "TERMINATING"}
    # The secret path is not enough: the platform's notification token is required, as the
    # Python services require it (mec_common.mp1.termination_router).
    api_token = app.headers["Authorization"]  # the app's own token: audience mec-api
    for headers in ({}, {"Authorization": api_token}, {"Authorization": "Bearer x.y.z"}):
        r = httpx.post(callback, json=note, headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert r.headers["content-type"] == "application/problem+json"
    token = platform.platform.authority.notification_token(link["href"])
    platform_token = {"Authorization": f"Bearer {token}"}
    r = httpx.post(callback, json={"operationAction": "DANCE"}, headers=platform_token)
    assert r.status_code == 400
    assert a.proc is not None and a.proc.alive(), "refused notifications change nothing"
    r = httpx.post(callback, json=note, headers=platform_token)
    assert r.status_code == 204
    assert a.proc is not None
    wait_for(lambda: not a.proc.alive(), 15, "the adapter exits")  # type: ignore[union-attr]
    assert a.proc.p.returncode == 0
    assert rnis_services(platform) == []


def test_retries_while_the_platform_is_down(
    tmp_path: Path, source: FlexranSource, exchange: str
) -> None:
    settings = make_settings(tmp_path)
    first = Running(settings)
    onboard(first, RNIS_APPD)
    instance, client, secret = app_credentials(first)
    first.stop()
    a = start_adapter(tmp_path, source, exchange, first.url, instance, client, secret)
    try:
        wait_for(lambda: "platform" in a.health()["checks"], 10, "platform check")
        check = a.health()["checks"]["platform"]
        assert not check["ok"] and "retrying" in check["detail"]
        assert a.health()["status"] == "degraded"
        again = Running(settings)  # same state: the app and its credentials persist
        try:
            wait_for(lambda: len(rnis_services(again)) == 2, 20, "registration after restart")
            wait_for(lambda: a.health()["status"] == "ok", 10, "healthy")
        finally:
            a.stop()
            again.stop()
    finally:
        a.stop()


CONSUMER_APPD = """
appDId: rnis-user
appName: rnis-user
appProvider: mts-tests
appSoftVersion: "1"
appDVersion: "1"
appServiceRequired:
  - {serName: rnis, version: "2.1.1"}
"""


def test_platform_issued_tokens_are_accepted(
    tmp_path: Path, platform: Running, source: FlexranSource, exchange: str
) -> None:
    instance, client, secret = app_credentials(platform)
    a = start_adapter(tmp_path, source, exchange, platform.url, instance, client, secret)
    try:
        # A consumer: an app whose AppD requires rnis (the adapter's own AppD only produces it).
        onboard(platform, CONSUMER_APPD)
        consumer = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": "rnis-user"})
        creds = platform.admin.post(
            f"/app_lcm/v1/app_instances/{consumer.json()['id']}/credentials").json()  # fmt: skip
        token = platform.token(creds["clientId"], creds["clientSecret"])
        assert a.get("/rni/v2/queries/layer2_meas", token=token).status_code == 200
        # The producer's own token is not a consumer's: apps reach only what their AppD lists.
        own = platform.token(client, secret)
        assert a.get("/rni/v2/queries/layer2_meas", token=own).status_code == 401
        head, payload, sig = token.split(".")
        forged = f"{head}.{payload}.{sig[:-4]}AAAA"
        assert a.get("/rni/v2/queries/layer2_meas", token=forged).status_code == 401
        other = payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1]
        assert (
            a.get("/rni/v2/queries/layer2_meas", token=f"{head}.{other}.{sig}").status_code == 401
        )
        assert a.get("/rni/v2/queries/layer2_meas", token="a.b.c").status_code == 401
    finally:
        a.stop()
