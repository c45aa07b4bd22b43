"""The app of a MEC service that serves a REST API, built one way for every such service
(the path manager, the flow-RTT observer).

``rest_service_app`` gives the suite's REST conventions (``mec_common.api.create_app``),
the service's bearer-token verifier (static tokens and, with a platform, its JWTs), the
service's component started and closed with the app, and its Mp1 registration while it
runs. The router reads the component as ``request.app.state.service``. ``run_service`` is
the ``serve`` command of such a service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from fastapi import APIRouter, Depends, FastAPI

from mec_common.api import create_app, serve, service_access
from mec_common.auth import TokenVerifier
from mec_common.config import ServiceSettings
from mec_common.health import Health
from mec_common.logging import configure_logging
from mec_common.mp1 import register_rest_service


class Component(Protocol):
    """What the app runs: started when the app starts, closed when it stops."""

    def start(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RestService:
    """How a service presents itself on the platform and in its OpenAPI document."""

    name: str  # its own name: no token configured, it generates one into <state dir>/<name>.token
    ser_name: str  # Mp1 serName; apps whose AppD lists it may read the API
    transport_id: str  # the Mp1 transport of its REST API
    base_path: str  # of its REST API, e.g. /pm/v1
    title: str
    description: str
    version: str = "1.0.0"
    # the Mp1 transports it offers besides the REST API (e.g. an AMQP feed), from its
    # settings: registered under the same serName
    more_transports: Callable[[Any], list[dict[str, Any]]] | None = None


def rest_service_app(
    service: RestService,
    settings: ServiceSettings,
    health: Health,
    component: Component,
    router: APIRouter,
) -> FastAPI:
    verifier = TokenVerifier.for_service(
        settings.api_tokens, settings.platform_url, settings.state_dir, service.name
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        component.start()
        more = service.more_transports(settings) if service.more_transports else []
        registration = register_rest_service(
            settings, health, service.ser_name, service.transport_id, service.base_path, more
        )
        try:
            yield
        finally:
            if registration is not None:
                registration.stop()
            component.close()

    app = create_app(
        title=service.title,
        version=service.version,
        description=service.description,
        settings=settings,
        health=health,
        token_verifier=verifier,
        lifespan=lifespan,
    )
    app.state.service = component
    # apps with the service in their AppD read; only the platform or the admin change
    app.include_router(router, dependencies=[Depends(service_access(service.ser_name))])
    return app


S = TypeVar("S", bound=ServiceSettings)


def run_service(settings: S, build_app: Callable[[S], FastAPI]) -> None:
    """``<service> serve``: log as configured, then serve the app until SIGTERM/SIGINT."""
    configure_logging(settings.log_level, settings.log_format)
    serve(build_app(settings), settings)
