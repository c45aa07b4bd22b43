"""Mp1 (ETSI GS MEC 011) client: how our services live on the MEC platform.

``Mp1Client`` speaks the two Mp1 APIs (``/mec_service_mgmt/v1``, ``/mec_app_support/v1``)
with an OAuth2 client-credentials token it fetches and renews itself.

``MecAppRegistration`` runs the lifecycle of a MEC app in a background thread, retrying
with exponential backoff while the platform is unreachable (shown in ``Health`` as
``platform``)::

    confirm_ready -> register services -> subscribe to app termination -> (liveness heartbeats)
    ... on termination notification or shutdown: deregister services -> confirm_termination

A service mounts ``termination_router(registration, verifier)`` so the platform can deliver
the AppTerminationNotification at an unguessable path (``callback_url`` plus a secret
drawn at start), authenticated with a platform token bound to this subscription, and
calls ``registration.start()``/``stop()`` in its FastAPI lifespan (not after
``uvicorn.run``: uvicorn re-raises SIGTERM once it has shut down, so code after it never
runs). ``on_termination`` typically sets ``server.should_exit``.
See ``mec-platform/tests/sample_app.py`` for a complete app.

Discovery helpers find another service and its transports; ``discover_amqp_feed`` finds
a topic-based (AMQP) feed such as the RNIS one and keeps our own broker credentials::

    feed = discover_amqp_feed(client, "rnis", settings.amqp_url)  # None: not registered yet
    consumer = AmqpConsumer(feed.url, feed.exchange, ...)
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from fastapi import APIRouter, Request, Response
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool

from mec_common.api import ProblemError
from mec_common.auth import TokenVerifier
from mec_common.config import ServiceSettings
from mec_common.health import Health
from mec_common.logging import get_logger

log = get_logger(__name__)

SERVICE_MGMT = "/mec_service_mgmt/v1"
APP_SUPPORT = "/mec_app_support/v1"
TERMINATION_SUBSCRIPTION = "AppTerminationNotificationSubscription"


class Mp1Error(Exception):
    """The platform answered with an error (``status``) or could not be reached (0)."""

    def __init__(self, status: int, detail: str) -> None:
        what = f"Mp1 error {status}" if status else "Mp1 unreachable"
        super().__init__(f"{what}: {detail}")
        self.status, self.detail = status, detail


class Mp1Client:
    """Synchronous, thread-safe Mp1 client for one app instance."""

    def __init__(
        self,
        platform_url: str,
        app_instance_id: str,
        client_id: str,
        client_secret: str,
        *,
        timeout: float = 5.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.platform_url = platform_url.rstrip("/")
        self.app_instance_id = app_instance_id
        self._credentials = (client_id, client_secret)
        self._http = httpx.Client(base_url=self.platform_url, timeout=timeout, transport=transport)
        self._token: str | None = None
        self._token_expiry = 0.0
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: ServiceSettings) -> Mp1Client | None:
        """A client if the service was given a platform and credentials, else None."""
        s = settings
        if not (s.platform_url and s.app_instance_id and s.client_id and s.client_secret):
            return None
        return cls(s.platform_url, s.app_instance_id, s.client_id, s.client_secret)

    def close(self) -> None:
        self._http.close()

    # --- OAuth2 -----------------------------------------------------------------------------

    def access_token(self) -> str:
        """A valid access token, fetched again 30 s before the old one expires."""
        with self._lock:
            if self._token is None or time.time() > self._token_expiry - 30:
                self._token, self._token_expiry = self._fetch_token()
            return self._token

    def _fetch_token(self) -> tuple[str, float]:
        try:
            r = self._http.post(
                "/oauth2/token", data={"grant_type": "client_credentials"}, auth=self._credentials
            )
        except httpx.HTTPError as exc:
            raise Mp1Error(0, str(exc) or type(exc).__name__) from exc
        if r.status_code != 200:
            raise Mp1Error(r.status_code, _detail(r))
        body = r.json()
        return body["access_token"], time.time() + float(body.get("expires_in", 300))

    def request(
        self, method: str, path: str, *, json: Any = None, params: Any = None
    ) -> httpx.Response:
        """An authenticated request; raises ``Mp1Error`` for transport errors and >= 400."""
        for attempt in (1, 2):
            headers = {"Authorization": f"Bearer {self.access_token()}"}
            try:
                r = self._http.request(method, path, json=json, params=params, headers=headers)
            except httpx.HTTPError as exc:
                raise Mp1Error(0, str(exc) or type(exc).__name__) from exc
            if r.status_code == 401 and attempt == 1:
                with self._lock:  # token revoked or platform restarted with new keys
                    self._token = None
                continue
            if r.status_code >= 400:
                raise Mp1Error(r.status_code, _detail(r))
            return r
        raise AssertionError("unreachable")

    # --- mec_app_support --------------------------------------------------------------------

    def _app(self, api: str) -> str:
        return f"{api}/applications/{self.app_instance_id}"

    def confirm_ready(self) -> None:
        ready = {"indication": "READY"}
        self.request("POST", f"{self._app(APP_SUPPORT)}/confirm_ready", json=ready)

    def confirm_termination(self, operation_action: str = "TERMINATING") -> None:
        self.request(
            "POST",
            f"{self._app(APP_SUPPORT)}/confirm_termination",
            json={"operationAction": operation_action},
        )

    def subscribe_app_termination(self, callback_url: str) -> str:
        """Subscribe; returns the subscription's URI (the Location header)."""
        body = {
            "subscriptionType": TERMINATION_SUBSCRIPTION,
            "callbackReference": callback_url,
            "appInstanceId": self.app_instance_id,
        }
        r = self.request("POST", f"{self._app(APP_SUPPORT)}/subscriptions", json=body)
        return r.headers["location"]

    def delete(self, uri: str) -> None:
        """DELETE a resource by the absolute URI the platform gave (Location, _links)."""
        self.request("DELETE", self._relative(uri))

    def _relative(self, uri: str) -> str:
        return uri[len(self.platform_url) :] if uri.startswith(self.platform_url) else uri

    # --- mec_service_mgmt -------------------------------------------------------------------

    def register_service(self, service_info: dict[str, Any]) -> dict[str, Any]:
        """POST a ServiceInfoPost; returns the ServiceInfo with its ``serInstanceId``."""
        r = self.request("POST", f"{self._app(SERVICE_MGMT)}/services", json=service_info)
        created: dict[str, Any] = r.json()
        return created

    def deregister_service(self, ser_instance_id: str) -> None:
        self.request("DELETE", f"{self._app(SERVICE_MGMT)}/services/{ser_instance_id}")

    def heartbeat(self, service: dict[str, Any]) -> None:
        """Tell the platform the service is alive (MEC 011 v2.2 liveness, PATCH ACTIVE)."""
        href = service.get("_links", {}).get("liveness", {}).get("href")
        if href:
            self.request("PATCH", self._relative(href), json={"state": "ACTIVE"})

    def services(
        self,
        *,
        ser_name: list[str] | None = None,
        ser_instance_id: list[str] | None = None,
        ser_category_id: str | None = None,
        scope_of_locality: str | None = None,
    ) -> list[dict[str, Any]]:
        """Service discovery (``GET /services`` with the spec's filters)."""
        params: dict[str, Any] = {}
        if ser_name:
            params["ser_name"] = ser_name
        if ser_instance_id:
            params["ser_instance_id"] = ser_instance_id
        if ser_category_id:
            params["ser_category_id"] = ser_category_id
        if scope_of_locality:
            params["scope_of_locality"] = scope_of_locality
        found: list[dict[str, Any]] = self.request(
            "GET", f"{SERVICE_MGMT}/services", params=params
        ).json()
        return found

    def find_transport(self, ser_name: str, transport_type: str) -> dict[str, Any] | None:
        """The TransportInfo of an ACTIVE service ``ser_name`` with that transport type.

        A service offering several transports registers once per transport (same serName).
        """
        for service in self.services(ser_name=[ser_name]):
            transport = service.get("transportInfo", {})
            if service.get("state") == "ACTIVE" and transport.get("type") == transport_type:
                return dict(transport)
        return None


