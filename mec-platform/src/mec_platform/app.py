"""The platform process: Mp1, the platform manager and OAuth2 in one FastAPI app."""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from fastapi import FastAPI, Request, Response
from sqlalchemy.exc import DBAPIError

from mec_common.api import create_app, problem_response
from mec_common.config import private_dir
from mec_common.health import Health
from mec_common.logging import get_logger
from mec_common.tproxy import Runner
from mec_platform import __version__
from mec_platform.backends import make_backend
from mec_platform.config import PlatformSettings
from mec_platform.dataplane import DataplaneAgent
from mec_platform.db import Database
from mec_platform.manager import Manager
from mec_platform.manager_api import LoginAdmission, lcm_router, oauth_router, pkgm_router
from mec_platform.models import TransportInfo
from mec_platform.mp1_api import app_support_router, service_mgmt_router
from mec_platform.notifier import Notifier
from mec_platform.registrations import Registrations
from mec_platform.registry import APP_SUPPORT, SERVICE_MGMT, Registry
from mec_platform.security import Authority, LoginLimiter
from mec_platform.websockets import websocket_route

log = get_logger(__name__)
HASHING_NICENESS = 10  # above the loop's: CFS weight 110 against 1024 (at nice 0)


@dataclass
class Platform:
    app: FastAPI
    db: Database
    authority: Authority
    registry: Registry
    manager: Manager
    notifier: Notifier
    admin_secret: str
    _stop: threading.Event

    def close(self) -> None:
        self._stop.set()
        # queued secret checks (a login flood) are dropped, not run before the process ends
        self.app.state.hashing.shutdown(wait=False, cancel_futures=True)
        self.manager.join(timeout=5)
        self.notifier.close()
        self.db.close()


def transports(settings: PlatformSettings) -> list[TransportInfo]:
    """What the platform offers: its REST API (OAuth2) and the AMQP bus (topic exchange)."""
    base = settings.base_url()
    oauth = {"oAuth2Info": {"grantTypes": ["OAUTH2_CLIENT_CREDENTIALS"],
                            "tokenEndpoint": f"{base}/oauth2/token"}}  # fmt: skip
    amqp = urlsplit(settings.amqp_url)
    host = amqp.hostname or "127.0.0.1"
    amqp_uri = urlunsplit((amqp.scheme, f"{host}:{amqp.port or 5672}", amqp.path, "", ""))
    return [
        TransportInfo.model_validate({
            "id": "rest-http", "name": "REST", "type": "REST_HTTP", "protocol": "HTTP",
            "version": "1.1", "endpoint": {"uris": [base]}, "security": oauth,
            "description": "REST over HTTP with OAuth2 client-credentials tokens"}),
        TransportInfo.model_validate({
            "id": "amqp-bus", "name": "AMQP", "type": "MB_TOPIC_BASED", "protocol": "AMQP",
            "version": "0.9.1", "endpoint": {"uris": [amqp_uri]}, "security": {},
            "description": "the message bus (RabbitMQ); credentials are not advertised",
            "implSpecificInfo": {"exchange": settings.amqp_exchange, "exchangeType": "topic"}}),
    ]  # fmt: skip


