"""ETSI MEC 012 API: responses and notifications validate against the official schemas
(RniAPI.yaml v2.1.1), errors are ProblemDetails, subscriptions deliver to a real server."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import jsonschema_rs
import pytest
import yaml
from rnis_helpers import TOKEN, Adapter, CallbackServer, FlexranSource, wait_for

from mec_common.bus import rnis

SPEC_FILE = Path(__file__).parents[1] / "internal" / "mec012" / "spec" / "RniAPI.yaml"
# The unmodified ETSI files beside the repository (as conformance/tests/conftest.py finds them).
REPO_SPECS = Path(
    os.environ.get("MTS_SPECS_DIR") or Path(__file__).parents[2].parent / "shared/specs/etsi-mec"
)


def _str_keys(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _str_keys(e) for k, e in v.items()}
    if isinstance(v, list):
        return [_str_keys(e) for e in v]
    return v


SPEC = _str_keys(yaml.safe_load(SPEC_FILE.read_text()))


def check(schema: str, instance: Any) -> None:
    """Validate against a component schema of the official document."""
    validator = jsonschema_rs.Draft4Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": SPEC["components"]}
    )
    validator.validate(instance)


def is_problem(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    check("ProblemDetails", body)
    assert body["status"] == status and body["detail"] and body["title"]
    return dict(body)


@pytest.fixture
def ready(adapter: Adapter) -> Adapter:
    wait_for(
        lambda: len(adapter.get("/rni/v2/queries/ext/ran_meas").json()["ueMeas"]) == 4, 10, "UEs"
    )
    return adapter


def test_every_api_needs_a_token(ready: Adapter) -> None:
    for path in ("/rni/v2/queries/layer2_meas", "/rni/v2/subscriptions", "/rni/v2/nothing"):
        body = is_problem(ready.get(path, token=None), 401)
        assert body["instance"] == ready.url + path
        is_problem(ready.get(path, token="wrong"), 401)
    assert ready.get("/healthz", token=None).status_code == 200
    assert ready.get("/metrics", token=None).status_code == 200
    is_problem(ready.get("/rni/v2/nothing"), 404)


def test_layer2_meas(ready: Adapter) -> None:
    r = ready.get("/rni/v2/queries/layer2_meas")
    assert r.status_code == 200
    body = r.json()
    check("L2Meas", body)
    cells = {c["ecgi"]["cellId"]: c for c in body["cellInfo"]}
    assert set(cells) == {"0271000", "0271100"}  # eNB 10000/10001 (20-bit id) << 8 | cell 0
    for c in cells.values():
        assert c["ecgi"]["plmn"] == {"mcc": "208", "mnc": "93"}
        assert 0 <= c["dl_total_prb_usage_cell"] <= 100
    assert len(body["cellUEInfo"]) == 4
    one = ready.get("/rni/v2/queries/layer2_meas", cell_id="0271100").json()
    check("L2Meas", one)
    assert [c["ecgi"]["cellId"] for c in one["cellInfo"]] == ["0271100"]
    assert {u["associateId"]["value"] for u in one["cellUEInfo"]} == {"10.30.2.3", "10.30.2.4"}
    same = ready.get("/rni/v2/queries/layer2_meas", cell_id="10001-1").json()
    assert len(same["cellUEInfo"]) == 2, "the feed's cell key works too"
    ue = ready.get("/rni/v2/queries/layer2_meas", ue_ipv4_address="10.30.1.2").json()
    assert [u["associateId"] for u in ue["cellUEInfo"]] == [{"type": 1, "value": "10.30.1.2"}]
    assert "dl_nongbr_throughput_ue" in ue["cellUEInfo"][0]
    # timeStamp: when the source took the measurement (its date_time_ns), not the query's time
    measured = ue["timeStamp"]["seconds"] * 10**9 + ue["timeStamp"]["nanoSeconds"]
    later = ready.get("/rni/v2/queries/ext/ran_meas", ue_ipv4_address="10.30.1.2").json()
    assert measured % 1_000_000 != 0, "to the ns: date_time_ns, not date_time (ms)"
    assert measured <= later["ueMeas"][0]["source_time_ns"] <= later["ueMeas"][0]["observed_ns"]
    none = ready.get("/rni/v2/queries/layer2_meas", ue_ipv6_address="::1").json()
    assert none["cellUEInfo"] == []
    is_problem(ready.get("/rni/v2/queries/layer2_meas", ue_ipv4_address="10.30.1"), 400)
    is_problem(ready.get("/rni/v2/queries/layer2_meas", colour="blue"), 400)


def test_rab_info_and_plmn_info(tmp_path: Path, source: FlexranSource, exchange: str) -> None:
    # a static (operator) token names app instances; this adapter knows its own
    a = Adapter(tmp_path, source.url, exchange, env={"RNIS_APP_INSTANCE_ID": "app-1"}).start()
    try:
        wait_for(lambda: len(a.get("/rni/v2/queries/ext/ran_meas").json()["ueMeas"]) == 4, 10,
                 "UEs")  # fmt: skip
        _rab_info_and_plmn_info(a)
    finally:
        a.stop()


def _rab_info_and_plmn_info(ready: Adapter) -> None:
    body = ready.get("/rni/v2/queries/rab_info", app_ins_id="app-1").json()
    check("RabInfo", body)
    assert body["appInstanceId"] == "app-1"
    ues = [u for c in body["cellUserInfo"] for u in c["ueInfo"]]
    assert len(ues) == 4
    assert ues[0]["erabInfo"] == [{"erabId": 5, "erabQosParameters": {"qci": 9}}]
    assert (
        ready.get("/rni/v2/queries/rab_info", app_ins_id="app-1", qci="1").json()["cellUserInfo"]
        == []
    )
    is_problem(ready.get("/rni/v2/queries/rab_info", app_ins_id="app-1", erab_id="five"), 400)

    plmn = ready.get("/rni/v2/queries/plmn_info", app_ins_id="app-1").json()
    assert [p["appInstanceId"] for p in plmn] == ["app-1"]
    for p in plmn:
        check("PlmnInfo", p)
        assert p["plmn"] == [{"mcc": "208", "mnc": "93"}]
    is_problem(ready.get("/rni/v2/queries/plmn_info"), 400)
    is_problem(ready.get("/rni/v2/queries/plmn_info", app_ins_id="app-1,99"), 404)
    is_problem(ready.get("/rni/v2/queries/rab_info"), 400)  # a static token carries no instance


def test_extension_resource_has_the_feed_schema(ready: Adapter) -> None:
    body = ready.get("/rni/v2/queries/ext/ran_meas", imsi="208930000000003").json()
    check("TimeStamp", body["timeStamp"])
    [m] = body["ueMeas"]
    assert set(m) == set(rnis.RnisMeasurement.model_fields)
    meas = rnis.RnisMeasurement.model_validate(m)
    assert meas.cell == "10001-1" and str(meas.ue_ipv4) == "10.30.2.3"
    doc = ready.get("/openapi.json", token=None).json()
    declared = doc["components"]["schemas"]["ExtUeMeas"]["properties"]
    assert set(declared) == set(rnis.RnisMeasurement.model_fields), "extension.yaml is current"


def test_openapi_and_docs(ready: Adapter) -> None:
    doc = ready.get("/openapi.json", token=None).json()
    assert set(doc["paths"]) == {
        "/queries/layer2_meas",
        "/queries/rab_info",
        "/queries/plmn_info",
        "/queries/ext/ran_meas",
        "/subscriptions",
        "/subscriptions/{subscriptionId}",
        "/websockets/{subscriptionId}",
    }
    assert doc["paths"]["/queries/ext/ran_meas"]["get"]["x-mts-extension"] is True
    assert doc["servers"] == [{"url": f"{ready.url}/rni/v2"}]
    assert yaml.safe_load(ready.get("/openapi.yaml", token=None).text) == doc
    page = ready.get("/docs/", token=None)
    assert page.status_code == 200 and "swagger-ui-bundle.js" in page.text
    assert "https://" not in page.text, "offline: no asset from the internet"
    js = ready.get("/docs/swagger-ui-bundle.js", token=None)
    assert js.status_code == 200 and len(js.content) > 100_000


def subscribe(a: Adapter, body: dict[str, Any]) -> dict[str, Any]:
    r = a.request("POST", "/rni/v2/subscriptions", body)
    assert r.status_code == 201, r.text
    created = dict(r.json())
    check(body["subscriptionType"], created)
    assert r.headers["location"] == created["_links"]["self"]["href"]
    return created


def path_of(created: dict[str, Any]) -> str:
    return "/rni/v2/subscriptions/" + created["_links"]["self"]["href"].rsplit("/", 1)[1]


def test_subscription_crud_and_bad_requests(ready: Adapter, callbacks: CallbackServer) -> None:
    body = {
        "subscriptionType": "CellChangeSubscription",
        "callbackReference": callbacks.url + "/cc",
        "filterCriteriaAssocHo": {"associateId": [{"type": 1, "value": "10.30.1.1"}]},
    }
    created = subscribe(ready, body)
    assert created["filterCriteriaAssocHo"]["hoStatus"] == [3], "default COMPLETED, echoed"
    path = path_of(created)
    listing = ready.get("/rni/v2/subscriptions", subscription_type="cell_change").json()
    check("SubscriptionLinkList", listing)
    assert [s["href"] for s in listing["_links"]["subscription"]] == [
        created["_links"]["self"]["href"]
    ]
    assert (
        ready.get("/rni/v2/subscriptions", subscription_type="rab_est").json()["_links"][
            "subscription"
        ]
        == []
    )
    got = ready.get(path).json()
    assert got == created
    changed = ready.request("PUT", path, {**body, "callbackReference": callbacks.url + "/cc2"})
    assert changed.status_code == 200 and changed.json()["callbackReference"].endswith("/cc2")
    wrong_type = {**body, "subscriptionType": "MeasRepUeSubscription", "filterCriteriaAssocTri": {}}
    is_problem(ready.request("PUT", path, wrong_type), 422)
    assert ready.request("DELETE", path).status_code == 204
    is_problem(ready.get(path), 404)
    is_problem(ready.request("DELETE", path), 404)

    bad = [
        {**body, "callbackReference": "ftp://x"},
        {**body, "subscriptionType": "S1BearerSubscription"},
        {k: v for k, v in body.items() if k != "filterCriteriaAssocHo"},
        {**body, "expiryDeadline": {"seconds": 1000, "nanoSeconds": 0}},
        {**body, "filterCriteriaAssocHo": {"associateId": [{"type": 4, "value": "1"}]}},
        {
            "subscriptionType": "RabEstSubscription",
            "callbackReference": callbacks.url,
            "filterCriteriaQci": {},
        },
    ]
    for b in bad:
        is_problem(ready.request("POST", "/rni/v2/subscriptions", b), 400)
    r = httpx.post(
        ready.url + "/rni/v2/subscriptions",
        content=b"not json",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    is_problem(r, 400)
    assert ready.get("/rni/v2/subscriptions").json()["_links"]["subscription"] == []


def test_notifications_reach_a_real_callback_server(
    ready: Adapter, source: FlexranSource, callbacks: CallbackServer
) -> None:
    subscribe(
        ready,
        {
            "subscriptionType": "CellChangeSubscription",
            "callbackReference": callbacks.url + "/cell",
            "filterCriteriaAssocHo": {
                "ecgi": [{"plmn": {"mcc": "208", "mnc": "93"}, "cellId": "0271100"}]
            },
        },
    )
    subscribe(
        ready,
        {
            "subscriptionType": "RabRelSubscription",
            "callbackReference": callbacks.url + "/rel",
            "filterCriteriaQci": {"qci": 9, "erabId": 5},
        },
    )
    subscribe(
        ready,
        {
            "subscriptionType": "RabEstSubscription",
            "callbackReference": callbacks.url + "/est",
            "filterCriteriaQci": {"qci": 9},
        },
    )
    subscribe(
        ready,
        {
            "subscriptionType": "MeasRepUeSubscription",
            "callbackReference": callbacks.url + "/meas",
            "filterCriteriaAssocTri": {"associateId": [{"type": 1, "value": "10.30.1.2"}]},
        },
    )
    source.control("move", ue=0, cell=1)
    _, cell = callbacks.wait(lambda p, b: p == "/cell")
    check("CellChangeNotification", cell)
    assert cell["srcEcgi"]["cellId"] == "0271000" and cell["trgEcgi"][0]["cellId"] == "0271100"
    assert cell["associateId"] == [{"type": 1, "value": "10.30.2.1"}] and cell["hoStatus"] == 3

    source.control("detach", ue=3)
    _, rel = callbacks.wait(lambda p, b: p == "/rel")
    check("RabRelNotification", rel)
    assert rel["erabReleaseInfo"] == {"erabId": 5}
    assert rel["associateId"][0]["value"] == "10.30.2.4"

    source.control("attach", ue=3)
    _, est = callbacks.wait(
        lambda p, b: p == "/est" and b["associateId"][0]["value"] == "10.30.2.4"
    )
    check("RabEstNotification", est)
    assert est["erabId"] == 5 and est["erabQosParameters"] == {"qci": 9}

    source.control("rrc", ue=1, rsrp=-90)
    _, rep = callbacks.wait(lambda p, b: p == "/meas")
    check("MeasRepUeNotification", rep)
    assert rep["rsrp"] == 51 and rep["rsrq"] == 20, "TS 36.133 reported values of -90 dBm, -10 dB"
    metrics = ready.get("/metrics", token=None).text
    assert 'rnis_mec012_notifications_total{result="sent",type="CellChangeNotification"}' in metrics


def test_expiry_notification(ready: Adapter, callbacks: CallbackServer) -> None:
    deadline = int(time.time()) + 4  # not past before the subscription is made on a busy machine
    created = subscribe(
        ready,
        {
            "subscriptionType": "RabEstSubscription",
            "callbackReference": callbacks.url + "/exp",
            "filterCriteriaQci": {"qci": 9},
            "expiryDeadline": {"seconds": deadline, "nanoseconds": 0},
        },
    )
    assert created["expiryDeadline"] == {"seconds": deadline, "nanoSeconds": 0}
    _, note = callbacks.wait(lambda p, b: b.get("notificationType") == "ExpiryNotification", 15)
    check("ExpiryNotification", note)
    assert note["_links"]["self"] == created["_links"]["self"]["href"]
    assert note["expiryDeadline"]["seconds"] == deadline
    is_problem(ready.get(path_of(created)), 404)


def test_test_notification_on_request(ready: Adapter, callbacks: CallbackServer) -> None:
    """MEC 012 v2.2.1 requestTestNotification (MEC 009 clause 6.12a): a TestNotification
    linking the new subscription reaches its callback; a non-boolean value is a 400."""
    body = {"subscriptionType": "RabRelSubscription", "callbackReference": callbacks.url + "/t",
            "filterCriteriaQci": {"qci": 9, "erabId": 1},
            "requestTestNotification": True}  # fmt: skip
    created = subscribe(ready, body)
    path, note = callbacks.wait(lambda _, b: b.get("notificationType") == "TestNotification", 15)
    assert path == "/t"
    schema = yaml.safe_load((REPO_SPECS / "mec012-v2.2.1" / "RniAPI.yaml").read_text())
    jsonschema_rs.Draft4Validator(
        {"$ref": "#/components/schemas/TestNotification", "components": schema["components"]}
    ).validate(note)
    assert note["_links"]["subscription"]["href"] == created["_links"]["self"]["href"]
    is_problem(ready.request("POST", "/rni/v2/subscriptions",
                             {**body, "requestTestNotification": "yes"}), 400)  # fmt: skip


def test_subscriptions_survive_a_restart(
    tmp_path: Path, source: FlexranSource, exchange: str, callbacks: CallbackServer
) -> None:
    """Saved in RNIS_STATE_DIR/rnis-subscriptions.json (atomically, 0600); on restart the
    ones still valid come back with their ids, an expired one does not."""
    body = {
        "subscriptionType": "CellChangeSubscription",
        "callbackReference": callbacks.url + "/cc",
        "filterCriteriaAssocHo": {"associateId": [{"type": 1, "value": "10.30.1.1"}]},
    }
    # Long enough that the subscription is still valid when the first adapter saves it, even
    # on a loaded machine (at 2 s it had expired before the save at load ~50); the test then
    # waits it out before the restart.
    deadline = int(time.time()) + 10
    short = {**body, "expiryDeadline": {"seconds": deadline, "nanoSeconds": 0}}
    first = Adapter(tmp_path, source.url, exchange).start()
    try:
        kept, expiring = subscribe(first, body), subscribe(first, short)
        gone = subscribe(first, body)
        assert first.request("DELETE", path_of(gone)).status_code == 204
    finally:
        assert first.stop() == 0
    saved = tmp_path / "state" / "rnis-subscriptions.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    assert {s["id"] for s in json.loads(saved.read_text())} == {
        path_of(kept).rsplit("/", 1)[1],
        path_of(expiring).rsplit("/", 1)[1],
    }
    time.sleep(max(0.0, deadline + 0.2 - time.time()))

    second = Adapter(tmp_path, source.url, exchange).start()
    try:
        links = second.get("/rni/v2/subscriptions").json()["_links"]["subscription"]
        assert [s["href"].rsplit("/", 1)[1] for s in links] == [path_of(kept).rsplit("/", 1)[1]]
        restored = second.get(path_of(kept)).json()
        assert {k: v for k, v in restored.items() if k != "_links"} == {
            k: v for k, v in kept.items() if k != "_links"
        }
        assert second.request("DELETE", path_of(kept)).status_code == 204
    finally:
        assert second.stop() == 0
    assert json.loads(saved.read_text()) == []

    saved.write_text("{not json")
    broken = Adapter(tmp_path, source.url, exchange)
    with pytest.raises(AssertionError, match=r"rnis-subscriptions\.json"):
        broken.start()  # refuses to start rather than overwrite the file later
    assert saved.read_text() == "{not json"


def check_v221(schema: str, instance: Any) -> None:
    """Validate against a component schema of the official v2.2.1 document."""
    spec = _str_keys(yaml.safe_load((REPO_SPECS / "mec012-v2.2.1" / "RniAPI.yaml").read_text()))
    jsonschema_rs.Draft4Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": spec["components"]}
    ).validate(instance)


async def _next_notification(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    """The next websocket message that is a notification of kind (hang guard: 20 s)."""
    while True:
        msg = await ws.receive(timeout=20)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        body = json.loads(msg.data)
        if body["notificationType"] == kind:
            return dict(body)


def test_websocket_notifications(ready: Adapter, source: FlexranSource) -> None:
    """MEC 012 v2.2.1 websockNotifConfig (MEC 009 6.12a) over a real socket: the RNIS
    allocates the websocketUri and drops the callbackReference it was also given; opening it
    needs the token; the TestNotification asked for arrives once it is open, then a cell
    change of the emulated source; deleting the subscription closes the socket."""
    body = {
        "subscriptionType": "CellChangeSubscription",
        "callbackReference": "http://127.0.0.1:9/never",
        "websockNotifConfig": {"requestWebsocketUri": True},
        "requestTestNotification": True,
        "filterCriteriaAssocHo": {"associateId": [{"type": 1, "value": "10.30.2.1"}]},
    }
    r = ready.request("POST", "/rni/v2/subscriptions", body)
    assert r.status_code == 201, r.text
    created = r.json()
    check_v221("CellChangeSubscription", created)
    assert "callbackReference" not in created, "one alternative is chosen and returned"
    uri = created["websockNotifConfig"]["websocketUri"]
    assert (
        uri
        == ready.url.replace("http://", "ws://")
        + "/rni/v2/websockets/"
        + path_of(created).rsplit("/", 1)[1]
    )
    assert created["websockNotifConfig"]["requestWebsocketUri"] is True

    async def session() -> None:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(uri)
            assert refused.value.status == 401
            ws = await http.ws_connect(uri, headers={"Authorization": f"Bearer {TOKEN}"})
            test = await _next_notification(ws, "TestNotification")
            check_v221("TestNotification", test)
            assert test["_links"]["subscription"]["href"] == created["_links"]["self"]["href"]
            await asyncio.to_thread(source.control, "move", ue=0, cell=1)
            cell = await _next_notification(ws, "CellChangeNotification")
            check("CellChangeNotification", cell)
            assert cell["associateId"] == [{"type": 1, "value": "10.30.2.1"}]
            assert cell["trgEcgi"][0]["cellId"] == "0271100"
            deleted = await asyncio.to_thread(ready.request, "DELETE", path_of(created))
            assert deleted.status_code == 204
            closing = await ws.receive(timeout=20)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), closing

    asyncio.run(session())
    metrics = ready.get("/metrics", token=None).text
    assert 'rnis_mec012_notifications_total{result="sent",type="CellChangeNotification"}' in metrics


def test_websocket_refusals_and_bad_configs(ready: Adapter, callbacks: CallbackServer) -> None:
    """No websocket for a callback subscription (409) or an unknown one (404); a plain GET
    is not an upgrade (400); a websockNotifConfig that asks for nothing, or not an object,
    is 400 and stores nothing."""
    plain = subscribe(
        ready,
        {
            "subscriptionType": "RabEstSubscription",
            "callbackReference": callbacks.url + "/est",
            "filterCriteriaQci": {"qci": 9},
        },
    )
    sub_id = path_of(plain).rsplit("/", 1)[1]
    is_problem(ready.get(f"/rni/v2/websockets/{sub_id}"), 409)
    is_problem(ready.get("/rni/v2/websockets/nosuchid"), 404)
    ws_body = {
        "subscriptionType": "RabEstSubscription",
        "websockNotifConfig": {"requestWebsocketUri": True},
        "filterCriteriaQci": {"qci": 9},
    }
    ws_sub = ready.request("POST", "/rni/v2/subscriptions", ws_body).json()
    is_problem(ready.get(path_of(ws_sub).replace("/subscriptions/", "/websockets/")), 400)
    before = ready.get("/rni/v2/subscriptions").json()
    for bad in ({"requestWebsocketUri": False}, {}, "yes", {"requestWebsocketUri": "yes"}):
        is_problem(
            ready.request("POST", "/rni/v2/subscriptions", {**ws_body, "websockNotifConfig": bad}),
            400,
        )
    no_callback = {k: v for k, v in ws_body.items() if k != "websockNotifConfig"}
    is_problem(ready.request("POST", "/rni/v2/subscriptions", no_callback), 400)
    assert ready.get("/rni/v2/subscriptions").json() == before


def test_rab_modification_on_a_qci_change(
    ready: Adapter, source: FlexranSource, callbacks: CallbackServer
) -> None:
    """A change of an established bearer's QCI at the source is a RabModNotification with
    the new QCI (MEC 012 RabModSubscription: filter on the new QCI and the E-RAB)."""
    subscribe(
        ready,
        {
            "subscriptionType": "RabModSubscription",
            "callbackReference": callbacks.url + "/mod",
            "filterCriteriaQci": {"qci": 7, "erabId": 5},
        },
    )
    source.control("qci", ue=1, qci=7)
    _, mod = callbacks.wait(lambda p, b: p == "/mod")
    check("RabModNotification", mod)
    assert mod["erabId"] == 5 and mod["erabQosParameters"] == {"qci": 7}
    assert mod["associateId"] == [{"type": 1, "value": "10.30.1.2"}]


@pytest.mark.parametrize(
    ("kind", "filter_name"),
    [
        ("NrMeasRepUeSubscription", "filterCriteriaNrMrs"),
        ("MeasTaSubscription", "filterCriteriaAssoc"),
        ("CaReconfSubscription", "filterCriteriaAssoc"),
        ("S1BearerSubscription", "S1BearerSubscriptionCriteria"),
    ],
)
def test_types_no_source_can_trigger_are_refused(
    ready: Adapter, callbacks: CallbackServer, kind: str, filter_name: str
) -> None:
    """Refused with a ProblemDetails saying why (accepted, they would never fire)."""
    body = {"subscriptionType": kind, "callbackReference": callbacks.url + "/x", filter_name: {}}
    problem = is_problem(ready.request("POST", "/rni/v2/subscriptions", body), 400)
    assert f"{kind} is not supported: no source reports" in problem["detail"]
    assert ready.get("/rni/v2/subscriptions").json()["_links"]["subscription"] == []


def test_expiry_over_a_websocket(ready: Adapter) -> None:
    """The ExpiryNotification of a websocket subscription goes over its websocket, which
    then closes; the subscription is gone."""
    deadline = int(time.time()) + 4  # not past before the subscription is made on a busy machine
    body = {
        "subscriptionType": "RabEstSubscription",
        "websockNotifConfig": {"requestWebsocketUri": True},
        "filterCriteriaQci": {"qci": 9},
        "expiryDeadline": {"seconds": deadline, "nanoSeconds": 0},
    }
    created = ready.request("POST", "/rni/v2/subscriptions", body).json()

    async def session() -> None:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(
                created["websockNotifConfig"]["websocketUri"],
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            note = await _next_notification(ws, "ExpiryNotification")
            check("ExpiryNotification", note)
            assert note["expiryDeadline"]["seconds"] == deadline
            closing = await ws.receive(timeout=20)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), closing

    asyncio.run(session())
    is_problem(ready.get(path_of(created)), 404)
