"""Mp1 behaviour over real HTTP: registration, validation, discovery, notifications."""

from __future__ import annotations

import json
import time

import httpx

from mec_common.auth import TokenVerifier, jwks_key_lookup
from mec_common.health import Health
from mec_common.mp1 import MecAppRegistration, Mp1Client, termination_router
from mec_platform.testing import Receiver, Running, external_app, onboard, wait_until

SM = "/mec_service_mgmt/v1"
AS = "/mec_app_support/v1"
SERVICE = {"serName": "rnis", "version": "v2", "state": "ACTIVE", "serializer": "JSON",
           "transportId": "amqp-bus", "serCategory": {"href": "http://x/rni", "id": "rni",
                                                      "name": "RNI", "version": "v2"}}  # fmt: skip


def test_register_discover_update_delete(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    r = app.post(f"{SM}/applications/{app_id}/services", json=SERVICE)
    assert r.status_code == 201
    created = r.json()
    assert r.headers["location"] == created["_links"]["self"]["href"]
    assert created["transportInfo"]["type"] == "MB_TOPIC_BASED"
    ser_id = created["serInstanceId"]

    assert [s["serInstanceId"] for s in app.get(f"{SM}/services").json()] == [ser_id]
    assert len(app.get(f"{SM}/services", params={"ser_name": "rnis"}).json()) == 1
    assert app.get(f"{SM}/services", params={"ser_name": "other"}).json() == []
    assert len(app.get(f"{SM}/services", params={"ser_category_id": "rni"}).json()) == 1
    assert app.get(f"{SM}/services", params={"scope_of_locality": "ZONE"}).json() == []
    # locality (MEC 011 v3.1.1): absent scopeOfLocality is MEC_HOST, absent isLocal and
    # consumedLocalOnly are TRUE
    for query, found in (({"scope_of_locality": "MEC_HOST"}, 1), ({"is_local": "true"}, 1),
                         ({"is_local": "false"}, 0), ({"consumed_local_only": "true"}, 1),
                         ({"consumed_local_only": "false"}, 0)):  # fmt: skip
        assert len(app.get(f"{SM}/services", params=query).json()) == found, query
    assert app.get(f"{SM}/services/{ser_id}").json()["serName"] == "rnis"

    update = {**created, "state": "INACTIVE"}
    update.pop("transportId", None)
    r = app.put(f"{SM}/applications/{app_id}/services/{ser_id}", json=update)
    assert r.status_code == 200 and r.json()["state"] == "INACTIVE"
    assert app.get(f"{SM}/services/{ser_id}").json()["state"] == "INACTIVE"  # cache cleared

    assert app.delete(f"{SM}/applications/{app_id}/services/{ser_id}").status_code == 204
    assert app.get(f"{SM}/services/{ser_id}").status_code == 404
    assert app.get(f"{SM}/services").json() == []


def test_invalid_service_registrations_say_why_and_change_nothing(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    url = f"{SM}/applications/{app_id}/services"
    cases = {
        "serInstanceId must not be present": {**SERVICE, "serInstanceId": "x"},
        "either transportId or transportInfo but not both": {
            **SERVICE, "transportInfo": app.get(f"{SM}/transports").json()[0]},
        "transportId nope is not a transport": {**SERVICE, "transportId": "nope"},
        "state": {**SERVICE, "state": "BROKEN"},
        "serName": {k: v for k, v in SERVICE.items() if k != "serName"},
    }  # fmt: skip
    for expected, body in cases.items():
        r = app.post(url, json=body)
        assert r.status_code == 400, body
        assert r.headers["content-type"] == "application/problem+json"
        assert expected in r.json()["detail"], r.json()
    r = app.get(f"{SM}/services", params={"ser_name": "a", "ser_instance_id": "b"})
    assert r.status_code == 400 and "either ser_instance_id or ser_name" in r.json()["detail"]
    assert app.get(f"{SM}/services").json() == []
    # Free-form members too: a lone surrogate (JSON "\ud8c4") is not Unicode and a 100-bit
    # integer cannot be encoded again; both were stored, then the answer failed (a 500)
    transport = {"id": "t", "name": "t", "type": "REST_HTTP", "protocol": "HTTP", "version": "1",
                 "endpoint": {"alternative": {"k": "LONE"}}, "security": {}}  # fmt: skip
    raw = json.dumps({**SERVICE, "transportInfo": transport})
    for value, expected in (('"\\ud8c4"', "surrogate"), ("-" + "9" * 30, "64-bit range")):
        body = raw.replace('"LONE"', value)
        r = app.post(url, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and expected in r.json()["detail"], r.text
    assert app.get(f"{SM}/services").json() == []


def test_app_a_cannot_touch_app_b(platform: Running) -> None:
    onboard(platform)
    _, a = external_app(platform)
    b_id, b = external_app(platform)
    ser_id = b.post(f"{SM}/applications/{b_id}/services", json=SERVICE).json()["serInstanceId"]
    sub = {"subscriptionType": "AppTerminationNotificationSubscription",
           "callbackReference": "http://127.0.0.1:9/x", "appInstanceId": b_id}  # fmt: skip
    b.post(f"{AS}/applications/{b_id}/subscriptions", json=sub)
    attempts = [
        a.post(f"{SM}/applications/{b_id}/services", json=SERVICE),
        a.put(f"{SM}/applications/{b_id}/services/{ser_id}", json=SERVICE),
        a.delete(f"{SM}/applications/{b_id}/services/{ser_id}"),
        a.get(f"{SM}/applications/{b_id}/subscriptions"),
        a.post(f"{AS}/applications/{b_id}/subscriptions", json=sub),
        a.get(f"{AS}/applications/{b_id}/traffic_rules"),
        a.put(f"{AS}/applications/{b_id}/dns_rules/dns1", json={}),
        a.post(f"{AS}/applications/{b_id}/confirm_ready", json={"indication": "READY"}),
        a.patch(f"{SM}/liveness/{ser_id}", json={"state": "ACTIVE"}),
        a.get("/app_lcm/v1/app_instances"),  # platform manager: admin only
    ]
    assert [r.status_code for r in attempts] == [403] * len(attempts)
    # B's service is intact, and A can still discover it (discovery is for everyone).
    assert a.get(f"{SM}/services/{ser_id}").json()["state"] == "ACTIVE"
    assert len(b.get(f"{AS}/applications/{b_id}/subscriptions").json()["_links"]
               ["subscriptions"]) == 1  # fmt: skip
    # No token, a wrong token, a notification token: 401.
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": f"Bearer {platform.platform.authority.notification_token('s')}"},
    ):
        assert httpx.get(f"{platform.url}{SM}/services", headers=headers).status_code == 401


def test_availability_notifications_are_filtered_retried_and_signed(
    platform: Running, receiver: Receiver
) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    receiver.fail_first = 2  # delivered on the third attempt
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": receiver.start(),
           "filteringCriteria": {"serNames": ["rnis"]}}  # fmt: skip
    r = app.post(f"{SM}/applications/{app_id}/subscriptions", json=sub)
    assert r.status_code == 201 and r.headers["location"] == r.json()["_links"]["self"]["href"]
    app.post(f"{SM}/applications/{app_id}/services", json={**SERVICE, "serName": "ignored"})
    ser_id = app.post(f"{SM}/applications/{app_id}/services", json=SERVICE).json()[
        "serInstanceId"]  # fmt: skip
    assert len(receiver.wait_for(1)) == 1  # ADDED, after two refusals and retries
    # (Deleting now would race the retries: a retried notification may be overtaken.)
    app.delete(f"{SM}/applications/{app_id}/services/{ser_id}")
    got = receiver.wait_for(2)
    changes = [(n["serviceReferences"][0]["serName"], n["serviceReferences"][0]["changeType"])
               for n in got]  # fmt: skip
    assert changes == [("rnis", "ADDED"), ("rnis", "REMOVED")]
    assert receiver.attempts == 4
    assert got[0]["_links"]["subscription"]["href"] == r.headers["location"]
    # The notification's token verifies with mec_common.auth against the platform's JWKS.
    verifier = TokenVerifier([], jwt_keys=jwks_key_lookup(f"{platform.url}/oauth2/jwks"))
    token = receiver.headers[0]["Authorization"].removeprefix("Bearer ")
    assert verifier.verify_notification(token, r.headers["location"]) is not None
    assert verifier.verify_notification(token, r.headers["location"] + "x") is None
    assert verifier.verify(token) is None  # not valid for any API


def test_liveness_marks_silent_services_inactive(platform: Running, receiver: Receiver) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": receiver.start()}  # fmt: skip
    app.post(f"{SM}/applications/{app_id}/subscriptions", json=sub)
    created = app.post(f"{SM}/applications/{app_id}/services",
                       json={**SERVICE, "livenessInterval": 1}).json()  # fmt: skip
    liveness = created["_links"]["liveness"]["href"].removeprefix(platform.url)
    assert app.patch(liveness, json={"state": "ACTIVE"}).json()["state"] == "ACTIVE"
    deadline = time.monotonic() + 10
    while app.get(liveness).json()["state"] == "ACTIVE":
        assert time.monotonic() < deadline, "service never expired"
        time.sleep(0.1)
    assert app.patch(liveness, json={"state": "ACTIVE"}).json()["state"] == "ACTIVE"
    # (a busy host may deliver late enough that the service has expired once more: [:3])
    changes = [n["serviceReferences"][0]["changeType"] for n in receiver.wait_for(3)[:3]]
    assert changes == ["ADDED", "STATE_CHANGED", "STATE_CHANGED"]


def test_app_support_rules_ready_timing(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    base = f"{AS}/applications/{app_id}"
    rules = app.get(f"{base}/traffic_rules").json()
    assert [r["trafficRuleId"] for r in rules] == ["intercept-http"]
    rule = {**rules[0], "state": "INACTIVE"}
    assert app.put(f"{base}/traffic_rules/intercept-http", json=rule).json()["state"] == "INACTIVE"
    assert app.get(f"{base}/traffic_rules/intercept-http").json()["state"] == "INACTIVE"
    r = app.put(f"{base}/traffic_rules/other", json={**rule, "trafficRuleId": "other"})
    assert r.status_code == 404
    r = app.put(f"{base}/traffic_rules/intercept-http", json={**rule, "priority": -1})
    assert r.status_code == 400 and "priority" in r.json()["detail"]
    assert app.get(f"{base}/dns_rules/dns1").json()["domainName"] == "app.mec.local"
    assert app.post(f"{base}/confirm_ready", json={"indication": "READY"}).status_code == 204
    assert app.post(f"{base}/confirm_ready", json={"indication": "NO"}).status_code == 400
    assert app.post(f"{base}/confirm_ready").status_code == 204  # the body is optional
    for kind in ("ready", "termination"):  # but a body that is JSON null is not an object
        r = app.post(f"{base}/confirm_{kind}", content=b" null",
                     headers={"Content-Type": "application/json"})  # fmt: skip
        assert r.status_code == 400, r.text
    r = app.post(f"{base}/confirm_termination", json={"operationAction": "TERMINATING"})
    assert r.status_code == 409  # nothing is being terminated
    now = app.get(f"{AS}/timing/current_time").json()
    assert abs(now["seconds"] - time.time()) < 5 and now["timeSourceStatus"] == "NONTRACEABLE"
    types = {t["type"] for t in app.get(f"{SM}/transports").json()}
    assert types == {"REST_HTTP", "MB_TOPIC_BASED"}


def test_oauth2_token_endpoint(platform: Running) -> None:
    url = f"{platform.url}/oauth2/token"
    grant = {"grant_type": "client_credentials"}
    assert httpx.post(url, data=grant, auth=("admin", "wrong")).status_code == 401
    assert httpx.post(url, data={"grant_type": "password"}, auth=("admin", "x")).status_code == 400
    r = httpx.post(url, data={**grant, "client_id": "admin", "client_secret": "admin-test-secret"})
    assert r.status_code == 200 and r.json()["token_type"] == "Bearer"
    jwks = httpx.get(f"{platform.url}/oauth2/jwks").json()
    assert jwks["keys"][0]["kty"] == "OKP" and "d" not in jwks["keys"][0]


def test_deleting_an_instance_revokes_it_and_removes_its_services(
    platform: Running, receiver: Receiver
) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": receiver.start()}  # fmt: skip
    app.post(f"{SM}/applications/{app_id}/subscriptions", json=sub)
    app.post(f"{SM}/applications/{app_id}/services", json=SERVICE)
    assert platform.admin.delete(f"/app_lcm/v1/app_instances/{app_id}").status_code == 204
    assert platform.admin.get(f"{SM}/services").json() == []
    assert app.get(f"{SM}/transports").status_code == 401  # its token died with it
    assert platform.admin.get(f"/app_lcm/v1/app_instances/{app_id}").status_code == 404


def test_registration_heartbeats_keep_a_service_alive(platform: Running) -> None:
    onboard(platform)
    app_id, _ = external_app(platform)
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{app_id}/credentials").json()
    client = Mp1Client(platform.url, app_id, creds["clientId"], creds["clientSecret"])
    registration = MecAppRegistration(client, [{**SERVICE, "livenessInterval": 1}],
                                      health=Health())  # fmt: skip
    registration.start()
    try:
        assert registration.ready.wait(10)
        time.sleep(3.5)  # expiry is after two missed 1 s intervals
        [service] = platform.admin.get(f"{SM}/services").json()
        assert service["state"] == "ACTIVE" and service["livenessInterval"] == 1
    finally:
        registration.stop()
        client.close()
    assert platform.admin.get(f"{SM}/services").json() == []


def test_termination_endpoint_of_an_app_admits_only_the_platform(platform: Running) -> None:
    from fastapi.testclient import TestClient

    from mec_common.api import create_app
    from mec_common.config import ServiceSettings

    onboard(platform)
    app_id, app = external_app(platform)
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{app_id}/credentials").json()
    client = Mp1Client(platform.url, app_id, creds["clientId"], creds["clientSecret"])
    stopped: list[bool] = []
    registration = MecAppRegistration(client, [], on_termination=lambda: stopped.append(True))
    verifier = TokenVerifier([], jwt_keys=jwks_key_lookup(f"{platform.url}/oauth2/jwks"))
    api = create_app(
        title="app",
        version="1",
        description="a MEC app",
        settings=ServiceSettings(),
        health=Health(),
        token_verifier=verifier,
    )
    api.include_router(termination_router(registration, verifier))
    http = TestClient(api)
    path = f"/mec/notifications/app_termination/{registration.callback_secret}"
    registration._subscription = sub = f"{platform.url}/subscriptions/ours"
    body = {"notificationType": "AppTerminationNotification", "operationAction": "TERMINATING",
            "maxGracefulTimeout": 5, "_links": {"subscription": {"href": sub}}}  # fmt: skip
    authority = platform.platform.authority
    notify = {"Authorization": f"Bearer {authority.notification_token(sub)}"}
    app_token = {"Authorization": app.headers["Authorization"]}  # an API token: not enough
    other = {"Authorization": f"Bearer {authority.notification_token(sub + 'x')}"}
    assert http.post(path, json=body, headers=app_token).status_code == 401
    assert http.post(path, json=body, headers=other).status_code == 401  # another subscription's
    assert http.post("/mec/notifications/app_termination/guess", json=body,
                     headers=notify).status_code == 404  # fmt: skip
    assert http.post(path, json=body).status_code == 401
    assert http.post(path, content=b"{nope", headers=notify).status_code == 400
    assert http.post(path, json={**body, "operationAction": "X"}, headers=notify).status_code == 400
    assert stopped == []
    assert http.post(path, json=body, headers=notify).status_code == 204
    wait_until(lambda: stopped == [True], 10, "on_termination")
    client.close()