@dataclass(frozen=True)
class AmqpFeed:
    """A topic-based message feed as registered on the platform."""

    url: str  # broker URL, with our credentials
    exchange: str


def discover_amqp_feed(client: Mp1Client, ser_name: str, configured_url: str) -> AmqpFeed | None:
    """The ``MB_TOPIC_BASED`` transport of service ``ser_name``, or None if not (yet) there.

    The registration names the broker and the exchange (``implSpecificInfo.exchange``),
    never credentials: the user and password of ``configured_url`` are kept. Errors of the
    platform (``Mp1Error``, ``httpx.HTTPError``) propagate: the caller retries.
    """
    transport = client.find_transport(ser_name, "MB_TOPIC_BASED")
    if transport is None:
        return None
    uris = transport.get("endpoint", {}).get("uris") or []
    exchange = transport.get("implSpecificInfo", {}).get("exchange")
    if not uris or not exchange:
        return None
    return AmqpFeed(with_credentials(str(uris[0]), configured_url), str(exchange))


def resolve_amqp_feed(
    mp1: Mp1Client | None,
    ser_name: str,
    configured: AmqpFeed,
    stop: threading.Event,
    *,
    explicit: frozenset[str] = frozenset(),
    report: Callable[[str], None] | None = None,
) -> AmqpFeed | None:
    """The AMQP feed of service ``ser_name``, the one way every Python service finds it.

    Without a platform, ``configured``. With one, Mp1 discovery, retried with capped
    exponential backoff until the service is registered (a platform that is not up yet, a
    service that registers later) or ``stop`` is set (then None); ``report`` hears why each
    attempt failed, for health. Settings named in ``explicit`` (``url``, ``exchange``: set
    by the operator) win over what the platform says.
    """
    from mec_common.amqp import Backoff  # pika: only for services that use the bus

    if mp1 is None or explicit >= {"url", "exchange"}:
        return configured
    backoff = Backoff()
    while not stop.is_set():
        try:
            found = discover_amqp_feed(mp1, ser_name, configured.url)
            if found is not None:
                return AmqpFeed(
                    configured.url if "url" in explicit else found.url,
                    configured.exchange if "exchange" in explicit else found.exchange,
                )
            reason = f"{ser_name} not registered on the platform yet"
        except (Mp1Error, httpx.HTTPError) as exc:
            reason = f"Mp1 discovery of {ser_name} failed: {exc}"
        if report is not None:
            report(reason)
        stop.wait(backoff.next_delay())
    return None


