"""Helpers of the adapter's integration tests: the real binaries (build/bin), the synthetic
FlexRAN source, RabbitMQ (the shared broker with a unique exchange per test, or a private
node for restart tests), an HTTP callback server for MEC 012 notifications."""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pika

from mec_common.ports import free_port

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "build" / "bin"
SHARED_AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
TOKEN = "test-token"
RNIS_APPD = """
appDId: rnis
appName: rnis-adapter
appProvider: mts
appSoftVersion: "0.1"
appDVersion: "1"
appServiceProduced:
  - {serName: rnis, version: "2.1.1"}
"""


def app_credentials(platform: Any) -> tuple[str, str, str]:
    """A new app instance of the RNIS AppD on a platform (mec_platform.testing.Running):
    its id, client id and client secret."""
    r = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": "rnis"})
    assert r.status_code == 201, r.text
    instance = r.json()["id"]
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{instance}/credentials").json()
    return instance, creds["clientId"], creds["clientSecret"]


def binary(name: str) -> Path:
    """The built binary; built here when a developer runs pytest without make."""
    path = BIN / name
    if not path.exists():
        subprocess.run(
            ["go", "build", "-o", str(path), f"./rnis-adapter/cmd/{name}"], cwd=REPO, check=True
        )
    return path


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Proc:
    """A child process in its own process group, stopped by its id (never by name)."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._file = log.open("wb")
        self.p = subprocess.Popen(
            args,
            stdout=self._file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10) -> int:
        if self.alive():
            os.killpg(self.p.pid, sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)
        self._file.close()
        return int(self.p.returncode)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class FlexranSource:
    """build/bin/flexran-source on a free port."""

    def __init__(
        self,
        tmp: Path,
        ues: int = 2,
        cells: int = 1,
        refresh: str = "5ms",
        port: int = 0,
        e2: bool = False,
        e2_port: int = 0,
        e2_token: str = "",
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # with e2, the same UEs also as an mts-e2 stream (docs/e2.md) at e2_addr
        self.e2_addr, self.e2_token = "", ""
        e2_args = []
        if e2:
            self.e2_addr = f"127.0.0.1:{e2_port or free_port()}"
            self.e2_token = e2_token or secrets.token_hex(16)
            e2_args = [f"--e2-listen={self.e2_addr}", f"--e2-token={self.e2_token}"]
        self.proc = Proc(
            [
                str(binary("flexran-source")),
                f"--ues={ues}",
                f"--cells={cells}",
                f"--refresh={refresh}",
                f"--listen=127.0.0.1:{self.port}",
                *e2_args,
            ],
            tmp / f"source-{self.port}.log",
        )
        wait_for(self._up, 10, "the FlexRAN source")

    def _up(self) -> bool:
        try:
            return httpx.get(self.url + "/stats", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def control(self, action: str, **params: Any) -> None:
        r = httpx.post(f"{self.url}/source/{action}", params=params, timeout=5)
        r.raise_for_status()


@dataclass
class Adapter:
    """build/bin/rnis-adapter serve, configured by RNIS_* variables."""

    tmp: Path
    flexran_url: str
    exchange: str
    amqp_url: str = SHARED_AMQP
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: Proc | None = None

    def start(self) -> Adapter:
        self.port = free_port()
        env = {
            "RNIS_HTTP_HOST": "127.0.0.1",
            "RNIS_HTTP_PORT": str(self.port),
            "RNIS_API_TOKENS": TOKEN,
            "RNIS_STATE_DIR": str(self.tmp / "state"),
            "RNIS_AMQP_URL": self.amqp_url,
            "RNIS_AMQP_EXCHANGE": self.exchange,
            "RNIS_FLEXRAN_URL": self.flexran_url,
            "RNIS_POLL_PERIOD": "10ms",
            "RNIS_DETACH_AFTER": "200ms",
            "RNIS_LOG_FORMAT": "json",
            **self.env,
        }
        self.proc = Proc(
            [str(binary("rnis-adapter")), "serve"], self.tmp / f"adapter-{self.port}.log", env
        )
        wait_for(self._listening, 10, "the adapter's HTTP port")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listening(self) -> bool:
        assert self.proc is not None
        if not self.proc.alive():
            raise AssertionError(f"adapter exited:\n{self.proc.output()}")
        try:
            httpx.get(self.url + "/healthz", timeout=1)
            return True
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any]:
        return dict(httpx.get(self.url + "/healthz", timeout=2).json())

    def get(self, path: str, token: str | None = TOKEN, **params: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.url + path, params=params, headers=headers, timeout=5)

    def request(self, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        return httpx.request(method, self.url + path, json=body, headers=headers, timeout=5)

    def stop(self) -> int:
        return self.proc.stop() if self.proc else 0


class Consumer:
    """A pika consumer on an exclusive queue bound to the exchange with some keys."""

    def __init__(self, url: str, exchange: str, bindings: list[str]) -> None:
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()
        self.ch.exchange_declare(exchange, "topic", durable=True)
        self.queue = self.ch.queue_declare("", exclusive=True).method.queue
        for key in bindings:
            self.ch.queue_bind(self.queue, exchange, routing_key=key)

    def collect(
        self, seconds: float, limit: int = 100_000, until: Any = None
    ) -> list[tuple[str, dict[str, Any], Any]]:
        """(routing key, body, properties) of what arrives within ``seconds``, or until
        ``until(messages)`` is true (then ``seconds`` is only a deadline, for busy hosts)."""
        out: list[tuple[str, dict[str, Any], Any]] = []
        deadline = time.monotonic() + seconds
        for method, props, body in self.ch.consume(
            self.queue, auto_ack=True, inactivity_timeout=0.1
        ):
            if method is not None:
                out.append((method.routing_key, json.loads(body), props))
                if until is not None and until(out):
                    break
            if time.monotonic() > deadline or len(out) >= limit:
                break
        self.ch.cancel()
        return out

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()


class PrivateBroker:
    """A RabbitMQ node of our own (node name, ports, data dir), so that a test can stop and
    restart it without touching the shared broker."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "rabbitmq"
        self.dir.mkdir()
        (self.dir / "plugins").write_text("")
        self.port = free_port()
        while self.port + 20000 > 65535:
            self.port = free_port()
        self.name = f"rnis-test-{uuid.uuid4().hex[:8]}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.proc: Proc | None = None

    def start(self, timeout: float = 90) -> None:
        env = {
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.port + 20000),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "plugins"),
            "RABBITMQ_PID_FILE": str(self.dir / "pid"),
            "HOME": str(self.dir),
        }
        server = shutil.which("rabbitmq-server", path="/usr/lib/rabbitmq/bin") or "rabbitmq-server"
        self.proc = Proc([server], self.dir / "server.log", env)
        wait_for(self.accepting, timeout, "the private RabbitMQ node", interval=0.2)

    def accepting(self) -> bool:
        assert self.proc is not None
        if not self.proc.alive():
            raise AssertionError(f"private RabbitMQ exited:\n{self.proc.output()[-3000:]}")
        try:
            pika.BlockingConnection(pika.URLParameters(self.url)).close()
            return True
        except pika.exceptions.AMQPError:
            return False

    def stop(self) -> None:
        if self.proc:
            self.proc.stop(timeout=30)


class CallbackServer:
    """A real HTTP server collecting notification POSTs."""

    def __init__(self) -> None:
        received: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                received.put((self.path, json.loads(self.rfile.read(length))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, predicate: Any, timeout: float = 10) -> tuple[str, dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                path, body = self.received.get(timeout=0.1)
            except queue.Empty:
                continue
            if predicate(path, body):
                return path, body
        raise AssertionError("no matching notification arrived")

    def close(self) -> None:
        self.server.shutdown()
