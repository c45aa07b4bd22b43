"""Notification delivery is per receiver (issue 20): receivers that never answer delay
only themselves, and an app's subscriptions are capped. `make bench-notify` measures the
same with 1,000 stalled receivers (docs/results.md)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.testing import Receiver, Running, external_app, make_settings, onboard

SM = "/mec_service_mgmt/v1"
SUBSCRIPTION = "SerAvailabilityNotificationSubscription"
STALLED = 300  # more than the old shared pool's 256 connections


@pytest.fixture
def stalled() -> Iterator[list[str]]:
    """Callback URLs of receivers that accept connections and never answer."""
    sockets = []
    for _ in range(STALLED):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel completes the handshakes; nobody reads the requests
        sockets.append(s)
    yield [f"http://127.0.0.1:{s.getsockname()[1]}/notify" for s in sockets]
    for s in sockets:
        s.close()


def test_stalled_receivers_delay_only_themselves(
    tmp_path: Path, stalled: list[str], receiver: Receiver
) -> None:
    # Each stalled delivery holds for 120 s: if the healthy one waited behind them, it would
    # come minutes late; the guard below is generous for a busy machine.
    platform = Running(make_settings(tmp_path, notify_timeout_s=120, notify_attempts=1,
                                     max_subscriptions_per_app=STALLED + 1))  # fmt: skip
    try:
        onboard(platform)
        app_id, app = external_app(platform)
        for url in [*stalled, receiver.start()]:  # the healthy receiver subscribes last
            body = {"subscriptionType": SUBSCRIPTION, "callbackReference": url}
            r = platform.admin.post(f"{SM}/applications/{app_id}/subscriptions", json=body)
            assert r.status_code == 201, r.text
        service = {"serName": "fanout", "version": "v1", "state": "ACTIVE",
                   "serializer": "JSON", "transportId": "rest-http"}  # fmt: skip
        started = time.monotonic()
        assert app.post(f"{SM}/applications/{app_id}/services", json=service).status_code == 201
        got = receiver.wait_for(1, timeout=60)
        elapsed = time.monotonic() - started
        assert got and got[0]["serviceReferences"][0]["serName"] == "fanout"
        assert elapsed < 60
        print(f"healthy receiver notified after {elapsed * 1000:.0f} ms "
              f"beside {STALLED} stalled receivers")  # fmt: skip
    finally:
        platform.stop()


def test_subscriptions_per_app_are_capped(tmp_path: Path) -> None:
    platform = Running(make_settings(tmp_path, max_subscriptions_per_app=2))
    try:
        onboard(platform)
        app_id, app = external_app(platform)
        body = {"subscriptionType": SUBSCRIPTION, "callbackReference": "http://127.0.0.1:9/cb"}
        url = f"{SM}/applications/{app_id}/subscriptions"
        first = app.post(url, json=body)
        assert first.status_code == 201
        term = {"subscriptionType": "AppTerminationNotificationSubscription",
                "callbackReference": "http://127.0.0.1:9/t", "appInstanceId": app_id}  # fmt: skip
        r = app.post(f"/mec_app_support/v1/applications/{app_id}/subscriptions", json=term)
        assert r.status_code == 201, r.text  # both APIs count
        r = app.post(url, json=body)
        assert r.status_code == 403 and "at most 2" in r.json()["detail"], r.text
        assert app.delete(first.headers["location"]).status_code == 204
        assert app.post(url, json=body).status_code == 201
    finally:
        platform.stop()
