"""The flow-RTT service registers its REST API and its AMQP feed on the real MEC platform
(in-process), and a consumer finds the feed by Mp1 discovery as the RNIS feed is found."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from mec_common.mp1 import AmqpFeed, Mp1Client, discover_amqp_feed
from mec_l4s.app import build_app
from mec_l4s.settings import FlowRttSettings
from mec_platform.testing import Running, app_credentials, make_settings, onboard, wait_until

FLOWRTT_APPD = """
appDId: flow-rtt
appName: flow-rtt
appProvider: mts
appSoftVersion: "0.1"
appDVersion: "1"
appServiceProduced:
  - {serName: flow-rtt, version: v1}
"""


def flow_rtt_services(platform: Running) -> list[dict[str, Any]]:
    r = platform.admin.get("/mec_service_mgmt/v1/services", params={"ser_name": "flow-rtt"})
    assert r.status_code == 200, r.text
    return list(r.json())


def test_the_feed_is_registered_beside_the_rest_api(tmp_path: Path) -> None:
    platform = Running(make_settings(tmp_path / "platform"))
    try:
        onboard(platform, FLOWRTT_APPD)
        settings = FlowRttSettings(
            platform_url=platform.url,
            **app_credentials(platform, "flow-rtt"),
            state_dir=tmp_path,
            instance=f"mts-flowrtt-mp1-{secrets.token_hex(3)}",
            amqp_url="amqp://observer:s3cret@127.0.0.1:5672/%2F",
            amqp_exchange="flowrtt-mp1",
        )
        with TestClient(build_app(settings)):
            wait_until(lambda: len(flow_rtt_services(platform)) == 2, 15, "both registrations")
            by_type = {s["transportInfo"]["type"]: s for s in flow_rtt_services(platform)}
            assert set(by_type) == {"REST_HTTP", "MB_TOPIC_BASED"}
            feed = by_type["MB_TOPIC_BASED"]["transportInfo"]
            # the broker without the observer's credentials, the exchange and the keys
            assert feed["endpoint"]["uris"] == ["amqp://127.0.0.1:5672/%2F"]
            assert feed["implSpecificInfo"]["exchange"] == "flowrtt-mp1"
            assert feed["implSpecificInfo"]["routingKeys"].startswith("flowrtt.v1.flow.")
            # a consumer (the PEP, the path manager) finds it with its own credentials
            client = Mp1Client.from_settings(settings)
            assert client is not None
            found = discover_amqp_feed(client, "flow-rtt", "amqp://pep:pw@127.0.0.1:5672/%2F")
            assert found == AmqpFeed("amqp://pep:pw@127.0.0.1:5672/%2F", "flowrtt-mp1")
        assert flow_rtt_services(platform) == []  # both deregistered at exit
        # with the feed off, only the REST API is registered
        with TestClient(build_app(settings.model_copy(update={"amqp_period_ms": 0}))):
            wait_until(lambda: len(flow_rtt_services(platform)) == 1, 15, "the REST API")
            (only,) = flow_rtt_services(platform)
            assert only["transportInfo"]["type"] == "REST_HTTP"
    finally:
        platform.stop()
