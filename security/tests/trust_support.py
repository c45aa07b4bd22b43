"""The security suite's pieces. The whole trust boundary, up for real: the MEC platform
(uvicorn on a port), and as processes with their platform credentials the PEP, the path
manager and the RNIS adapter (Go, fed by the FlexRAN source), each registered on the
platform. Apps' tokens of every kind are minted the way an attacker would get them
(docs/security.md). The RNIS tests' process helpers are reused (rnis_helpers)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pika
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.append(str(REPO / "rnis-adapter" / "tests"))

from rnis_helpers import (  # noqa: E402
    SHARED_AMQP,
    Adapter,
    FlexranSource,
    Proc,
    free_port,
    wait_for,
)

from mec_platform.testing import Running  # noqa: E402

HTTP = httpx.Client(timeout=60)  # generous: the machine is shared
APPDS = REPO / "mec-platform" / "appds"
STATIC = "static-operator-token"
HEADER_TIMEOUT_S = 2.0
ROGUE_APPD = """
appDId: rogue
appName: rogue
appProvider: someone
appSoftVersion: "1"
appDVersion: "1"
appServiceProduced:
  - {serName: rogue-service, version: v1}
"""
CONSUMER_APPD = """
appDId: consumer
appName: consumer
appProvider: someone
appSoftVersion: "1"
appDVersion: "1"
appServiceRequired:
  - {serName: pep, version: v1}
  - {serName: path-manager, version: v1}
  - {serName: rnis, version: "2.1.1"}
"""


@dataclass
class App:
    instance: str
    client_id: str
    secret: str


@dataclass
class Service:
    name: str
    url: str
    proc: Proc


@dataclass
class System:
    platform: Running
    apps: dict[str, App]
    services: dict[str, Service] = field(default_factory=dict)

    def token(self, app: str) -> str:
        a = self.apps[app]
        return self.platform.token(a.client_id, a.secret)

    def new_app(self, appd_id: str) -> App:
        r = self.platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": appd_id})
        assert r.status_code == 201, r.text
        instance = r.json()["id"]
        creds = self.platform.admin.post(f"/app_lcm/v1/app_instances/{instance}/credentials")
        assert creds.status_code == 201, creds.text
        return App(instance, creds.json()["clientId"], creds.json()["clientSecret"])


def exchange_name() -> Iterator[str]:
    try:
        pika.BlockingConnection(pika.URLParameters(SHARED_AMQP)).close()
    except pika.exceptions.AMQPError:
        pytest.fail("RabbitMQ is not running: start it with `make rabbitmq`")
    name = f"sec-test-{uuid.uuid4().hex[:10]}"
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(SHARED_AMQP))
    conn.channel().exchange_delete(name)
    conn.close()


def python_service(name: str, module: str, prefix: str, app: App, platform: Running,
                    tmp: Path, **extra: str) -> Service:  # fmt: skip
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {f"{prefix}{k}": v for k, v in {
        "HTTP_HOST": "127.0.0.1", "HTTP_PORT": str(port), "PUBLIC_URL": url,
        "API_TOKENS": STATIC, "STATE_DIR": str(tmp / name), "LOG_FORMAT": "console",
        "PLATFORM_URL": platform.url, "APP_INSTANCE_ID": app.instance,
        "CLIENT_ID": app.client_id, "CLIENT_SECRET": app.secret,
        "HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S), **extra}.items()}  # fmt: skip
    proc = Proc([sys.executable, "-m", module, "serve"], tmp / f"{name}.log", env)
    return Service(name, url, proc)


def ready(service: Service) -> bool:
    if not service.proc.alive():
        raise AssertionError(f"{service.name} exited:\n{service.proc.output()}")
    try:
        return httpx.get(service.url + "/healthz", timeout=2).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def registered(platform: Running, ser_name: str) -> bool:
    r = platform.admin.get("/mec_service_mgmt/v1/services", params={"ser_name": ser_name})
    return r.status_code == 200 and len(r.json()) > 0


def bearer(token: str | None) -> dict[str, str]:
    if token is None:
        return {}
    if token.startswith("Basic-"):  # another scheme altogether
        return {"Authorization": "Basic YWRtaW46YWRtaW4="}
    return {"Authorization": f"Bearer {token}"}


def snapshot(system: System) -> dict[str, Any]:
    """What an attack could change, read with operator tokens."""
    admin = system.platform.admin
    out: dict[str, Any] = {
        "instances": admin.get("/app_lcm/v1/app_instances").json(),
        "packages": admin.get("/app_pkgm/v1/app_packages").json(),
        "services": admin.get("/mec_service_mgmt/v1/services").json(),
    }
    for app in system.apps.values():
        for api in ("mec_service_mgmt", "mec_app_support"):
            out[f"{api} {app.instance}"] = admin.get(
                f"/{api}/v1/applications/{app.instance}/subscriptions").json()  # fmt: skip
        registration = admin.get(f"/mec_app_support/v1/registrations/{app.instance}")
        out[f"registration {app.instance}"] = (registration.status_code, registration.text)
    static = bearer(STATIC)
    pep, pm, rnis = (system.services[k].url for k in ("pep", "pm", "rnis"))
    out["pep config"] = HTTP.get(f"{pep}/pep/v1/config", headers=static).json()
    out["pm control"] = HTTP.get(f"{pm}/pm/v1/control", headers=static).json()
    out["pm ues"] = HTTP.get(f"{pm}/pm/v1/ues", headers=static).json()
    out["rnis subscriptions"] = HTTP.get(f"{rnis}/rni/v2/subscriptions", headers=static).json()
    for volatile in ("effective_ran_buffers",):
        out["pep config"].pop(volatile, None)
    for service in out["services"]:  # heartbeats move these
        service.pop("_links", None)
    return out


__all__ = ["Adapter", "FlexranSource", "free_port", "wait_for"]  # used by the suite