def with_credentials(discovered: str, configured: str) -> str:
    """The discovered broker URL with the user and password of the configured one."""
    found, ours = urlsplit(discovered), urlsplit(configured)
    if not ours.username:
        return discovered
    auth = ours.username + (f":{ours.password}" if ours.password else "")
    host = found.hostname or ""
    netloc = f"{auth}@{host}" + (f":{found.port}" if found.port else "")
    return urlunsplit((found.scheme, netloc, found.path, found.query, found.fragment))


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text or r.reason_phrase


class MecAppRegistration:
    """A MEC app's life on the platform, run in a background thread (see module doc)."""

    def __init__(
        self,
        client: Mp1Client,
        services: list[dict[str, Any]],
        *,
        health: Health | None = None,
        termination_callback_url: str | None = None,
        on_termination: Callable[[], None] | None = None,
        retry_initial: float = 0.5,
        retry_max: float = 30.0,
    ) -> None:
        self.client = client
        self._wanted = services
        self._health = health
        # The secret last segment of the callback path: only the platform learns it.
        self.callback_secret = secrets.token_urlsafe(24)
        self._callback_url = (
            f"{termination_callback_url.rstrip('/')}/{self.callback_secret}"
            if termination_callback_url
            else None
        )
        self._on_termination = on_termination
        self._retry = (retry_initial, retry_max)
        self.registered: list[dict[str, Any]] = []
        self._subscription: str | None = None  # its URI, as the platform gave it
        self._stop = threading.Event()
        self._done = threading.Event()  # deregistered and confirmed
        self._lock = threading.Lock()
        self.ready = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._report(False, "registering")
        self._thread = threading.Thread(target=self._run, name="mp1-registration", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay = self._retry[0]
        while not self._stop.is_set():
            try:
                with self._lock:  # not while stop() is cleaning up
                    if self._stop.is_set():
                        return
                    self._register_once()
                break
            except Mp1Error as exc:
                self._report(False, f"retrying in {delay:.1f} s: {exc}")
                log.warning("platform registration failed; retrying", error=str(exc), delay=delay)
                self._stop.wait(delay)
                delay = min(delay * 2, self._retry[1])
        else:
            return
        self._report(True, f"registered {len(self.registered)} service(s)")
        self.ready.set()
        self._keep_alive()

    def _register_once(self) -> None:
        # Each step is idempotent across retries: a step done is not done again.
        self.client.confirm_ready()
        while len(self.registered) < len(self._wanted):
            info = self._wanted[len(self.registered)]
            self.registered.append(self.client.register_service(info))
            log.info("service registered", ser_name=info.get("serName"))
        if self._callback_url and self._subscription is None:
            self._subscription = self.client.subscribe_app_termination(self._callback_url)

    def _keep_alive(self) -> None:
        intervals = [s.get("livenessInterval") for s in self.registered]
        period = min((float(i) for i in intervals if i), default=0.0)
        if not period:
            return
        while not self._stop.wait(period / 2):
            try:
                for service in self.registered:
                    self.client.heartbeat(service)
                self._report(True, f"registered {len(self.registered)} service(s)")
            except Mp1Error as exc:
                self._report(False, f"heartbeat failed: {exc}")

    @property
    def subscription(self) -> str | None:
        """The URI of our AppTerminationNotification subscription (None before it exists)."""
        return self._subscription

    def handle_termination(self, operation_action: str) -> None:
        """The platform asked us to stop: clean up, confirm, then tell the service."""

        def run() -> None:
            self.stop(operation_action)
            if self._on_termination is not None:
                self._on_termination()

        threading.Thread(target=run, name="mp1-termination", daemon=True).start()

    def stop(self, operation_action: str = "TERMINATING") -> None:
        """Deregister our services and confirm termination (idempotent, best effort)."""
        self._stop.set()
        with self._lock:
            if self._done.is_set():
                return
            for service in list(self.registered):
                self._quietly(self.client.deregister_service, service["serInstanceId"])
                self.registered.remove(service)
            if self._subscription:
                self._quietly(self.client.delete, self._subscription)
                self._subscription = None
            # 409 = no termination in progress (we are stopping on our own): fine.
            self._quietly(self.client.confirm_termination, operation_action)
            self._done.set()
        self._report(False, "terminated", required=False)

    def _quietly(self, call: Callable[[str], None], arg: str) -> None:
        try:
            call(arg)
        except Mp1Error as exc:
            if exc.status not in (404, 409):
                log.warning("platform cleanup step failed", step=call.__name__, error=str(exc))

    def _report(self, ok: bool, detail: str, *, required: bool = True) -> None:
        if self._health is not None:
            self._health.set("platform", ok, detail, required=required)


def without_credentials(url: str) -> str:
    """``url`` without its user and password (a registration never carries them)."""
    parts = urlsplit(url)
    netloc = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def amqp_feed_transport(
    transport_id: str, name: str, amqp_url: str, exchange: str, routing_keys: str, schema: str
) -> dict[str, Any]:
    """The ``MB_TOPIC_BASED`` TransportInfo of a feed on an AMQP topic exchange, as the RNIS
    adapter registers its own: the broker without credentials (consumers have their own) and
    the exchange in ``implSpecificInfo`` (what ``discover_amqp_feed`` reads)."""
    return {
        "id": transport_id, "name": name, "type": "MB_TOPIC_BASED", "protocol": "AMQP",
        "version": "0.9.1", "endpoint": {"uris": [without_credentials(amqp_url)]},
        "security": {},
        "implSpecificInfo": {"exchange": exchange, "exchangeType": "topic",
                             "routingKeys": routing_keys, "schema": schema},
    }  # fmt: skip


def register_rest_service(
    settings: ServiceSettings,
    health: Health,
    ser_name: str,
    transport_id: str,
    base_path: str,
    more_transports: Sequence[dict[str, Any]] = (),
) -> MecAppRegistration | None:
    """Register a service's REST API (``base_path`` on its HTTP port) on the platform, when
    one is configured, and its ``more_transports`` (e.g. an AMQP feed) under the same
    serName, one registration per transport as MEC 011 has it; None when standalone. The
    caller stops the returned registration."""
    client = Mp1Client.from_settings(settings)
    if client is None:
        return None
    host = settings.http_host if settings.http_host != "0.0.0.0" else "127.0.0.1"
    rest = {
        "id": transport_id, "name": "REST", "type": "REST_HTTP", "protocol": "HTTP",
        "version": "1.1",
        "endpoint": {"uris": [f"http://{host}:{settings.http_port}{base_path}"]},
        "security": {},
    }  # fmt: skip
    services = [
        {"serName": ser_name, "version": "v1", "state": "ACTIVE", "serializer": "JSON",
         "transportInfo": transport}
        for transport in (rest, *more_transports)
    ]  # fmt: skip
    registration = MecAppRegistration(client, services, health=health)
    registration.start()
    return registration


def termination_router(
    registration: MecAppRegistration,
    verifier: TokenVerifier,
    path: str = "/mec/notifications/app_termination",
) -> APIRouter:
    """The endpoint where the platform delivers our AppTerminationNotification.

    It answers only at ``<path>/<registration.callback_secret>`` (404 elsewhere, as for any
    unknown path), and only to a platform notification token bound to our subscription.
    """
    router = APIRouter(tags=["mec"])
    bearer = HTTPBearer(auto_error=False)

    @router.post(path.rstrip("/") + "/{secret}", status_code=204,
                 summary="AppTerminationNotification from the platform (secret path)")  # fmt: skip
    async def app_termination(request: Request, secret: str) -> Response:
        if not hmac.compare_digest(secret.encode(), registration.callback_secret.encode()):
            raise ProblemError(404, "not found")
        credentials = await bearer(request)
        token = credentials.credentials if credentials else ""
        principal = await run_in_threadpool(
            verifier.verify_notification, token, registration.subscription
        )  # may fetch the revocation list or the JWKS
        if principal is None or not principal.is_operator:
            raise ProblemError(401, "a platform notification token for this subscription "
                               "is required")  # fmt: skip
        try:
            body = await request.json()
        except ValueError:
            body = None
        action = body.get("operationAction") if isinstance(body, dict) else None
        if action not in ("STOPPING", "TERMINATING"):
            raise ProblemError(400, "operationAction must be STOPPING or TERMINATING")
        log.info("termination requested by the platform", operation_action=action)
        registration.handle_termination(action)
        return Response(status_code=204)

    return router