def build_platform(settings: PlatformSettings) -> Platform:
    health = Health()
    private_dir(settings.state_dir)  # the default SQLite (with the signing key) lives there
    db = Database(settings.db_url())
    health.set("database", True, db.engine.url.get_backend_name())
    authority = Authority(db, settings.api_tokens, settings.token_ttl_s)
    admin_secret = authority.ensure_admin(
        settings.admin_client_id, settings.admin_client_secret, settings.state_dir
    )
    notifier = Notifier(authority.notification_token, attempts=settings.notify_attempts,
                        backoff_s=settings.notify_backoff_s, timeout_s=settings.notify_timeout_s,
                        per_receiver=settings.notify_per_receiver)  # fmt: skip
    base = settings.base_url()
    if not settings.public_url and settings.http_host in ("0.0.0.0", "::", ""):
        log.warning("PLATFORM_PUBLIC_URL is unset: links say " + base + ", which apps in "
                    "other namespaces, containers or Pods cannot follow")  # fmt: skip
    registry = Registry(db, notifier, base, transports(settings), settings.callback_networks,
                        settings.max_subscriptions_per_app)  # fmt: skip
    dataplane = DataplaneAgent(Runner(settings.dataplane_netns)) if settings.dataplane else None
    manager = Manager(db, registry, authority, make_backend(settings), dataplane, base,
                      settings.graceful_timeout_s)  # fmt: skip
    manager.recover()

    app = create_app(
        title="MEC platform",
        version=__version__,
        description="ETSI MEC 011 Mp1 (service management, app support), a MEC 010-2 style "
        "platform manager (app packages, app lifecycle) and an OAuth2 token endpoint.",
        settings=settings,
        health=health,
        token_verifier=authority.verifier,
        public_url=base,
    )
    app.state.registry, app.state.manager = registry, manager
    app.state.registrations = Registrations(db, base)

    async def database_down(request: Request, exc: Exception) -> Response:
        health.set("database", False, f"{type(exc).__name__}")
        return problem_response(request, 503, "the database is unavailable; retry later",
                                headers={"Retry-After": "5"})  # fmt: skip

    app.add_exception_handler(DBAPIError, database_down)
    hashing = ThreadPoolExecutor(max_workers=2, thread_name_prefix="oauth-scrypt",
                                 initializer=_below_the_event_loop)  # fmt: skip
    app.state.hashing = hashing
    for router in (service_mgmt_router(), app_support_router(), pkgm_router(), lcm_router(),
                   oauth_router(authority, hashing)):  # fmt: skip
        app.include_router(router)
    # websocket delivery of Mp1 notifications (mec_platform.websockets): Starlette routes,
    # as they are no REST operations (and no OpenAPI can describe them)
    app.router.routes.extend(websocket_route(api) for api in (SERVICE_MGMT, APP_SUPPORT))
    app.state.websockets = registry.websockets
    # the outermost middleware: refused logins cost the event loop the least
    app.add_middleware(LoginAdmission, limiter=LoginLimiter(
        settings.login_rate_per_s, settings.login_burst, settings.login_max_pending))  # fmt: skip

    stop = threading.Event()
    threading.Thread(target=_liveness_loop,
                     args=(registry, health, settings.liveness_check_s, stop),
                     name="liveness", daemon=True).start()  # fmt: skip
    threading.Thread(target=_supervision_loop, args=(manager, settings.supervision_s, stop),
                     name="supervision", daemon=True).start()  # fmt: skip
    return Platform(app, db, authority, registry, manager, notifier, admin_secret, stop)


def _below_the_event_loop() -> None:
    """Secret checks (scrypt, ~50 ms of CPU each) run niced: on a busy host the event loop
    (every other request, /healthz) gets the CPU first. Linux nices a thread by its id."""
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):
        niceness = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(19, niceness + HASHING_NICENESS))


def _liveness_loop(registry: Registry, health: Health, period: float, stop: threading.Event
                   ) -> None:  # fmt: skip
    """Expire silent services; this periodic query also tells /healthz about the database."""
    backend = registry.db.engine.url.get_backend_name()
    while not stop.wait(period):
        try:
            registry.expire_silent_services()
            health.set("database", True, backend)
        except Exception as exc:  # keep checking; the database may come back
            health.set("database", False, f"{backend}: {type(exc).__name__}")
            log.error("liveness check failed", error=str(exc))


def _supervision_loop(manager: Manager, period: float, stop: threading.Event) -> None:
    """Notice apps that died (killed, crashed, container or release gone) within seconds."""
    while not stop.wait(period):
        try:
            manager.supervise()
        except Exception as exc:  # keep supervising; the database may come back
            log.error("supervision failed", error=str(exc))
