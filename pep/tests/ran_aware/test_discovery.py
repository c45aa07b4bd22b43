"""Finding the RNIS feed through Mp1 service discovery.

The platform's answer is served by an httpx MockTransport: what is under test is our
reading of the RNIS adapter's ``MB_TOPIC_BASED`` registration
(rnis-adapter/cmd/rnis-adapter/services.go, registered by services/common/go/mp1),
the platform itself has its own conformance tests.
"""

from __future__ import annotations

import json

import httpx

from mec_common.mp1 import Mp1Client
from mec_pep.ran_aware.feed import discover

REGISTRATIONS = [
    {"serName": "rnis", "state": "ACTIVE", "transportInfo": {
        "type": "REST_HTTP", "endpoint": {"uris": ["http://10.99.1.1:8101/rni/v2"]}}},
    {"serName": "rnis", "state": "ACTIVE", "transportInfo": {
        "type": "MB_TOPIC_BASED", "protocol": "AMQP",
        "endpoint": {"uris": ["amqp://10.99.1.1:5672/%2F"]},
        "implSpecificInfo": {"exchange": "rnis-cell-a", "exchangeType": "topic"}}},
]  # fmt: skip


def platform(services: list[dict[str, object]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/oauth2/token":
            return httpx.Response(200, json={"access_token": "t", "expires_in": 300})
        assert request.url.path == "/mec_service_mgmt/v1/services"
        assert request.url.params.get_list("ser_name") == ["rnis"]
        assert request.headers["authorization"] == "Bearer t"
        return httpx.Response(200, content=json.dumps(services))

    return httpx.MockTransport(handle)


def client(services: list[dict[str, object]]) -> Mp1Client:
    return Mp1Client("http://platform", "pep-1", "id", "secret", transport=platform(services))


def test_the_amqp_transport_is_found_with_our_credentials() -> None:
    found = discover(client(REGISTRATIONS), "amqp://pep:pw@127.0.0.1:5672/%2F")
    assert found is not None
    assert found.url == "amqp://pep:pw@10.99.1.1:5672/%2F"
    assert found.exchange == "rnis-cell-a" and found.source == "mp1"


def test_nothing_registered_yet() -> None:
    assert discover(client(REGISTRATIONS[:1]), "amqp://guest:guest@127.0.0.1/%2F") is None
    assert discover(client([]), "amqp://guest:guest@127.0.0.1/%2F") is None
