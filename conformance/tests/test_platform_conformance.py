"""Conformance of the platform's MEC 011 (Mp1) and MEC 010-2 style APIs, one test per failure
an operator's conformance lab found (issue 21), on a real platform over HTTP.

What each test checks is the behaviour the spec (and RFC 9110 for conditional requests)
asks for; docs/conformance.md lists the clauses.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mec_common.ports import free_port
from mec_platform.testing import Running, external_app, onboard, running_platform

SM = "/mec_service_mgmt/v1"
AS = "/mec_app_support/v1"
SERVICE = {"serName": "svc", "version": "1", "state": "ACTIVE", "serializer": "JSON",
           "transportId": "rest-http"}  # fmt: skip


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    with running_platform(tmp_path) as running:
        yield running


@pytest.fixture
def app(platform: Running) -> tuple[str, httpx.Client]:
    onboard(platform)
    return external_app(platform)


def _without_links(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "_links"}


def _resources(platform: Running, app: tuple[str, httpx.Client]) -> dict[str, str]:
    """URL of one modifiable resource of each kind (a service, a traffic and a DNS rule)."""
    app_id, client = app
    r = client.post(f"{SM}/applications/{app_id}/services", json=SERVICE)
    assert r.status_code == 201, r.text
    return {
        "service": f"{SM}/applications/{app_id}/services/{r.json()['serInstanceId']}",
        "traffic rule": f"{AS}/applications/{app_id}/traffic_rules/intercept-http",
        "dns rule": f"{AS}/applications/{app_id}/dns_rules/dns1",
    }


def _changed(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    if kind == "service":
        return {**_without_links(body), "version": body["version"] + "+1"}
    return {**body, "state": "INACTIVE" if body["state"] == "ACTIVE" else "ACTIVE"}


# --- 1. conditional requests ---------------------------------------------------------------


def test_put_with_a_false_if_match_is_412_and_changes_nothing(
    platform: Running, app: tuple[str, httpx.Client]
) -> None:
    _, client = app
    for kind, url in _resources(platform, app).items():
        got = client.get(url)
        assert got.status_code == 200, got.text
        etag = got.headers["etag"]
        assert etag.startswith('"') and not etag.startswith("W/"), f"{kind}: strong ETag"
        r = client.put(url, json=_changed(kind, got.json()),
                       headers={"If-Match": '"INVALID_ETAG"'})  # fmt: skip
        assert r.status_code == 412, f"{kind}: {r.status_code} {r.text}"
        assert r.headers["content-type"] == "application/problem+json"
        assert client.get(url).json() == got.json(), f"{kind} changed by a failed PUT"
        # the right ETag is accepted, and the answer carries the new one
        r = client.put(url, json=_changed(kind, got.json()), headers={"If-Match": etag})
        assert r.status_code == 200, f"{kind}: {r.text}"
        assert r.headers["etag"] != etag and client.get(url).headers["etag"] == r.headers["etag"]
        # If-None-Match on a GET: 304 while unchanged
        assert client.get(url, headers={"If-None-Match": r.headers["etag"]}).status_code == 304


def test_two_concurrent_writers_one_gets_412_and_nothing_is_lost(
    platform: Running, app: tuple[str, httpx.Client]
) -> None:
    """Two clients read the same rule and write different changes with If-Match; exactly one
    wins, the loser re-reads and re-applies, and both changes end up in the rule."""
    _, client = app
    url = _resources(platform, app)["traffic rule"]
    start = client.get(url)
    etag = start.headers["etag"]
    barrier = threading.Barrier(2)
    statuses: dict[str, int] = {}

    def write(name: str, change: dict[str, Any]) -> None:
        with httpx.Client(base_url=platform.url, headers=client.headers, timeout=60) as c:
            barrier.wait()
            statuses[name] = c.put(url, json={**start.json(), **change},
                                   headers={"If-Match": etag}).status_code  # fmt: skip

    # an app may only narrow or toggle its AppD's rules (issue 20): a narrower filter
    narrower = [{**start.json()["trafficFilter"][0], "srcAddress": ["10.30.0.0/16"]}]
    changes = {"a": {"trafficFilter": narrower}, "b": {"state": "INACTIVE"}}
    writers = [threading.Thread(target=write, args=item) for item in changes.items()]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    assert sorted(statuses.values()) == [200, 412], statuses
    loser = next(name for name, status in statuses.items() if status == 412)
    fresh = client.get(url)
    r = client.put(url, json={**fresh.json(), **changes[loser]},
                   headers={"If-Match": fresh.headers["etag"]})  # fmt: skip
    assert r.status_code == 200, r.text
    final = client.get(url).json()
    assert final["trafficFilter"] == narrower and final["state"] == "INACTIVE", final


def test_delete_of_a_subscription_honours_if_match(
    platform: Running, app: tuple[str, httpx.Client]
) -> None:
    app_id, client = app
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": "http://127.0.0.1:9/cb"}  # fmt: skip
    url = client.post(f"{SM}/applications/{app_id}/subscriptions", json=sub).headers["location"]
    got = client.get(url)
    assert got.headers["etag"]
    assert client.delete(url, headers={"If-Match": '"stale"'}).status_code == 412
    assert client.delete(url, headers={"If-Match": got.headers["etag"]}).status_code == 204
    assert client.get(url).status_code == 404


def test_platform_resources_carry_etags(platform: Running) -> None:
    package = onboard(platform)
    url = f"/app_pkgm/v1/app_packages/{package['id']}"
    got = platform.admin.get(url)
    r = platform.admin.patch(url, json={"operationState": "DISABLED"},
                             headers={"If-Match": '"old"'})  # fmt: skip
    assert r.status_code == 412 and platform.admin.get(url).json() == got.json()
    r = platform.admin.patch(url, json={"operationState": "DISABLED"},
                             headers={"If-Match": got.headers["etag"]})  # fmt: skip
    assert r.status_code == 200 and r.json()["operationalState"] == "DISABLED"


# --- 2. query parameters -------------------------------------------------------------------


@pytest.mark.parametrize("path", [
    f"{SM}/services?instance_id=INVALID_VALUE",
    SM + "/applications/{app_id}/services?instance_id=INVALID_VALUE",
    "/app_pkgm/v1/app_packages?operationalStatus=ENABLED",
    SM + "/applications/{app_id}/subscriptions?foo=1",
    AS + "/applications/{app_id}/traffic_rules?bar=1",
])  # fmt: skip
def test_unknown_query_parameters_are_400_naming_them(
    platform: Running, app: tuple[str, httpx.Client], path: str
) -> None:
    app_id, client = app
    caller = platform.admin if path.startswith("/app_pkgm") else client
    r = caller.get(path.format(app_id=app_id))
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json"
    name = path.split("?")[1].split("=")[0]
    assert repr(name) in r.json()["detail"]


@pytest.mark.parametrize(("query", "named"), [
    ("scope_of_locality=NOWHERE", "scope_of_locality"),
    ("is_local=maybe", "is_local"),
])  # fmt: skip
def test_malformed_or_out_of_enumeration_values_are_400(
    app: tuple[str, httpx.Client], query: str, named: str
) -> None:
    _, client = app
    r = client.get(f"{SM}/services?{query}")
    assert r.status_code == 400 and named in r.json()["detail"], r.text


# --- 3. 404 before body checks -------------------------------------------------------------


def test_put_to_a_rule_that_does_not_exist_is_404(
    platform: Running, app: tuple[str, httpx.Client]
) -> None:
    app_id, client = app
    for kind, existing in (("traffic_rules", "intercept-http"), ("dns_rules", "dns1")):
        body = client.get(f"{AS}/applications/{app_id}/{kind}/{existing}").json()
        r = client.put(f"{AS}/applications/{app_id}/{kind}/no-such-rule", json=body)
        assert r.status_code == 404, f"{kind}: {r.status_code} {r.text}"


# --- 5. links that can be followed ---------------------------------------------------------


def test_links_use_the_public_url_and_can_be_followed(tmp_path: Path) -> None:
    """The platform listens on every address and advertises 127.0.0.2 (not the loopback
    default): a client that reaches it there follows a subscription's self link, and the
    ProblemDetails instance names the same base."""
    port = free_port()
    public = f"http://127.0.0.2:{port}"
    with running_platform(tmp_path, http_host="0.0.0.0", http_port=port,
                          public_url=public) as platform:  # fmt: skip
        onboard(platform)
        app_id, app = external_app(platform)
        client = httpx.Client(base_url=public, headers=app.headers, timeout=60)
        sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
               "callbackReference": "http://127.0.0.1:9/cb"}  # fmt: skip
        r = client.post(f"{SM}/applications/{app_id}/subscriptions", json=sub)
        assert r.status_code == 201, r.text
        self_link = r.json()["_links"]["self"]["href"]
        assert self_link.startswith(public + SM) and r.headers["location"] == self_link
        assert client.get(self_link).status_code == 200
        missing = client.get(f"{SM}/services/nope").json()
        assert missing["instance"] == f"{public}{SM}/services/nope"


@pytest.mark.parametrize("trusted", [True, False])
def test_forwarded_headers_only_from_a_trusted_proxy(tmp_path: Path, trusted: bool) -> None:
    proxies = "127.0.0.1/32" if trusted else "192.0.2.0/24"
    with running_platform(tmp_path, trusted_proxies=proxies) as platform:
        onboard(platform)
        app_id, app = external_app(platform)
        forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "mec.example:8443",
                     "X-Forwarded-Prefix": "/platform"}  # fmt: skip
        r = app.get(f"{SM}/applications/{app_id}/services/nope", headers=forwarded)
        sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
               "callbackReference": "http://127.0.0.1:9/cb"}  # fmt: skip
        created = app.post(f"{SM}/applications/{app_id}/subscriptions", json=sub,
                           headers=forwarded)  # fmt: skip
        base = "https://mec.example:8443/platform" if trusted else platform.url
        assert r.json()["instance"].startswith(base + SM), r.json()
        assert created.headers["location"].startswith(base + SM)
        assert created.json()["_links"]["self"]["href"] == created.headers["location"]
