"""The flow-RTT observer as a MEC service: its app (REST /flowrtt/v1, health, metrics),
its Mp1 registration, and ``flowrtt serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from mec_common.api import create_app, serve, service_access
from mec_common.auth import TokenVerifier
from mec_common.health import Health
from mec_common.logging import configure_logging
from mec_common.mp1 import register_rest_service
from mec_l4s.service import FlowRttService
from mec_l4s.settings import FlowRttSettings

SER_NAME = "flow-rtt"


def build_app(settings: FlowRttSettings) -> FastAPI:
    from mec_l4s.api import router

    health = Health()
    verifier = TokenVerifier.for_service(
        settings.api_tokens, settings.platform_url, settings.state_dir, "flowrtt"
    )
    service = FlowRttService(settings, health)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        registration = register_rest_service(
            settings, health, SER_NAME, "flowrtt-rest", "/flowrtt/v1"
        )
        try:
            yield
        finally:
            if registration is not None:
                registration.stop()
            service.close()

    app = create_app(
        title="Flow RTT",
        version="1.0.0",
        description="Passive per-flow RTT from the spin and delay bits of TCP (research 001, "
        "marked by the endpoints' BPF programs), read at the MEC host. See docs/l4s.md.",
        settings=settings,
        health=health,
        token_verifier=verifier,
        lifespan=lifespan,
    )
    app.state.flowrtt = service
    # apps with flow-rtt in their AppD read; there is nothing to change
    app.include_router(router, dependencies=[Depends(service_access(SER_NAME))])
    return app


def main() -> None:
    """``flowrtt serve``: the service, configured by FLOWRTT_* variables (docs/configuration.md)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="flowrtt", description="Passive per-flow RTT (spin/delay bit) at the MEC host."
    )
    parser.add_argument("command", choices=["serve"], help="run the service")
    parser.parse_args()
    settings = FlowRttSettings()
    configure_logging(settings.log_level, settings.log_format)
    serve(build_app(settings), settings)
