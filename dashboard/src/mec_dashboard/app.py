"""``mec-dashboard serve``: the dashboard as a MEC app of its own.

With a platform (``DASHBOARD_PLATFORM_URL`` and the Mp1 credentials the platform gives
every app), it registers the service ``dashboard`` on Mp1, finds the RNIS, PEP and path
manager APIs through Mp1 discovery and reads them with its own platform token; viewers
sign in with platform-issued tokens. Standalone, the URLs and a token are configured.
"""

from __future__ import annotations

import argparse
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from mec_common.api import create_app, serve
from mec_common.auth import TokenVerifier
from mec_common.health import Health
from mec_common.logging import configure_logging, get_logger
from mec_common.mp1 import MecAppRegistration, Mp1Client
from mec_dashboard import __version__
from mec_dashboard.api import routers
from mec_dashboard.collector import Collector
from mec_dashboard.config import DashboardSettings

log = get_logger(__name__)

WEB_DIR = Path(__file__).parent / "page"

DESCRIPTION = """Live web dashboard of the MEC host: radio per cell and UE (RNIS), PEP flows
and MELD/RAPID decisions, path manager paths and decisions, platform apps and services, and
the health of every component. Open `/` in a browser and sign in with a suite token; the
API below is what the page uses. Everything under `/dashboard/v1` but sign-in needs a token
(deny by default). See docs/dashboard.md."""


def build_app(settings: DashboardSettings) -> FastAPI:
    library = settings.assets_dir / "uPlot.iife.min.js"
    if not library.is_file():
        raise SystemExit(f"{library} is missing: `make build` bundles the charting library")
    health = Health()
    verifier = TokenVerifier.for_service(
        settings.api_tokens, settings.platform_url, settings.state_dir, "dashboard"
    )
    mp1 = Mp1Client.from_settings(settings)
    public_url = settings.public_url or f"http://{socket.getfqdn()}:{settings.http_port}"

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        collector = Collector(settings, mp1)
        app.state.collector = collector
        collector.start()
        registration = _register(mp1, public_url, health)
        try:
            yield
        finally:
            if registration is not None:
                registration.stop()
            await collector.close()
            if mp1 is not None:
                mp1.close()

    app = create_app(
        title="MEC Transport Suite — dashboard",
        version=__version__,
        description=DESCRIPTION,
        settings=settings,
        health=health,
        token_verifier=verifier,
        public_url=public_url,
        lifespan=lifespan,
    )
    app.state.web_dir = WEB_DIR
    app.state.assets_dir = settings.assets_dir
    for router in routers:
        app.include_router(router)
    return app


def service_info(public_url: str) -> dict[str, Any]:
    """The dashboard as a MEC service (ETSI MEC 011 ServiceInfo): its page's URL."""
    return {
        "serName": "dashboard",
        "version": "v1",
        "state": "ACTIVE",
        "serializer": "JSON",
        "transportInfo": {
            "id": "dashboard-http", "name": "REST", "type": "REST_HTTP", "protocol": "HTTP",
            "version": "1.1", "endpoint": {"uris": [public_url.rstrip("/") + "/"]},
            "security": {},
        },
        "scopeOfLocality": "MEC_HOST",
    }  # fmt: skip


def _register(mp1: Mp1Client | None, public_url: str, health: Health) -> MecAppRegistration | None:
    if mp1 is None:
        return None
    registration = MecAppRegistration(mp1, [service_info(public_url)], health=health)
    registration.start()
    return registration


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mec-dashboard", description=DESCRIPTION.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "serve", help="run the dashboard (DASHBOARD_* settings, docs/configuration.md)"
    )
    parser.parse_args(argv)
    settings = DashboardSettings()
    configure_logging(settings.log_level, settings.log_format)
    # httpx logs every request at INFO: the collector's several reads per sample period
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))
    serve(build_app(settings), settings)


if __name__ == "__main__":
    main()
