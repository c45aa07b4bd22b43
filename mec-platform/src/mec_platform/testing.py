"""A real platform for tests (ours and other components'): uvicorn on a free port,
HTTP callback receivers, and helpers to onboard apps and get app credentials."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from mec_common.api import uvicorn_options
from mec_common.ports import free_port
from mec_platform.app import Platform, build_platform
from mec_platform.config import PlatformSettings

ADMIN_SECRET = "admin-test-secret"  # noqa: S105 - the test platform's admin secret
HTTP_TIMEOUT = 60  # s; only a guard against a hang: a busy shared machine is slow


class Running:
    """A platform served by uvicorn in a thread, plus an admin HTTP client."""

    def __init__(self, settings: PlatformSettings) -> None:
        self.settings = settings
        self.platform: Platform = build_platform(settings)
        config = uvicorn.Config(self.platform.app, host=settings.http_host, port=settings.http_port,
                                **uvicorn_options(settings))  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60  # generous: the machine is shared
        while not self.server.started:
            assert time.monotonic() < deadline, "platform did not start"
            time.sleep(0.02)
        self.url = settings.base_url()
        self.admin = self.client("admin", ADMIN_SECRET)

    def token(self, client_id: str, secret: str) -> str:
        # scrypt checks the secret: seconds on a busy machine (httpx's default is 5 s)
        r = httpx.post(f"{self.url}/oauth2/token", data={"grant_type": "client_credentials"},
                       auth=(client_id, secret), timeout=HTTP_TIMEOUT)  # fmt: skip
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])

    def client(self, client_id: str, secret: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token(client_id, secret)}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=HTTP_TIMEOUT)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.platform.close()


@contextmanager
def running_platform(state_dir: Path, **overrides: Any) -> Iterator[Running]:
    """A platform on a free port for the duration of the block (a fixture's body)."""
    running = Running(make_settings(state_dir, **overrides))
    try:
        yield running
    finally:
        running.stop()
        end_leftover_apps(state_dir)


def end_leftover_apps(state_dir: Path) -> list[int]:
    """Kill the app processes a test's platform started and left running.

    An app outlives its platform by design (a restarted platform adopts it), so a test that
    ends with an instance still instantiated would leave its process behind for good. The
    process backend runs each app in its own directory under the state directory: that is
    how its processes are found (including after the directory was deleted)."""
    root = str(state_dir.resolve())
    killed = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cwd = str((proc / "cwd").readlink()).removesuffix(" (deleted)")
        except OSError:  # gone, or not ours to read
            continue
        pid = int(proc.name)
        if pid != os.getpid() and (cwd == root or cwd.startswith(root + os.sep)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed


def make_settings(state_dir: Path, **overrides: Any) -> PlatformSettings:
    values: dict[str, Any] = {
        "state_dir": state_dir,
        "http_host": "127.0.0.1",
        "http_port": free_port(),
        "admin_client_secret": ADMIN_SECRET,
        "notify_backoff_s": 0.05,
        "graceful_timeout_s": 5,
        "liveness_check_s": 0.2,
        "supervision_s": 0.2,
        **overrides,
    }
    return PlatformSettings(**values)


@dataclass
class Receiver:
    """An HTTP server that records the JSON bodies POSTed to it."""

    fail_first: int = 0  # answer 503 to this many requests first (to exercise retries)
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    attempts: int = 0
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.arrived:
                    receiver.attempts += 1
                    failing = receiver.attempts <= receiver.fail_first
                    if not failing:
                        receiver.received.append(json.loads(body))
                        receiver.headers.append(dict(self.headers))
                        receiver.arrived.notify_all()
                self.send_response(503 if failing else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/notify"

    def wait_for(self, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.received) >= count, timeout)
            return list(self.received)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SIMPLE_APPD = """
appDId: test-app
appName: test-app
appProvider: mts-tests
appSoftVersion: "1.0"
appDVersion: "1"
appServiceProduced:
  - {serName: test-service, version: v1}
appTrafficRule:
  - trafficRuleId: intercept-http
    filterType: FLOW
    priority: 1
    trafficFilter: [{protocol: [tcp], dstPort: ["80"]}]
    action: FORWARD_DECAPSULATED
    dstInterface: {interfaceType: IP, dstIpAddress: 127.0.0.1, dstPort: 5000}
appDNSRule:
  - {dnsRuleId: dns1, domainName: app.mec.local, ipAddressType: IP_V4, ipAddress: 10.0.0.1}
"""


def onboard(platform: Running, appd: str = SIMPLE_APPD) -> dict[str, Any]:
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=appd,
                            headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert r.status_code == 201, r.text
    return dict(r.json())


def app_credentials(platform: Running, appd_id: str) -> dict[str, str]:
    """A new app instance of ``appd_id``, run outside the backends: the settings a service
    needs to log in as it (``app_instance_id``, ``client_id``, ``client_secret``)."""
    r = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": appd_id})
    assert r.status_code == 201, r.text
    instance_id = r.json()["id"]
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{instance_id}/credentials").json()
    return {"app_instance_id": instance_id, "client_id": creds["clientId"],
            "client_secret": creds["clientSecret"]}  # fmt: skip


def external_app(platform: Running, appd_id: str = "test-app") -> tuple[str, httpx.Client]:
    """An app instance run outside the backends: its id and a client with its token."""
    creds = app_credentials(platform, appd_id)
    return creds["app_instance_id"], platform.client(creds["client_id"], creds["client_secret"])


def wait_op(platform: Running, op: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    seen = [op["operationState"]]
    while op["operationState"] not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, f"operation stuck in {seen}"
        time.sleep(0.05)
        op = platform.admin.get(f"/app_lcm/v1/app_lcm_op_occs/{op['id']}").json()
        if op["operationState"] != seen[-1]:
            seen.append(op["operationState"])
    return op


def wait_termination_subscribed(platform: Running, instance_id: str) -> None:
    """Until the app has subscribed to its termination notification: an Mp1 app registers
    its services first (discovery shows them earlier), and a stop before the subscription
    exists has nobody to notify."""
    url = f"/mec_app_support/v1/applications/{instance_id}/subscriptions"
    wait_until(lambda: platform.admin.get(url).json().get("_links", {}).get("subscriptions"),
               what="the app's termination subscription")  # fmt: skip


def wait_until(predicate: Any, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
