"""Conformance of the RNIS adapter's MEC 012 API (the Go binary, on a real platform for its
tokens and a synthetic FlexRAN source), one test per failure of issue 21."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pika
import pytest
from rnis_helpers import (
    RNIS_APPD,
    SHARED_AMQP,
    TOKEN,
    Adapter,
    FlexranSource,
    app_credentials,
    wait_for,
)

from mec_platform.testing import SIMPLE_APPD, external_app, onboard, running_platform

RNI = "/rni/v2"
CONSUMER_APPD = (
    SIMPLE_APPD
    + """appServiceRequired:
  - {serName: rnis, version: "2.1.1"}
"""
)
CELL_CHANGE = {"subscriptionType": "CellChangeSubscription",
               "callbackReference": "http://127.0.0.1:9/cb",
               "filterCriteriaAssocHo": {"ecgi": [{"plmn": {"mcc": "208", "mnc": "93"},
                                                   "cellId": "0271000"}]}}  # fmt: skip


@dataclass
class Rnis:
    adapter: Adapter
    app_id: str  # an app instance on the platform
    app_token: str  # its platform-issued token

    def get(self, path: str, token: str = TOKEN, **params: str) -> httpx.Response:
        return self.adapter.get(RNI + path, token=token, **params)


@contextmanager
def running_adapter(tmp_path: Path, env: dict[str, str]) -> Iterator[Adapter]:
    """The adapter on a synthetic FlexRAN source (2 cells, 2 UEs each) and its own exchange."""
    exchange = f"rnis-conformance-{uuid.uuid4().hex[:10]}"
    source = FlexranSource(tmp_path, ues=2, cells=2)
    adapter = Adapter(tmp_path, source.url, exchange, env=env)
    try:
        adapter.start()
        wait_for(lambda: len(adapter.get(RNI + "/queries/ext/ran_meas").json()["ueMeas"]) == 4,
                 30, "the UEs in the RNIS")  # fmt: skip
        yield adapter
    finally:
        adapter.stop()
        source.proc.stop()
        conn = pika.BlockingConnection(pika.URLParameters(SHARED_AMQP))
        conn.channel().exchange_delete(exchange)
        conn.close()


@pytest.fixture
def rnis(tmp_path: Path) -> Iterator[Rnis]:
    with running_platform(tmp_path) as platform:
        onboard(platform, RNIS_APPD)
        onboard(platform, CONSUMER_APPD)  # its token may call the RNIS (mec.consume:rnis)
        rnis_id, client_id, secret = app_credentials(platform)
        app_id, app = external_app(platform)
        env = {"RNIS_PLATFORM_URL": platform.url, "RNIS_APP_INSTANCE_ID": rnis_id,
               "RNIS_CLIENT_ID": client_id, "RNIS_CLIENT_SECRET": secret}  # fmt: skip
        with running_adapter(tmp_path, env) as adapter:
            yield Rnis(adapter, app_id, app.headers["Authorization"].removeprefix("Bearer "))


def _problem(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, f"{r.status_code} {r.text}"
    assert r.headers["content-type"].startswith("application/problem+json")
    return str(r.json()["detail"])


def test_rab_info_app_instance_id_is_the_callers(rnis: Rnis) -> None:
    body = rnis.get("/queries/rab_info", token=rnis.app_token).json()
    assert body["appInstanceId"] == rnis.app_id
    # another app's id: 403 (isolation), documented in docs/conformance.md
    _problem(rnis.get("/queries/rab_info", token=rnis.app_token, app_ins_id="other"), 403)


def test_plmn_info_for_an_app_instance_that_does_not_exist_is_404(rnis: Rnis) -> None:
    assert "app_ins_id" in _problem(rnis.get("/queries/plmn_info", app_ins_id="99"), 404)
    ok = rnis.get("/queries/plmn_info", token=rnis.app_token, app_ins_id=rnis.app_id)
    assert ok.status_code == 200 and ok.json()[0]["appInstanceId"] == rnis.app_id


@pytest.mark.parametrize("query", ["rab_info", "layer2_meas"])
def test_queries_about_an_unknown_cell_are_404(rnis: Rnis, query: str) -> None:
    detail = _problem(rnis.get(f"/queries/{query}", token=rnis.app_token, cell_id="0FFFFFF"), 404)
    assert "0FFFFFF" in detail
    assert rnis.get(f"/queries/{query}", token=rnis.app_token, cell_id="0271000").status_code == 200


def test_subscription_type_is_an_enumeration(rnis: Rnis) -> None:
    detail = _problem(rnis.get("/subscriptions", subscription_type="wrongType"), 400)
    assert "subscription_type" in detail
    assert rnis.get("/subscriptions", subscription_type="cell_change").status_code == 200
    assert "colour" in _problem(rnis.get("/subscriptions", colour="blue"), 400)


def test_subscription_put_with_a_false_if_match_is_412(rnis: Rnis) -> None:
    sub = CELL_CHANGE
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = rnis.adapter.url + RNI + "/subscriptions"
    created = httpx.post(url, json=sub, headers=headers, timeout=10)
    assert created.status_code == 201, created.text
    href = created.headers["location"]
    got = httpx.get(href, headers=headers, timeout=10)
    etag = got.headers["etag"]
    assert etag == created.headers["etag"]
    changed = {**sub, "callbackReference": "http://127.0.0.1:9/other"}
    stale = httpx.put(href, json=changed, headers={**headers, "If-Match": '"INVALID_ETAG"'},
                      timeout=10)  # fmt: skip
    _problem(stale, 412)
    assert httpx.get(href, headers=headers, timeout=10).json() == got.json()
    fresh = httpx.put(href, json=changed, headers={**headers, "If-Match": etag}, timeout=10)
    assert fresh.status_code == 200 and fresh.headers["etag"] != etag
    assert httpx.get(href, headers={**headers, "If-None-Match": fresh.headers["etag"]},
                     timeout=10).status_code == 304  # fmt: skip
    _problem(httpx.delete(href, headers={**headers, "If-Match": etag}, timeout=10), 412)
    gone = httpx.delete(href, headers={**headers, "If-Match": fresh.headers["etag"]}, timeout=10)
    assert gone.status_code == 204


@pytest.mark.parametrize("trusted", [True, False])
def test_links_follow_a_trusted_proxy_only(tmp_path: Path, trusted: bool) -> None:
    proxies = "127.0.0.1/32" if trusted else "192.0.2.0/24"
    with running_adapter(tmp_path, {"RNIS_TRUSTED_PROXIES": proxies}) as adapter:
        forwarded = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-Proto": "https",
                     "X-Forwarded-Host": "mec.example:8443"}  # fmt: skip
        base = "https://mec.example:8443" if trusted else adapter.url
        created = httpx.post(adapter.url + RNI + "/subscriptions", json=CELL_CHANGE,
                             headers=forwarded, timeout=10)  # fmt: skip
        assert created.status_code == 201, created.text
        assert created.headers["location"].startswith(base + RNI + "/subscriptions/")
        assert created.json()["_links"]["self"]["href"] == created.headers["location"]
        missing = httpx.get(adapter.url + RNI + "/nothing", headers=forwarded, timeout=10)
        assert missing.json()["instance"] == base + RNI + "/nothing"
