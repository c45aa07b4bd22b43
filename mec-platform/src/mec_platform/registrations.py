"""MEC app registration (MEC 011 v3.1.1, ``/mec_app_support/v1/registrations``).

An app instance that this platform instantiated tells the platform its AppInfo (e.g. the
endpoint of its application server, its EAS profile). The platform knows apps only from
their AppD and instantiation, so deny by default: only an instance it instantiated
(``isInsByMec`` true) registers, only itself, and only what agrees with its AppD. An app
without an AppD (``isInsByMec`` false) is refused with 403 rather than let in on its word.
"""

from __future__ import annotations

import threading
from typing import Any

from mec_common.api import ProblemError
from mec_common.auth import Principal
from mec_common.rest_policy import Precondition, unconditional
from mec_platform.db import AppInstance, AppPackage, AppRegistration, Database
from mec_platform.models import AppInfo
from mec_platform.registry import APP_SUPPORT

# AppInfo members that "shall not be provided if an AppD is available" (every app here has one).
_FROM_APPD_ONLY = {"appServiceRequired": "app_service_required",
                   "appServiceOptional": "app_service_optional",
                   "appFeatureRequired": "app_feature_required",
                   "appFeatureOptional": "app_feature_optional"}  # fmt: skip


class Registrations:
    def __init__(self, db: Database, base_url: str) -> None:
        self.db = db
        self.base_url = base_url
        # Check-then-write under one lock: two registrations of one instance cannot both
        # pass the "not registered yet" check (the platform is one process).
        self._writes = threading.Lock()

    def location(self, app_instance_id: str) -> str:
        return f"{self.base_url}{APP_SUPPORT}/registrations/{app_instance_id}"

    def register(self, principal: Principal, info: AppInfo) -> dict[str, Any]:
        """201's body; the caller registers itself (its token names its instance)."""
        if principal.app_instance_id is None:
            raise ProblemError(403, "only a MEC application instance registers, with its own "
                               "token")  # fmt: skip
        app_instance_id = principal.app_instance_id
        with self._writes, self.db.session() as s:
            self._check(s, app_instance_id, info)
            if s.get(AppRegistration, app_instance_id) is not None:
                raise ProblemError(400, "this application instance is registered already; PUT "
                                   f"{self.location(app_instance_id)} updates it")  # fmt: skip
            body = info.dump()
            s.add(AppRegistration(app_instance_id=app_instance_id, app_info=body))
        return body

    def get(self, app_instance_id: str) -> dict[str, Any]:
        with self.db.session() as s:
            return self._row(s, app_instance_id).app_info

    def update(self, app_instance_id: str, info: AppInfo,
               precondition: Precondition = unconditional) -> None:  # fmt: skip
        with self._writes, self.db.session() as s:
            row = self._row(s, app_instance_id)  # existence first (MEC 011 lists 404)
            self._check(s, app_instance_id, info)
            precondition(row.app_info)
            row.app_info = info.dump()

    def deregister(self, app_instance_id: str, precondition: Precondition = unconditional) -> None:
        with self._writes, self.db.session() as s:
            row = self._row(s, app_instance_id)
            precondition(row.app_info)
            s.delete(row)

    @staticmethod
    def _row(s: Any, app_instance_id: str) -> AppRegistration:
        # Ownership was checked by the route's authentication (path appInstanceId).
        row: AppRegistration | None = s.get(AppRegistration, app_instance_id)
        if row is None:
            raise ProblemError(404, f"application instance {app_instance_id} is not registered")
        return row

    @staticmethod
    def _check(s: Any, app_instance_id: str, info: AppInfo) -> None:
        """The AppInfo agrees with the instance and its AppD (400 naming what does not)."""
        if not info.is_ins_by_mec:
            raise ProblemError(403, "this platform registers only application instances it "
                               "instantiated (isInsByMec true); an app without an AppD cannot "
                               "register")  # fmt: skip
        if info.app_instance_id is None:
            raise ProblemError(400, "appInstanceId is required of an instance the platform "
                               "instantiated")  # fmt: skip
        if info.app_instance_id != app_instance_id:
            raise ProblemError(403, f"this token registers only its own application instance "
                               f"({app_instance_id})")  # fmt: skip
        instance: AppInstance | None = s.get(AppInstance, app_instance_id)
        if instance is None:
            raise ProblemError(404, f"application instance {app_instance_id} does not exist")
        package: AppPackage | None = s.get(AppPackage, instance.app_pkg_id)
        appd = package.appd if package is not None else {}
        if info.app_d_id != instance.appd_id:
            raise ProblemError(400, f"appDId must be the instance's AppD ({instance.appd_id})")
        for name, given in (("appName", info.app_name), ("appProvider", info.app_provider)):
            if given is not None and given != appd.get(name):
                raise ProblemError(400, f"{name} must be the AppD's ({appd.get(name)})")
        given_by_appd = [wire for wire, field in _FROM_APPD_ONLY.items()
                         if getattr(info, field) is not None]  # fmt: skip
        if given_by_appd:
            raise ProblemError(400, f"{', '.join(given_by_appd)}: the AppD says these; they "
                               "shall not be provided when an AppD is available")  # fmt: skip
