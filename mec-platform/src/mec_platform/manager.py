"""Platform manager: app packages (AppD onboarding) and app instance lifecycle.

Shapes follow MEC 010-2 (``/app_pkgm/v1``, ``/app_lcm/v1``): packages with onboarding,
operational and usage states; instances with instantiation state; every instantiate and
terminate is an operation occurrence (``app_lcm_op_occs``) that runs in the background
and moves STARTING -> PROCESSING -> COMPLETED | FAILED.

Termination: the app's AppTermination subscribers are notified, the platform waits for
confirm_termination up to the graceful timeout, then stops the app through its backend,
removes its data-plane rules, services, subscriptions and rules, and revokes its
credentials.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from sqlalchemy import delete, func, select

from mec_common.api import ProblemError
from mec_common.logging import get_logger
from mec_common.rest_policy import Precondition, unconditional
from mec_platform.appd import AppD, AppdError, parse_appd
from mec_platform.backends import Backend, BackendError
from mec_platform.dataplane import DataplaneAgent, DataplaneError
from mec_platform.db import AppInstance, AppPackage, AppRule, Database, LcmOpOcc, Subscription
from mec_platform.models import timestamp
from mec_platform.notifier import CallbackNotAllowedError, check_callback
from mec_platform.registry import Registry
from mec_platform.security import Authority

log = get_logger(__name__)

PKGM = "/app_pkgm/v1"
LCM = "/app_lcm/v1"
OP_OCC_SUBSCRIPTION = "AppLcmOpOccStateChangeSubscription"
INSTANCE_SUBSCRIPTION = "AppInstanceStateChangeSubscription"
INSTANCE_STATES = ("NOT_INSTANTIATED", "STARTED", "STOPPED")
# AppPkgNotification.notificationType -> the subscription type that asks for it
PACKAGE_NOTIFICATIONS = {"AppPackageOnBoarded": "AppPackageOnBoardingSubscription",
                         "AppPackageEnabled": "AppPackageChangeSubscription",
                         "AppPackageDisabled": "AppPackageChangeSubscription",
                         "AppPackageDeleted": "AppPackageDeletionSubscription"}  # fmt: skip
# API -> (base path, subscription types it offers)
SUBSCRIPTION_APIS = {
    "app_lcm": (LCM, (OP_OCC_SUBSCRIPTION, INSTANCE_SUBSCRIPTION)),
    "app_pkgm": (PKGM, tuple(dict.fromkeys(PACKAGE_NOTIFICATIONS.values()))),
}


class Manager:
    def __init__(
        self,
        db: Database,
        registry: Registry,
        authority: Authority,
        backend: Backend,
        dataplane: DataplaneAgent | None,
        base_url: str,
        graceful_timeout_s: int,
    ) -> None:
        self.db, self.registry, self.authority = db, registry, authority
        self.backend, self.dataplane = backend, dataplane
        self.base_url, self.graceful_timeout_s = base_url, graceful_timeout_s
        self._threads: list[threading.Thread] = []
        self._writes = threading.Lock()  # conditional writes compare and write under it
        # Held while an operation begins and while a dead app is handled, so that the two
        # never act on one instance at once.
        self._lifecycle_lock = threading.Lock()
        registry.on_rules_changed = self.replace_traffic_rules

    # --- packages ---------------------------------------------------------------------------

    def package_json(self, s: Any, row: AppPackage) -> dict[str, Any]:
        appd = row.appd
        in_use = s.scalar(select(func.count()).where(AppInstance.app_pkg_id == row.id)) > 0
        href = f"{self.base_url}{PKGM}/app_packages/{row.id}"
        image = appd.get("swImageDescriptor", {}).get("containerImage")
        return {
            "id": row.id,
            "appDId": row.appd_id,
            "appProvider": appd["appProvider"],
            "appName": appd["appName"],
            "appSoftwareVersion": appd["appSoftVersion"],
            "appDVersion": appd["appDVersion"],
            "checksum": {"algorithm": "SHA-256", "hash": row.checksum},
            # MEC 010-2 leaves AppPkgSWImageInfo "for further study": ours names the
            # software, and its container image where the AppD gives one.
            "softwareImages": [
                {
                    "name": appd["appName"],
                    "version": appd["appSoftVersion"],
                    **({"containerImage": image} if image else {}),
                }
            ],
            "onboardingState": "ONBOARDED",
            "operationalState": row.operational_state,
            "usageState": "IN_USE" if in_use else "NOT_IN_USE",
            "mecInfo": appd["mecVersion"],
            "_links": {
                "self": {"href": href},
                "appD": {"href": f"{href}/appd"},
                "appPkgContent": {"href": f"{href}/package_content"},
            },
        }

    def onboard(self, raw: bytes) -> dict[str, Any]:
        try:
            appd, checksum = parse_appd(raw)
        except AppdError as exc:
            raise ProblemError(400, f"invalid AppD: {exc}") from None
        with self.db.session() as s:
            if s.scalar(select(AppPackage).where(AppPackage.appd_id == appd.app_d_id)):
                raise ProblemError(409, f"an AppD with appDId {appd.app_d_id} is already "
                                   "onboarded; delete it first")  # fmt: skip
            row = AppPackage(id=uuid.uuid4().hex, appd_id=appd.app_d_id, appd=appd.dump(),
                             checksum=checksum)  # fmt: skip
            s.add(row)
            s.flush()
            created = self.package_json(s, row)
        self._notify_package(created, "AppPackageOnBoarded")
        return created

    def packages(self, appd_id: str | None = None) -> list[dict[str, Any]]:
        with self.db.session() as s:
            stmt = select(AppPackage).order_by(AppPackage.created)
            if appd_id:
                stmt = stmt.where(AppPackage.appd_id == appd_id)
            return [self.package_json(s, row) for row in s.scalars(stmt)]

    def _package(self, s: Any, pkg_id: str) -> AppPackage:
        row = s.get(AppPackage, pkg_id) or s.scalar(
            select(AppPackage).where(AppPackage.appd_id == pkg_id))  # fmt: skip
        if row is None:
            raise ProblemError(404, f"app package {pkg_id} does not exist")
        return row  # type: ignore[no-any-return]

    def package(self, pkg_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            return self.package_json(s, self._package(s, pkg_id))

    def appd(self, pkg_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            return dict(self._package(s, pkg_id).appd)

    def set_package_state(
        self, pkg_id: str, state: str, precondition: Precondition = unconditional
    ) -> dict[str, Any]:
        with self._writes, self.db.session() as s:
            row = self._package(s, pkg_id)
            if state not in ("ENABLED", "DISABLED"):
                raise ProblemError(400, "operationState must be ENABLED or DISABLED")
            precondition(self.package_json(s, row))
            changed = row.operational_state != state
            row.operational_state = state
            package = self.package_json(s, row)
        if changed:
            self._notify_package(package, f"AppPackage{state.capitalize()}")
        return package

    def delete_package(self, pkg_id: str, precondition: Precondition = unconditional) -> None:
        with self._writes, self.db.session() as s:
            row = self._package(s, pkg_id)
            precondition(self.package_json(s, row))
            package = self.package_json(s, row)
            if package["usageState"] == "IN_USE":
                raise ProblemError(409, "the package has app instances; delete them first")
            s.delete(row)
        self._notify_package(package, "AppPackageDeleted")

    # --- instances --------------------------------------------------------------------------

    def instance_json(self, row: AppInstance, appd: dict[str, Any]) -> dict[str, Any]:
        href = f"{self.base_url}{LCM}/app_instances/{row.id}"
        body: dict[str, Any] = {
            "id": row.id,
            "appDId": row.appd_id,
            "appProvider": appd["appProvider"],
            "appName": appd["appName"],
            "appSoftVersion": appd["appSoftVersion"],
            "appDVersion": appd["appDVersion"],
            "appPkgId": row.app_pkg_id,
            "instantiationState": row.instantiation_state,
            "_links": {
                "self": {"href": href},
                "instantiate": {"href": f"{href}/instantiate"},
                "terminate": {"href": f"{href}/terminate"},
            },
        }
        if row.name:
            body["appInstanceName"] = row.name
        if row.description:
            body["appInstanceDescription"] = row.description
        if row.instantiation_state == "INSTANTIATED":
            body["instantiatedAppState"] = {"operationalState": row.operational_state}
            body["ready"] = row.ready  # extension: confirm_ready received
            body["backend"] = row.backend
        return body

    def create_instance(self, appd_id: str, name: str | None, description: str | None
                        ) -> dict[str, Any]:  # fmt: skip
        with self.db.session() as s:
            pkg = s.scalar(select(AppPackage).where(AppPackage.appd_id == appd_id))
            if pkg is None:
                raise ProblemError(404, f"no onboarded AppD with appDId {appd_id}")
            if pkg.operational_state != "ENABLED":
                raise ProblemError(409, f"the app package of {appd_id} is DISABLED")
            row = AppInstance(id=uuid.uuid4().hex, app_pkg_id=pkg.id, appd_id=appd_id,
                              name=name, description=description)  # fmt: skip
            s.add(row)
            s.flush()  # column defaults (instantiation state) are set at flush
            return self.instance_json(row, pkg.appd)

    def instances(self) -> list[dict[str, Any]]:
        with self.db.session() as s:
            rows = s.execute(select(AppInstance, AppPackage.appd).join(AppPackage)
                             .order_by(AppInstance.created))  # fmt: skip
            return [self.instance_json(row, appd) for row, appd in rows]

    def _instance(self, s: Any, instance_id: str) -> tuple[AppInstance, dict[str, Any]]:
        row = s.get(AppInstance, instance_id)
        if row is None:
            raise ProblemError(404, f"app instance {instance_id} does not exist")
        return row, s.get(AppPackage, row.app_pkg_id).appd

    def instance(self, instance_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            return self.instance_json(*self._instance(s, instance_id))

    def delete_instance(self, instance_id: str, precondition: Precondition = unconditional
                        ) -> None:  # fmt: skip
        """Delete a NOT_INSTANTIATED instance with whatever an app run elsewhere left
        (services, subscriptions, rules) and its credentials."""
        with self.db.session() as s:
            row, appd = self._instance(s, instance_id)
            precondition(self.instance_json(row, appd))
            if row.instantiation_state != "NOT_INSTANTIATED" or self._busy(s, instance_id):
                raise ProblemError(409, "terminate the app instance before deleting it")
        self.registry.remove_app_resources(instance_id)
        self.authority.revoke_app_clients(instance_id)
        with self.db.session() as s:  # its operation occurrences stay, as history
            s.execute(delete(AppInstance).where(AppInstance.id == instance_id))

    def credentials(self, instance_id: str) -> dict[str, str]:
        """New credentials for an app that runs outside the platform's backends."""
        with self.db.session() as s:
            row, appd = self._instance(s, instance_id)
            has_rules = s.scalar(select(func.count()).where(AppRule.app_instance_id == row.id))
        if not has_rules:  # the app's Mp1 rules, as instantiation would have loaded them
            self._load_rules(instance_id, AppD.model_validate(appd))
        client_id, secret = self.authority.create_app_client(instance_id)
        return {"clientId": client_id, "clientSecret": secret, "appInstanceId": instance_id,
                "tokenEndpoint": f"{self.base_url}/oauth2/token"}  # fmt: skip

    # --- operation occurrences --------------------------------------------------------------

    def op_json(self, op: LcmOpOcc) -> dict[str, Any]:
        href = f"{self.base_url}{LCM}/app_lcm_op_occs/{op.id}"
        body: dict[str, Any] = {
            "id": op.id,
            "operationState": op.state,
            "stateEnteredTime": timestamp(op.state_entered_time),
            "startTime": timestamp(op.start_time),
            "lcmOperation": op.operation,
            "operationParams": op.params,
            "appInstanceId": op.app_instance_id,
            "_links": {"self": {"href": href}, "appInstance": {
                "href": f"{self.base_url}{LCM}/app_instances/{op.app_instance_id}"}},
        }  # fmt: skip
        if op.error:
            body["error"] = {"status": 500, "detail": op.error}
        return body

    def ops(self, instance_id: str | None = None) -> list[dict[str, Any]]:
        with self.db.session() as s:
            stmt = select(LcmOpOcc).order_by(LcmOpOcc.start_time)
            if instance_id:
                stmt = stmt.where(LcmOpOcc.app_instance_id == instance_id)
            return [self.op_json(op) for op in s.scalars(stmt)]

    def op(self, op_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            op = s.get(LcmOpOcc, op_id)
            if op is None:
                raise ProblemError(404, f"operation occurrence {op_id} does not exist")
            return self.op_json(op)

    def _busy(self, s: Any, instance_id: str) -> bool:
        return bool(s.scalar(select(func.count()).where(
            LcmOpOcc.app_instance_id == instance_id,
            LcmOpOcc.state.in_(("STARTING", "PROCESSING")))))  # fmt: skip

    def _set_op(self, op_id: str, state: str, error: str | None = None) -> None:
        with self.db.session() as s:
            op = s.get(LcmOpOcc, op_id)
            assert op is not None
            op.state, op.state_entered_time, op.error = state, time.time(), error
        self._notify_op(op)
        if state == "COMPLETED":
            self._notify_instance(op.app_instance_id)

    # --- lifecycle subscriptions (MEC 010-2 AppLcmOpOccStateChangeSubscription) ----------

    def _subscription_json(self, row: Subscription) -> dict[str, Any]:
        href = f"{self.base_url}{SUBSCRIPTION_APIS[row.api][0]}/subscriptions/{row.id}"
        return {"id": row.id, **row.body, "_links": {"self": {"href": href}}}

    def subscribe(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """A MEC 010-2 subscription of ``api`` (app_lcm or app_pkgm)."""
        _, kinds = SUBSCRIPTION_APIS[api]
        for wrapper in ("AppLcmOpOccSubscriptionRequest", "AppInstSubscriptionRequest",
                        "AppPkgSubscription"):  # fmt: skip
            body = body.get(wrapper, body)  # v3.1.1 wraps the request in its type's name
        if not isinstance(body, dict):
            raise ProblemError(400, "the body must be a JSON object")
        kind = body.get("subscriptionType")
        if kind not in kinds:
            raise ProblemError(400, f"subscriptionType must be one of {', '.join(kinds)}")
        allowed = {"subscriptionType", "callbackUri"}
        if kind == INSTANCE_SUBSCRIPTION:
            allowed.add("appInstanceState")
        if unsupported := sorted(set(body) - allowed):
            # A filter (appPkgFilter, appInstanceSubscriptionFilter, ...) left out would make
            # the subscription notify more than asked: refused, never ignored.
            raise ProblemError(400, f"not supported in a {kind}: {', '.join(unsupported)}")
        state = body.get("appInstanceState")
        if kind == INSTANCE_SUBSCRIPTION and state not in (None, *INSTANCE_STATES):
            raise ProblemError(400, f"appInstanceState must be one of {', '.join(INSTANCE_STATES)}")
        callback = body.get("callbackUri")
        if not isinstance(callback, str) or not callback:
            raise ProblemError(400, "callbackUri is required")
        try:
            check_callback(callback, self.registry.callback_networks)
        except CallbackNotAllowedError as exc:
            raise ProblemError(400, str(exc)) from None
        kept = {"subscriptionType": kind, "callbackUri": callback}
        if kind == INSTANCE_SUBSCRIPTION and state is not None:
            kept["appInstanceState"] = state
        with self.db.session() as s:
            row = Subscription(id=uuid.uuid4().hex, api=api, app_instance_id="", body=kept)
            s.add(row)
            return self._subscription_json(row)

    def subscriptions(self, api: str) -> dict[str, Any]:
        with self.db.session() as s:
            rows = s.scalars(select(Subscription).where(Subscription.api == api)
                             .order_by(Subscription.created))  # fmt: skip
            links = [{"href": self._subscription_json(r)["_links"]["self"]["href"],
                      "subscriptionType": r.body["subscriptionType"]} for r in rows]  # fmt: skip
        base = SUBSCRIPTION_APIS[api][0]
        return {"_links": {"self": {"href": f"{self.base_url}{base}/subscriptions"},
                           "subscriptions": links}}  # fmt: skip

    def subscription(self, api: str, sub_id: str, delete: bool,
                     precondition: Precondition = unconditional) -> dict[str, Any]:  # fmt: skip
        with self._writes, self.db.session() as s:
            row = s.get(Subscription, sub_id)
            if row is None or row.api != api:
                raise ProblemError(404, f"subscription {sub_id} does not exist")
            body = self._subscription_json(row)
            if delete:
                precondition(body)
                s.delete(row)
            return body

    def _subscribers(self, api: str, kind: str) -> list[Subscription]:
        with self.db.session() as s:
            rows = s.scalars(select(Subscription).where(Subscription.api == api))
            return [row for row in rows if row.body["subscriptionType"] == kind]

    def _notify_package(self, package: dict[str, Any], notification_type: str) -> None:
        """An AppPkgNotification (AppPackageOnBoarded/Enabled/Disabled/Deleted)."""
        kind = PACKAGE_NOTIFICATIONS[notification_type]
        notification_id = uuid.uuid4().hex
        for sub in self._subscribers("app_pkgm", kind):
            href = self._subscription_json(sub)["_links"]["self"]["href"]
            notification = {"id": notification_id, "notificationType": notification_type,
                            "subscriptionId": sub.id, "timeStamp": timestamp(time.time()),
                            "appPkgId": package["id"], "appDId": package["appDId"],
                            "operationalState": package["operationalState"],
                            "_links": {"subscription": {"href": href}}}  # fmt: skip
            self.registry.notifier.notify(sub.body["callbackUri"], notification, "app_package",
                                          href)  # fmt: skip

    def _notify_instance(self, instance_id: str) -> None:
        """An AppInstNotification of the instance's state (NOT_INSTANTIATED, STARTED or
        STOPPED) to the subscribers that want it."""
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            if row is None:
                return
            state = row.operational_state or "NOT_INSTANTIATED"
            ids = {"appInstanceId": row.id, "appPkgId": row.app_pkg_id, "appDId": row.appd_id}
        notification_id = uuid.uuid4().hex
        for sub in self._subscribers("app_lcm", INSTANCE_SUBSCRIPTION):
            if sub.body.get("appInstanceState", state) != state:
                continue
            href = self._subscription_json(sub)["_links"]["self"]["href"]
            notification = {"id": notification_id, "notificationType": INSTANCE_SUBSCRIPTION,
                            "appInstanceState": state, "subscriptionId": sub.id,
                            "timeStamp": timestamp(time.time()), **ids,
                            "_links": {"subscription": {"href": href}}}  # fmt: skip
            self.registry.notifier.notify(sub.body["callbackUri"], notification, "app_instance",
                                          href)  # fmt: skip

    def _notify_op(self, op: LcmOpOcc) -> None:
        """An AppLcmOpOccNotification of the operation's new state to every subscriber."""
        notification_id = uuid.uuid4().hex  # the same for every subscriber (MEC 010-2)
        for row in self._subscribers("app_lcm", OP_OCC_SUBSCRIPTION):
            sub = self._subscription_json(row)
            notification = {
                "id": notification_id,
                "notificationType": OP_OCC_SUBSCRIPTION,  # as MEC 010-2 v3.1.1 6.2.2.16 says
                "operationType": op.operation,
                "operationState": op.state,
                "subscriptionId": row.id,
                "timeStamp": timestamp(op.state_entered_time),
                "appLcmOpOccId": op.id,
                "appInstanceId": op.app_instance_id,
                "_links": {
                    "appInstance": {"href": f"{self.base_url}{LCM}/app_instances/"
                                            f"{op.app_instance_id}"},
                    "subscription": sub["_links"]["self"],
                    "appLcmOpOcc": {"href": f"{self.base_url}{LCM}/app_lcm_op_occs/{op.id}"},
                },
            }  # fmt: skip
            self.registry.notifier.notify(row.body["callbackUri"], notification, "app_lcm_op_occ",
                                          sub["_links"]["self"]["href"])  # fmt: skip

    def _begin(
        self,
        instance_id: str,
        operation: str,
        params: dict[str, Any],
        want_state: str,
        want_operational: str | None = None,
    ) -> tuple[str, AppD]:
        with self._lifecycle_lock, self.db.session() as s:
            row, appd = self._instance(s, instance_id)
            if self._busy(s, instance_id):
                raise ProblemError(409, "another operation on this app instance is in progress")
            if row.instantiation_state != want_state:
                raise ProblemError(409, f"the app instance is {row.instantiation_state}")
            if want_operational is not None and row.operational_state != want_operational:
                raise ProblemError(409, f"the app instance is {row.operational_state}")
            op = LcmOpOcc(id=uuid.uuid4().hex, app_instance_id=instance_id, operation=operation,
                          state="STARTING", params=params, start_time=time.time(),
                          state_entered_time=time.time())  # fmt: skip
            s.add(op)
        self._notify_op(op)
        return op.id, AppD.model_validate(appd)

    def _background(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    # --- instantiate ------------------------------------------------------------------------

    def instantiate(self, instance_id: str, params: dict[str, Any]) -> dict[str, Any]:
        op_id, appd = self._begin(instance_id, "INSTANTIATE", params, "NOT_INSTANTIATED")
        self._background(self._instantiate, instance_id, op_id, appd)
        return self.op(op_id)

    def _instantiate(self, instance_id: str, op_id: str, appd: AppD) -> None:
        self._set_op(op_id, "PROCESSING")
        try:
            self._load_rules(instance_id, appd)
            self._start_app(instance_id, appd)
        except (BackendError, DataplaneError, OSError) as exc:
            log.error("instantiation failed", app_instance_id=instance_id, error=str(exc))
            self._cleanup(instance_id)
            self._set_op(op_id, "FAILED", str(exc))
            return
        log.info("app instantiated", app_instance_id=instance_id, app=appd.app_name)
        self._set_op(op_id, "COMPLETED")

    def _start_app(self, instance_id: str, appd: AppD) -> None:
        """Start the app with new credentials; it is INSTANTIATED and STARTED, its rules on."""
        client_id, secret = self.authority.create_app_client(instance_id)
        env = {"PLATFORM_URL": self.base_url, "APP_INSTANCE_ID": instance_id,
               "CLIENT_ID": client_id, "CLIENT_SECRET": secret}  # fmt: skip
        self._set_ready(instance_id, False)  # before the start: the app may confirm at once
        ref = self.backend.start(instance_id, appd, env)
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            assert row is not None
            row.instantiation_state, row.operational_state = "INSTANTIATED", "STARTED"
            row.backend, row.backend_ref = self.backend.name, ref
        self.apply_traffic_rules(instance_id)

    def _set_ready(self, instance_id: str, ready: bool) -> None:
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            assert row is not None
            row.ready = ready

    def _load_rules(self, instance_id: str, appd: AppD) -> None:
        with self.db.session() as s:
            for rule in appd.app_traffic_rule:
                s.merge(AppRule(app_instance_id=instance_id, kind="traffic",
                                rule_id=rule.traffic_rule_id, body=rule.dump()))  # fmt: skip
            for dns in appd.app_d_n_s_rule:
                s.merge(AppRule(app_instance_id=instance_id, kind="dns",
                                rule_id=dns.dns_rule_id, body=dns.dump()))  # fmt: skip

    def _stored_traffic_rules(self, instance_id: str) -> list[dict[str, Any]] | None:
        """The rules of an instantiated app with a data plane (None: nothing to apply)."""
        if self.dataplane is None:
            return None
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            if row is None or row.instantiation_state != "INSTANTIATED":
                return None
            return [r.body for r in s.scalars(select(AppRule).where(
                AppRule.app_instance_id == instance_id, AppRule.kind == "traffic"))]  # fmt: skip

    def apply_traffic_rules(self, instance_id: str) -> None:
        rules = self._stored_traffic_rules(instance_id)
        if rules is not None and self.dataplane is not None:
            self.dataplane.sync(instance_id, rules)

    def replace_traffic_rules(self, instance_id: str, rules: list[dict[str, Any]]) -> None:
        """Apply an app's changed rules (not yet stored); if the data plane refuses them,
        put the stored ones back and raise (the caller then stores nothing)."""
        if self._stored_traffic_rules(instance_id) is None or self.dataplane is None:
            return
        try:
            self.dataplane.sync(instance_id, rules)
        except DataplaneError as exc:
            log.error("data plane refused traffic rules", app_instance_id=instance_id,
                      error=str(exc))  # fmt: skip
            try:
                self.apply_traffic_rules(instance_id)
            except DataplaneError as again:
                log.error("cannot restore traffic rules", app_instance_id=instance_id,
                          error=str(again))  # fmt: skip
            raise ProblemError(503, f"the data plane refused the rules: {exc}; nothing "
                               "changed", headers={"Retry-After": "5"}) from None  # fmt: skip

    # --- terminate --------------------------------------------------------------------------

    def terminate(self, instance_id: str, params: dict[str, Any]) -> dict[str, Any]:
        kind = params.get("terminationType", "GRACEFUL")
        if kind not in ("GRACEFUL", "FORCEFUL"):
            raise ProblemError(400, "terminationType must be GRACEFUL or FORCEFUL")
        timeout = params.get("gracefulTerminationTimeout", self.graceful_timeout_s)
        if not isinstance(timeout, int) or timeout < 0:
            raise ProblemError(400, "gracefulTerminationTimeout must be a non-negative integer")
        params = {"terminationType": kind, "gracefulTerminationTimeout": timeout}
        op_id, _ = self._begin(instance_id, "TERMINATE", params, "INSTANTIATED")
        self._background(self._terminate, instance_id, op_id, kind == "GRACEFUL", timeout)
        return self.op(op_id)

    def _terminate(self, instance_id: str, op_id: str, graceful: bool, timeout: int) -> None:
        self._set_op(op_id, "PROCESSING")
        if not self._stop_app(instance_id, op_id, graceful, timeout, "TERMINATING"):
            return
        self._cleanup(instance_id)
        log.info("app terminated", app_instance_id=instance_id)
        self._set_op(op_id, "COMPLETED")

    def _stop_app(self, instance_id: str, op_id: str, graceful: bool, timeout: int,
                  action: str) -> bool:  # fmt: skip
        """Stop the app (after Mp1's handshake with ``action`` if graceful and it runs);
        False, with the operation FAILED, if the backend could not."""
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            assert row is not None
            ref, running = row.backend_ref, row.operational_state == "STARTED"
        if graceful and running:  # a dead app (STOPPED) confirms nothing
            self._graceful_stop(instance_id, timeout, action)
        try:
            if ref:
                self.backend.stop(ref, timeout_s=10)
        except BackendError as exc:
            self._set_op(op_id, "FAILED", str(exc))
            return False
        return True

    def _withdraw(self, instance_id: str) -> None:
        """A stopped or dead app's services, data-plane rules and credentials go."""
        if self.dataplane is not None:
            self.dataplane.remove(instance_id)
        self.registry.remove_services(instance_id)
        self.authority.revoke_app_clients(instance_id)

    def _graceful_stop(self, instance_id: str, timeout: int, action: str) -> None:
        """Mp1's handshake: AppTerminationNotification (STOPPING or TERMINATING), then wait
        for confirm_termination up to the timeout."""
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            assert row is not None
            row.termination_pending = action
        sent = self.registry.notify_termination(instance_id, action, timeout)
        confirmed = self.registry.termination_confirmed[instance_id]
        if sent and not confirmed.wait(timeout):
            log.warning("app did not confirm termination in time", app_instance_id=instance_id,
                        timeout_s=timeout)  # fmt: skip

    def _cleanup(self, instance_id: str) -> None:
        """Remove everything the instance had; it returns to NOT_INSTANTIATED."""
        if self.dataplane is not None:
            self.dataplane.remove(instance_id)
        self.registry.remove_app_resources(instance_id)
        self.authority.revoke_app_clients(instance_id)
        self.registry.termination_confirmed.pop(instance_id, None)
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            if row is not None:
                row.instantiation_state, row.operational_state = "NOT_INSTANTIATED", None
                row.backend_ref, row.ready, row.termination_pending = None, False, None

    # --- operate (MEC 010-2 v3.1.1: start and stop an instantiated app) -------------------

    def operate(self, instance_id: str, params: dict[str, Any]) -> dict[str, Any]:
        target = params.get("changeStateTo")
        if target not in ("STARTED", "STOPPED"):
            raise ProblemError(400, "changeStateTo must be STARTED or STOPPED")
        stop_type = params.get("stopType", "GRACEFUL")
        if stop_type not in ("GRACEFUL", "FORCEFUL"):
            raise ProblemError(400, "stopType must be GRACEFUL or FORCEFUL")
        timeout = params.get("gracefulStopTimeout", self.graceful_timeout_s)
        if not isinstance(timeout, int) or timeout < 0:
            raise ProblemError(400, "gracefulStopTimeout must be a non-negative integer")
        current = "STOPPED" if target == "STARTED" else "STARTED"
        kept = {"changeStateTo": target, "stopType": stop_type, "gracefulStopTimeout": timeout}
        op_id, appd = self._begin(instance_id, "OPERATE", kept, "INSTANTIATED", current)
        if target == "STARTED":
            self._background(self._operate_start, instance_id, op_id, appd)
        else:
            self._background(self._operate_stop, instance_id, op_id,
                             stop_type == "GRACEFUL", timeout)  # fmt: skip
        return self.op(op_id)

    def _operate_start(self, instance_id: str, op_id: str, appd: AppD) -> None:
        self._set_op(op_id, "PROCESSING")
        try:
            self._start_app(instance_id, appd)
        except (BackendError, DataplaneError, OSError) as exc:
            log.error("start failed", app_instance_id=instance_id, error=str(exc))
            self._set_op(op_id, "FAILED", str(exc))
            return
        self._set_op(op_id, "COMPLETED")

    def _operate_stop(self, instance_id: str, op_id: str, graceful: bool, timeout: int) -> None:
        """Stop the app (Mp1's STOPPING handshake first if graceful); it stays INSTANTIATED
        and STOPPED with its rules stored: its services, data-plane rules and credentials go."""
        self._set_op(op_id, "PROCESSING")
        if not self._stop_app(instance_id, op_id, graceful, timeout, "STOPPING"):
            return
        self._withdraw(instance_id)
        self.registry.termination_confirmed.pop(instance_id, None)
        with self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            assert row is not None
            row.operational_state, row.ready, row.termination_pending = "STOPPED", False, None
            row.backend_ref = None
        self._set_op(op_id, "COMPLETED")

    # --- supervision ------------------------------------------------------------------------

    def supervise(self) -> list[str]:
        """Find started apps whose process, container or release is gone; returns their ids.

        A dead app's instance becomes STOPPED and not ready (it stays INSTANTIATED until the
        operator terminates it); its services are removed (subscribers are told REMOVED),
        its data-plane rules (which would steer traffic to nothing) and credentials are
        removed, and the backend reaps what is left of it.
        """
        with self.db.session() as s:
            started = [(row.id, row.backend_ref) for row in s.scalars(select(AppInstance).where(
                AppInstance.instantiation_state == "INSTANTIATED",
                AppInstance.operational_state == "STARTED"))]  # fmt: skip
        dead = []
        for instance_id, ref in started:
            if ref and not self._alive(instance_id, ref) and self._mark_stopped(instance_id):
                self._app_died(instance_id, ref)
                dead.append(instance_id)
        return dead

    def _alive(self, instance_id: str, ref: str) -> bool:
        try:
            return self.backend.alive(ref)
        except BackendError as exc:  # the engine is unreachable: the app may well be fine
            log.warning("cannot check app", app_instance_id=instance_id, error=str(exc))
            return True

    def _mark_stopped(self, instance_id: str) -> bool:
        """STOPPED, unless an operation (e.g. a termination) already owns the instance."""
        with self._lifecycle_lock, self.db.session() as s:
            row = s.get(AppInstance, instance_id)
            if row is None or row.operational_state != "STARTED" or self._busy(s, instance_id):
                return False
            row.operational_state, row.ready = "STOPPED", False
            return True

    def _app_died(self, instance_id: str, ref: str) -> None:
        log.error("app died", app_instance_id=instance_id, backend=self.backend.name, ref=ref)
        self._withdraw(instance_id)
        self._notify_instance(instance_id)
        try:
            self.backend.stop(ref, timeout_s=1)
        except BackendError as exc:
            log.error("cannot reap dead app", app_instance_id=instance_id, error=str(exc))

    def recover(self) -> None:
        """After a restart: operations cut short are FAILED; rules are applied again."""
        with self.db.session() as s:
            for op in s.scalars(select(LcmOpOcc).where(
                    LcmOpOcc.state.in_(("STARTING", "PROCESSING")))):  # fmt: skip
                op.state, op.error = "FAILED", "the platform restarted during the operation"
                op.state_entered_time = time.time()
            live = [row.id for row in s.scalars(select(AppInstance).where(
                AppInstance.instantiation_state == "INSTANTIATED"))]  # fmt: skip
        for instance_id in live:
            try:
                self.apply_traffic_rules(instance_id)
            except DataplaneError as exc:
                log.error("cannot restore traffic rules", app_instance_id=instance_id,
                          error=str(exc))  # fmt: skip

    def join(self, timeout: float = 30) -> None:
        for thread in self._threads:
            thread.join(timeout)
