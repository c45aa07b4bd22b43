"""The flow-RTT observer as a MEC service (REST /flowrtt/v1, Mp1 service ``flow-rtt``) and
``flowrtt serve``."""

from __future__ import annotations

import argparse
from typing import Any

from fastapi import FastAPI

from mec_common.bus.flowrtt import flow_routing_key
from mec_common.health import Health
from mec_common.mp1 import amqp_feed_transport
from mec_common.rest_service import RestService, rest_service_app, run_service
from mec_l4s.service import FlowRttService
from mec_l4s.settings import FlowRttSettings


def feed_transports(settings: FlowRttSettings) -> list[dict[str, Any]]:
    """The per-flow RTT feed's Mp1 transport (``MB_TOPIC_BASED``), unless the feed is off."""
    if settings.amqp_period_ms == 0:
        return []
    return [
        amqp_feed_transport(
            "flowrtt-amqp",
            "Flow RTT feed (AMQP topic exchange)",
            settings.amqp_url,
            settings.amqp_exchange,
            routing_keys=flow_routing_key("<client ipv4>", "<server ipv4>"),
            schema="mec_common.bus.flowrtt.FlowRttSummary v1",
        )
    ]


FLOW_RTT = RestService(
    name="flowrtt",
    ser_name="flow-rtt",
    transport_id="flowrtt-rest",
    base_path="/flowrtt/v1",
    title="Flow RTT",
    description="Passive per-flow RTT from the spin and delay bits of TCP (research 001, "
    "marked by the endpoints' BPF programs), read at the MEC host. See docs/l4s.md.",
    more_transports=feed_transports,
)


def build_app(settings: FlowRttSettings) -> FastAPI:
    from mec_l4s.api import router

    health = Health()
    return rest_service_app(FLOW_RTT, settings, health, FlowRttService(settings, health), router)


def main() -> None:
    """``flowrtt serve``: the service, configured by FLOWRTT_* variables (docs/configuration.md)."""
    parser = argparse.ArgumentParser(
        prog="flowrtt", description="Passive per-flow RTT (spin/delay bit) at the MEC host."
    )
    parser.add_argument("command", choices=["serve"], help="run the service")
    parser.parse_args()
    run_service(FlowRttSettings(), build_app)
