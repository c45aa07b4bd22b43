"""Mp1 notifications over a websocket (MEC 009 clause 6.12a, an extension of MEC 011),
over real sockets: the platform allocates the URI, only the app's own token opens it,
notifications arrive on it, a lapsed heartbeat is one of them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from mec_platform.testing import Running, external_app, onboard

SM = "/mec_service_mgmt/v1"
AS = "/mec_app_support/v1"
SERVICE = {"serName": "ws-test", "version": "v1", "state": "ACTIVE", "serializer": "JSON",
           "transportId": "amqp-bus", "livenessInterval": 1}  # fmt: skip
WEBSOCKET = {"requestWebsocketUri": True}


async def _next(ws: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    msg = await ws.receive(timeout=20)  # hang guard
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return dict(json.loads(msg.data))


def test_availability_notifications_over_a_websocket(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    other_id, other = external_app(platform)
    sub = {"subscriptionType": "SerAvailabilityNotificationSubscription",
           "callbackReference": "http://127.0.0.1:9/never",
           "websockNotifConfig": WEBSOCKET}  # fmt: skip
    r = app.post(f"{SM}/applications/{app_id}/subscriptions", json=sub)
    assert r.status_code == 201, r.text
    created = r.json()
    href = created["_links"]["self"]["href"]
    assert "callbackReference" not in created, "given both, only the websocket is returned"
    uri = created["websockNotifConfig"]["websocketUri"]
    assert uri == href.replace("http://", "ws://") + "/websocket"
    assert (
        app.get(href.removeprefix(platform.url)).json()["websockNotifConfig"]["websocketUri"] == uri
    )

    async def session() -> None:
        async with aiohttp.ClientSession() as http:
            other_token = {"Authorization": other.headers["Authorization"]}
            for headers, status in (({}, 401), (other_token, 403)):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(uri, headers=headers)
                assert refused.value.status == status
            ws = await http.ws_connect(uri, headers={"Authorization": app.headers["Authorization"]})
            posted = await asyncio.to_thread(
                app.post, f"{SM}/applications/{app_id}/services", json=SERVICE
            )
            assert posted.status_code == 201, posted.text
            added = await _next(ws)
            assert added["notificationType"] == "SerAvailabilityNotification"
            assert added["_links"]["subscription"]["href"] == href
            assert added["serviceReferences"][0]["changeType"] == "ADDED"
            # no heartbeat: after two missed intervals the service is INACTIVE, and said so
            lapsed = await _next(ws)
            reference = lapsed["serviceReferences"][0]
            assert (reference["changeType"], reference["state"]) == ("STATE_CHANGED", "INACTIVE")
            deleted = await asyncio.to_thread(app.delete, href.removeprefix(platform.url))
            assert deleted.status_code == 204
            closing = await ws.receive(timeout=20)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), closing

    asyncio.run(session())
    assert other_id != app_id


def test_websocket_refusals_and_bad_configs(platform: Running, receiver: Any) -> None:
    """A callback subscription has no websocket (409), a missing one 404; a config that
    asks for nothing, or neither channel, is 400 and stores nothing; AppTermination
    subscriptions can ask for a websocket too."""
    onboard(platform)
    app_id, app = external_app(platform)
    base = f"{SM}/applications/{app_id}/subscriptions"
    plain = app.post(base, json={"subscriptionType": "SerAvailabilityNotificationSubscription",
                                 "callbackReference": receiver.start()})  # fmt: skip
    uri = plain.json()["_links"]["self"]["href"].replace("http://", "ws://") + "/websocket"

    async def handshakes() -> list[int]:
        statuses = []
        async with aiohttp.ClientSession() as http:
            for target in (
                uri,
                uri.replace(plain.json()["_links"]["self"]["href"].rsplit("/", 1)[1], "nosuch"),
            ):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(
                        target, headers={"Authorization": app.headers["Authorization"]}
                    )
                statuses.append(refused.value.status)
        return statuses

    assert asyncio.run(handshakes()) == [409, 404]
    before = app.get(base).json()
    for bad in ({"requestWebsocketUri": False}, {}, "yes"):
        body = {
            "subscriptionType": "SerAvailabilityNotificationSubscription",
            "websockNotifConfig": bad,
        }
        r = app.post(base, json=body)
        assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json", (
            r.text
        )
    r = app.post(base, json={"subscriptionType": "SerAvailabilityNotificationSubscription"})
    assert r.status_code == 400 and "callbackReference" in r.json()["detail"]
    assert app.get(base).json() == before
    termination = {"subscriptionType": "AppTerminationNotificationSubscription",
                   "appInstanceId": app_id, "websockNotifConfig": WEBSOCKET}  # fmt: skip
    r = app.post(f"{AS}/applications/{app_id}/subscriptions", json=termination)
    assert r.status_code == 201, r.text
    assert r.json()["websockNotifConfig"]["websocketUri"].endswith("/websocket")
