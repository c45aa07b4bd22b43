"""Mp1 state and behaviour: the service registry, subscriptions, app rules, readiness.

Request handlers call these methods; they raise ``ProblemError`` with the status the spec
asks for. Discovery answers come from a cache of serialized results that every write to
the registry clears (the platform is one process, so the cache is always coherent).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import orjson
from sqlalchemy import func, select

from mec_common.api import ProblemError
from mec_common.auth import Principal
from mec_common.logging import get_logger
from mec_common.rest_policy import Precondition, unconditional
from mec_platform.db import (
    AppInstance,
    AppPackage,
    AppRegistration,
    AppRule,
    Database,
    Service,
    Subscription,
)
from mec_platform.models import (
    AppTerminationSubscription,
    DnsRule,
    FilteringCriteria,
    SerAvailabilitySubscription,
    ServiceInfo,
    ServiceInfoPost,
    TrafficRule,
    TransportInfo,
    timestamp,
)
from mec_platform.notifier import CallbackNotAllowedError, Notifier, check_callback
from mec_platform.traffic_policy import widening
from mec_platform.websockets import WebsocketHub, websocket_uri

log = get_logger(__name__)

SERVICE_MGMT = "/mec_service_mgmt/v1"
APP_SUPPORT = "/mec_app_support/v1"
SER_AVAILABILITY = "SerAvailabilityNotificationSubscription"
APP_TERMINATION = "AppTerminationNotificationSubscription"
API_OF = {SERVICE_MGMT: "service_mgmt", APP_SUPPORT: "app_support"}
DISCOVERY_FILTERS = ("ser_instance_id", "ser_name", "ser_category_id")


def _new_id() -> str:
    return uuid.uuid4().hex


def _subscription_view(body: dict[str, Any], href: str) -> dict[str, Any]:
    """A stored subscription as the API answers it: with its links, and the websocketUri
    the platform allocated when it asked for a websocket."""
    view = {**body, "_links": {"self": {"href": href}}}
    if "websockNotifConfig" in body:
        view["websockNotifConfig"] = {
            "requestWebsocketUri": True,
            "websocketUri": websocket_uri(href),
        }
    return view


class Registry:
    def __init__(
        self,
        db: Database,
        notifier: Notifier,
        base_url: str,
        transports: list[TransportInfo],
        callback_networks: list[str],
        max_subscriptions: int = 100,
    ) -> None:
        self.db = db
        self.notifier = notifier
        self.websockets = WebsocketHub(notifier.timeout_s)
        self.base_url = base_url
        self.transports = {t.id: t.dump() for t in transports}
        self.callback_networks = callback_networks
        self._max_subscriptions = max_subscriptions
        self._cache: dict[tuple[Any, ...], bytes] = {}
        self._cache_lock = threading.Lock()
        # serInstanceId -> (app instance, ServiceInfo JSON), in registration order: discovery
        # reads this, never the database; every write below keeps it in step.
        self._services: dict[str, tuple[str, dict[str, Any]]] = {}
        with db.session() as s:
            for row in s.scalars(select(Service).order_by(Service.created)):
                self._services[row.id] = (row.app_instance_id, self.service_json(row))
        # app instance -> event set by confirm_termination (waited for by the lifecycle)
        self.termination_confirmed: dict[str, threading.Event] = {}
        # Applies an app's traffic rules to the data plane (the manager's); raises
        # ProblemError, having put the previous rules back, if the data plane refuses them.
        self.on_rules_changed: Callable[[str, list[dict[str, Any]]], None] = lambda *_: None
        # Conditional writes (If-Match) compare and write under this lock, so two writers
        # holding the same ETag cannot both succeed: the platform is one process.
        self._writes = threading.Lock()

    # --- access control ---------------------------------------------------------------------

    def app_for(self, s: Any, principal: Principal, app_instance_id: str) -> AppInstance:
        """The app instance, if it exists and the caller may act for it (403/404 otherwise)."""
        if not principal.may_act_for(app_instance_id):
            raise ProblemError(403, "this token may only access its own application instance")
        app: AppInstance | None = s.get(AppInstance, app_instance_id)
        if app is None:
            raise ProblemError(404, f"application instance {app_instance_id} does not exist")
        return app

    # --- services ---------------------------------------------------------------------------

    def service_json(self, row: Service) -> dict[str, Any]:
        body = {"serInstanceId": row.id, **row.info, "state": row.state}
        if row.liveness_interval:
            body["livenessInterval"] = row.liveness_interval
        href = f"{self.base_url}{SERVICE_MGMT}/applications/{row.app_instance_id}/services/{row.id}"
        links: dict[str, Any] = {"self": {"href": href}}
        if row.liveness_interval:
            links["liveness"] = {"href": f"{self.base_url}{SERVICE_MGMT}/liveness/{row.id}"}
        body["_links"] = links
        return body

    @staticmethod
    def _cache_key(app_instance_id: str | None, query: dict[str, Any]) -> tuple[Any, ...]:
        items = sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in query.items())
        return (app_instance_id, *items)

    def discover(self, app_instance_id: str | None, query: dict[str, Any]) -> bytes:
        """Discovery with the spec's filters, as JSON bytes (cached until the next write).

        Served from memory (no database, no thread hop), so the event loop answers it.
        """
        key = self._cache_key(app_instance_id, query)
        with self._cache_lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        given = [f for f in DISCOVERY_FILTERS if query.get(f)]
        if len(given) > 1:
            raise ProblemError(
                400, "either ser_instance_id or ser_name or ser_category_id or none of them "
                f"shall be present (got {', '.join(given)})",
            )  # fmt: skip
        with self._cache_lock:
            services = list(self._services.values())
        found = [svc for app, svc in services
                 if app_instance_id in (None, app) and _matches(svc, query)]  # fmt: skip
        body = orjson.dumps(found)
        with self._cache_lock:
            if len(self._cache) >= 10_000:  # bounded: arbitrary queries cannot grow it forever
                self._cache.clear()
            self._cache[key] = body
        return body

    def _reindex(
        self, put: list[tuple[str, dict[str, Any]]], drop: list[str] | None = None
    ) -> None:
        """Apply a committed write to the discovery index; cached answers are dropped."""
        with self._cache_lock:
            for app, body in put:
                self._services[body["serInstanceId"]] = (app, body)
            for ser_id in drop or []:
                self._services.pop(ser_id, None)
            self._cache.clear()

    def get_service(self, service_id: str, app_instance_id: str | None = None) -> dict[str, Any]:
        with self.db.session() as s:
            row = s.get(Service, service_id)
            if row is None or (app_instance_id and row.app_instance_id != app_instance_id):
                raise ProblemError(404, f"service {service_id} does not exist")
            return self.service_json(row)

    def register(
        self, principal: Principal, app_instance_id: str, post: ServiceInfoPost
    ) -> dict[str, Any]:
        info = post.dump()
        info.pop("livenessInterval", None)
        if post.transport_id is not None:
            transport = self.transports.get(post.transport_id)
            if transport is None:
                raise ProblemError(400, f"transportId {post.transport_id} is not a transport "
                                   "of this platform (see GET /transports)")  # fmt: skip
            info.pop("transportId")
            info["transportInfo"] = transport
        with self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            row = Service(
                id=_new_id(),
                app_instance_id=app_instance_id,
                ser_name=post.ser_name,
                state=str(post.state),
                info=info,
                liveness_interval=post.liveness_interval or None,
            )
            s.add(row)
            s.flush()
            created = self.service_json(row)
        self._reindex([(app_instance_id, created)])
        self._notify_availability(created, "ADDED")
        return created

    def update(
        self,
        principal: Principal,
        app_instance_id: str,
        service_id: str,
        new: ServiceInfo,
        precondition: Precondition = unconditional,
    ) -> dict[str, Any]:
        with self._writes, self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            row = s.get(Service, service_id)
            if row is None or row.app_instance_id != app_instance_id:
                raise ProblemError(404, f"service {service_id} does not exist")
            if new.ser_instance_id not in (None, service_id):
                raise ProblemError(400, "serInstanceId in the body does not match the URI")
            precondition(self.service_json(row))
            info = new.dump()
            info.pop("serInstanceId", None)
            interval = info.pop("livenessInterval", row.liveness_interval)
            change = "STATE_CHANGED" if row.state != str(new.state) else "ATTRIBUTES_CHANGED"
            row.info, row.state, row.ser_name = info, str(new.state), new.ser_name
            row.liveness_interval, row.last_heartbeat = interval, time.time()
            updated = self.service_json(row)
        self._reindex([(app_instance_id, updated)])
        self._notify_availability(updated, change)
        return updated

    def deregister(self, principal: Principal, app_instance_id: str, service_id: str,
                   precondition: Precondition = unconditional) -> None:  # fmt: skip
        with self._writes, self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            row = s.get(Service, service_id)
            if row is None or row.app_instance_id != app_instance_id:
                raise ProblemError(404, f"service {service_id} does not exist")
            removed = self.service_json(row)
            precondition(removed)
            s.delete(row)
        self._reindex([], [service_id])
        self._notify_availability(removed, "REMOVED")

    def remove_app_resources(self, app_instance_id: str) -> None:
        """At termination: the app's services (notified as REMOVED), subscriptions, rules and
        registration."""
        with self._writes, self.db.session() as s:
            for model in (Subscription, AppRule, AppRegistration):
                for item in s.scalars(select(model).where(
                        model.app_instance_id == app_instance_id)):  # fmt: skip
                    if isinstance(item, Subscription):
                        api = SERVICE_MGMT if item.api == API_OF[SERVICE_MGMT] else APP_SUPPORT
                        self.websockets.close(self._subscription_href(api, item))
                    s.delete(item)
        self.remove_services(app_instance_id)

    def remove_services(self, app_instance_id: str) -> None:
        """The app's services leave discovery; subscribers are told REMOVED. Under the write
        lock: an app deleting its own service while it is terminated would otherwise have the
        row deleted twice (and REMOVED told twice)."""
        with self._writes, self.db.session() as s:
            services = list(s.scalars(select(Service).where(
                Service.app_instance_id == app_instance_id)))  # fmt: skip
            removed = [self.service_json(row) for row in services]
            for row in services:
                s.delete(row)
        self._reindex([], [svc["serInstanceId"] for svc in removed])
        for service in removed:
            self._notify_availability(service, "REMOVED")

    # --- liveness (MEC 011 v2.2 style; an extension of v2.1.1) -----------------------------

    def heartbeat(self, principal: Principal, service_id: str, state: str) -> dict[str, Any]:
        if state != "ACTIVE":
            raise ProblemError(400, "a liveness update must set state ACTIVE")
        with self.db.session() as s:
            row = s.get(Service, service_id)
            if row is None:
                raise ProblemError(404, f"service {service_id} does not exist")
            if not principal.may_act_for(row.app_instance_id):
                raise ProblemError(403, "this token may only access its own services")
            row.last_heartbeat = time.time()
            revived = row.state != "ACTIVE"
            row.state = "ACTIVE"
            body, body_app = self.service_json(row), row.app_instance_id
            liveness = _liveness(row)
        if revived:
            self._reindex([(body_app, body)])
            self._notify_availability(body, "STATE_CHANGED")
        return liveness

    def liveness(self, principal: Principal, service_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            row = s.get(Service, service_id)
            if row is not None and not principal.may_act_for(row.app_instance_id):
                raise ProblemError(403, "this token may only access its own services")
            if row is None or not row.liveness_interval:
                raise ProblemError(404, f"service {service_id} has no liveness resource")
            return _liveness(row)

    def expire_silent_services(self) -> int:
        """Services that missed two heartbeats become INACTIVE (notified as STATE_CHANGED)."""
        now = time.time()
        changed = []
        with self.db.session() as s:
            stmt = select(Service).where(Service.liveness_interval.is_not(None),
                                         Service.state == "ACTIVE")  # fmt: skip
            for row in s.scalars(stmt):
                if row.liveness_interval and now - row.last_heartbeat > 2 * row.liveness_interval:
                    row.state = "INACTIVE"
                    changed.append((row.app_instance_id, self.service_json(row)))
        if changed:
            self._reindex(changed)
            for _, service in changed:
                log.warning("service missed its heartbeats", ser_name=service["serName"])
                self._notify_availability(service, "STATE_CHANGED")
        return len(changed)

    # --- subscriptions ----------------------------------------------------------------------

    def subscribe(
        self,
        principal: Principal,
        api: str,
        app_instance_id: str,
        sub: SerAvailabilitySubscription | AppTerminationSubscription,
    ) -> tuple[dict[str, Any], str]:
        expected = SER_AVAILABILITY if api == SERVICE_MGMT else APP_TERMINATION
        if sub.subscription_type != expected:
            raise ProblemError(400, f"subscriptionType must be {expected}")
        if isinstance(sub, AppTerminationSubscription) and sub.app_instance_id != app_instance_id:
            raise ProblemError(400, "appInstanceId in the body does not match the URI")
        try:
            if sub.callback_reference is not None:
                check_callback(sub.callback_reference, self.callback_networks)
        except CallbackNotAllowedError as exc:
            raise ProblemError(400, str(exc)) from None
        body = sub.dump()
        with self._writes, self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            held = s.scalar(select(func.count()).where(
                Subscription.app_instance_id == app_instance_id)) or 0  # fmt: skip
            if held >= self._max_subscriptions:  # each is a receiver the platform must serve
                raise ProblemError(
                    403,
                    f"an app instance may hold at most "
                    f"{self._max_subscriptions} subscriptions; delete one first",
                )
            row = Subscription(id=_new_id(), api=API_OF[api], app_instance_id=app_instance_id,
                               body=body)  # fmt: skip
            s.add(row)
            location = self._subscription_href(api, row)
        return _subscription_view(body, location), location

    def _subscription_href(self, api: str, row: Subscription) -> str:
        return f"{self.base_url}{api}/applications/{row.app_instance_id}/subscriptions/{row.id}"

    def _deliver(
        self, row: Subscription, href: str, body: dict[str, Any], kind: str
    ) -> Future[bool]:
        """A notification to the subscription's channel: its websocket or its callback."""
        if "websockNotifConfig" in row.body:
            return self.websockets.send(href, body, kind)
        return self.notifier.notify(row.body["callbackReference"], body, kind, href)

    def subscriptions(self, principal: Principal, api: str, app_instance_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            rows = s.scalars(select(Subscription).where(
                Subscription.app_instance_id == app_instance_id,
                Subscription.api == API_OF[api]).order_by(Subscription.created))  # fmt: skip
            links = [{"href": self._subscription_href(api, r), "rel": r.body["subscriptionType"]}
                     for r in rows]  # fmt: skip
        me = f"{self.base_url}{api}/applications/{app_instance_id}/subscriptions"
        return {"_links": {"self": {"href": me}, "subscriptions": links}}

    def subscription(
        self,
        principal: Principal,
        api: str,
        app_instance_id: str,
        sub_id: str,
        delete: bool,
        precondition: Precondition = unconditional,
    ) -> dict[str, Any]:
        with self._writes, self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            row = s.get(Subscription, sub_id)
            if row is None or row.app_instance_id != app_instance_id or row.api != API_OF[api]:
                raise ProblemError(404, f"subscription {sub_id} does not exist")
            href = self._subscription_href(api, row)
            body = _subscription_view(row.body, href)
            if delete:
                precondition(body)
                s.delete(row)
        if delete:
            self.websockets.close(href)
        return body

    def _notify_availability(self, service: dict[str, Any], change: str) -> list[Future[bool]]:
        reference = {
            "link": {"href": service["_links"]["self"]["href"]},
            "serName": service["serName"],
            "serInstanceId": service["serInstanceId"],
            "state": service["state"],
            "changeType": change,
        }
        with self.db.session() as s:
            rows = list(s.scalars(select(Subscription).where(Subscription.api == "service_mgmt")))
        sent = []
        for row in rows:
            criteria = FilteringCriteria.model_validate(row.body.get("filteringCriteria") or {})
            if not criteria.matches(service):
                continue
            href = self._subscription_href(SERVICE_MGMT, row)
            notification = {
                "notificationType": "SerAvailabilityNotification",
                "serviceReferences": [reference],
                "_links": {"subscription": {"href": href}},
            }
            sent.append(self._deliver(row, href, notification, "service_availability"))
        return sent

    def notify_termination(
        self, app_instance_id: str, action: str, max_graceful_timeout: int
    ) -> list[Future[bool]]:
        """Send AppTerminationNotification to the app's subscriptions; arm the confirmation."""
        self.termination_confirmed[app_instance_id] = threading.Event()
        with self.db.session() as s:
            rows = list(s.scalars(select(Subscription).where(
                Subscription.app_instance_id == app_instance_id,
                Subscription.api == "app_support")))  # fmt: skip
        app_base = f"{self.base_url}{APP_SUPPORT}/applications/{app_instance_id}"
        sent = []
        for row in rows:
            href = self._subscription_href(APP_SUPPORT, row)
            notification = {
                "notificationType": "AppTerminationNotification",
                "operationAction": action,
                "maxGracefulTimeout": max_graceful_timeout,
                "_links": {
                    "subscription": {"href": href},
                    "confirmTermination": {"href": f"{app_base}/confirm_termination"},
                },
            }
            sent.append(self._deliver(row, href, notification, "app_termination"))
        return sent

    # --- app support ------------------------------------------------------------------------

    def confirm_ready(self, principal: Principal, app_instance_id: str) -> None:
        with self.db.session() as s:
            app = self.app_for(s, principal, app_instance_id)
            if app.termination_pending:
                raise ProblemError(409, "the application instance is being terminated")
            app.ready = True

    def confirm_termination(
        self, principal: Principal, app_instance_id: str, action: str | None
    ) -> None:
        with self.db.session() as s:
            app = self.app_for(s, principal, app_instance_id)
            if app.termination_pending is None:
                raise ProblemError(409, "no termination of this application is in progress")
            if action is not None and app.termination_pending != action:
                raise ProblemError(409, f"the platform asked for {app.termination_pending}, "
                                   f"not {action}")  # fmt: skip
        event = self.termination_confirmed.get(app_instance_id)
        if event is not None:
            event.set()

    def rules(self, principal: Principal, app_instance_id: str, kind: str) -> list[dict[str, Any]]:
        with self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            rows = s.scalars(
                select(AppRule)
                .where(AppRule.app_instance_id == app_instance_id, AppRule.kind == kind)
                .order_by(AppRule.rule_id)
            )
            return [r.body for r in rows]

    def rule(self, principal: Principal, app_instance_id: str, kind: str, rule_id: str
             ) -> dict[str, Any]:  # fmt: skip
        with self.db.session() as s:
            self.app_for(s, principal, app_instance_id)
            row = s.get(AppRule, (app_instance_id, kind, rule_id))
            if row is None:
                raise ProblemError(404, f"{kind} rule {rule_id} does not exist")
            return row.body

    def put_rule(
        self,
        principal: Principal,
        app_instance_id: str,
        rule_id: str,
        rule: TrafficRule | DnsRule,
        precondition: Precondition = unconditional,
    ) -> dict[str, Any]:
        kind = "traffic" if isinstance(rule, TrafficRule) else "dns"
        given = rule.traffic_rule_id if isinstance(rule, TrafficRule) else rule.dns_rule_id
        with self._writes, self.db.session() as s:
            app = self.app_for(s, principal, app_instance_id)
            row = s.get(AppRule, (app_instance_id, kind, rule_id))
            if row is None:  # existence before the body's checks (MEC 011 lists 404)
                raise ProblemError(404, f"{kind} rule {rule_id} does not exist; rules come from "
                                   "the application descriptor")  # fmt: skip
            if given != rule_id:
                raise ProblemError(400, f"the rule id in the body ({given}) does not match "
                                   "the URI")  # fmt: skip
            precondition(row.body)
            row.body = rule.dump()
            if kind == "traffic":
                self._check_declared(s, app, row.body)
                s.flush()
                rules = s.scalars(
                    select(AppRule).where(
                        AppRule.app_instance_id == app_instance_id, AppRule.kind == "traffic"
                    )
                )
                # Before the commit: if the data plane refuses, nothing is stored either.
                self.on_rules_changed(app_instance_id, [r.body for r in rules])  # fmt: skip
            return row.body

    @staticmethod
    def _check_declared(s: Any, app: AppInstance, wanted: dict[str, Any]) -> None:
        appd = s.get(AppPackage, app.app_pkg_id).appd
        declared = {r["trafficRuleId"]: r for r in appd.get("appTrafficRule", [])}
        reason = widening(declared[wanted["trafficRuleId"]], wanted)
        if reason:
            raise ProblemError(403, reason)


def _matches(service: dict[str, Any], query: dict[str, Any]) -> bool:
    if query.get("ser_instance_id") and service["serInstanceId"] not in query["ser_instance_id"]:
        return False
    if query.get("ser_name") and service["serName"] not in query["ser_name"]:
        return False
    category = query.get("ser_category_id")
    if category and (service.get("serCategory") or {}).get("id") != category:
        return False
    # MEC 011 (8.1.2.2): consumedLocalOnly and isLocal default to TRUE when absent; every
    # service registered here is on this MEC host, so local to every caller
    for param, field in (("consumed_local_only", "consumedLocalOnly"), ("is_local", "isLocal")):
        if query.get(param) is not None and service.get(field, True) != query[param]:
            return False
    scope = query.get("scope_of_locality")
    return not (scope and service.get("scopeOfLocality", "MEC_HOST") != scope)


def _liveness(row: Service) -> dict[str, Any]:
    return {
        "state": row.state,
        "timeStamp": timestamp(row.last_heartbeat),
        "interval": row.liveness_interval,
    }
