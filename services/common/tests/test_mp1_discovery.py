"""Finding an AMQP feed through Mp1 service discovery (mec_common.mp1.resolve_amqp_feed,
which every Python service uses), with the RNIS adapter's registration.

The platform's answer is served by an httpx MockTransport: what is under test is our
reading of the RNIS adapter's ``MB_TOPIC_BASED`` registration
(rnis-adapter/cmd/rnis-adapter/services.go, registered by services/common/go/mp1),
the platform itself has its own conformance tests.
"""

from __future__ import annotations

import json
import threading

import httpx

from mec_common.mp1 import AmqpFeed, Mp1Client, resolve_amqp_feed

CONFIGURED = AmqpFeed("amqp://pep:pw@127.0.0.1:5672/%2F", "rnis")

REGISTRATIONS = [
    {"serName": "rnis", "state": "ACTIVE", "transportInfo": {
        "type": "REST_HTTP", "endpoint": {"uris": ["http://10.99.1.1:8101/rni/v2"]}}},
    {"serName": "rnis", "state": "ACTIVE", "transportInfo": {
        "type": "MB_TOPIC_BASED", "protocol": "AMQP",
        "endpoint": {"uris": ["amqp://10.99.1.1:5672/%2F"]},
        "implSpecificInfo": {"exchange": "rnis-cell-a", "exchangeType": "topic"}}},
]  # fmt: skip


def platform(answers: list[list[dict[str, object]]]) -> httpx.MockTransport:
    """A platform answering each discovery with the next of ``answers`` (the last stays)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/oauth2/token":
            return httpx.Response(200, json={"access_token": "t", "expires_in": 300})
        assert request.url.path == "/mec_service_mgmt/v1/services"
        assert request.url.params.get_list("ser_name") == ["rnis"]
        assert request.headers["authorization"] == "Bearer t"
        services = answers.pop(0) if len(answers) > 1 else answers[0]
        return httpx.Response(200, content=json.dumps(services))

    return httpx.MockTransport(handle)


def client(*answers: list[dict[str, object]]) -> Mp1Client:
    return Mp1Client("http://platform", "pep-1", "id", "secret", transport=platform(list(answers)))


def resolve(mp1: Mp1Client | None, **kw: object) -> tuple[AmqpFeed | None, list[str]]:
    reasons: list[str] = []
    found = resolve_amqp_feed(mp1, "rnis", CONFIGURED, threading.Event(), report=reasons.append,
                              **kw)  # type: ignore[arg-type]  # fmt: skip
    return found, reasons


def test_the_amqp_transport_is_found_with_our_credentials() -> None:
    found, reasons = resolve(client(REGISTRATIONS))
    assert found == AmqpFeed("amqp://pep:pw@10.99.1.1:5672/%2F", "rnis-cell-a")
    assert reasons == []


def test_discovery_is_retried_until_the_service_registers() -> None:
    found, reasons = resolve(client([], REGISTRATIONS[:1], REGISTRATIONS))
    assert found is not None and found.exchange == "rnis-cell-a"
    assert reasons == ["rnis not registered on the platform yet"] * 2


def test_a_failing_platform_is_retried_and_reported() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        if request.url.path == "/oauth2/token":
            return httpx.Response(200, json={"access_token": "t", "expires_in": 300})
        calls += 1
        if calls == 1:
            return httpx.Response(503, json={"title": "down", "status": 503})
        return httpx.Response(200, content=json.dumps(REGISTRATIONS))

    mp1 = Mp1Client(
        "http://platform", "pep-1", "id", "secret", transport=httpx.MockTransport(handle)
    )
    found, reasons = resolve(mp1)
    assert found is not None and len(reasons) == 1 and "failed" in reasons[0]


def test_without_a_platform_or_with_explicit_settings_the_settings_win() -> None:
    assert resolve(None) == (CONFIGURED, [])
    assert resolve(client([]), explicit=frozenset({"url", "exchange"})) == (CONFIGURED, [])
    found, _ = resolve(client(REGISTRATIONS), explicit=frozenset({"exchange"}))
    assert found == AmqpFeed("amqp://pep:pw@10.99.1.1:5672/%2F", "rnis")


def test_stop_ends_the_wait() -> None:
    stop = threading.Event()
    stop.set()
    assert resolve_amqp_feed(client([]), "rnis", CONFIGURED, stop) is None
