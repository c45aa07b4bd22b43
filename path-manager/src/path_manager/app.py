"""The path manager as a service: its app (REST /pm/v1, health, metrics), its Mp1
registration, and ``path-manager serve``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from mec_common.api import create_app, serve, service_access
from mec_common.auth import TokenVerifier
from mec_common.health import Health
from mec_common.logging import configure_logging
from mec_common.mp1 import register_rest_service
from path_manager.manager import PathManager
from path_manager.settings import PmSettings

SER_NAME = "path-manager"


def build_app(settings: PmSettings) -> tuple[FastAPI, PathManager]:
    from path_manager.api import router

    health = Health()
    # Its static tokens and, with a platform, the platform's JWTs (docs/api.md)
    verifier = TokenVerifier.for_service(
        settings.api_tokens, settings.platform_url, settings.state_dir, "path-manager"
    )
    manager = PathManager(settings, health)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager.start()
        registration = register_rest_service(settings, health, SER_NAME, "pm-rest", "/pm/v1")
        try:
            yield
        finally:
            if registration is not None:
                registration.stop()
            manager.close()

    app = create_app(
        title="Path manager",
        version="1.0.0",
        description="Predictive multipath control over Linux MPTCP (reactive, CDF, FPT and "
        "hybrids), fed by RNIS. See docs/path-manager.md.",
        settings=settings,
        health=health,
        token_verifier=verifier,
        lifespan=lifespan,
    )
    app.state.manager = manager
    # apps with path-manager in their AppD read; only the platform or the admin change
    app.include_router(router, dependencies=[Depends(service_access(SER_NAME))])
    return app, manager


def run_service() -> None:
    settings = PmSettings()
    configure_logging(settings.log_level, settings.log_format)
    app, _ = build_app(settings)
    serve(app, settings)
