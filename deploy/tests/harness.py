"""Helpers of the deployment tests: run a command, a docker compose project of the suite.

Everything is unique per run (project name, testbed name, host ports, credentials), so
the tests run beside other developers' work on the same machine.
"""

from __future__ import annotations

import json
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's CLI (docker-engine.sh explains why)
SERVICES = ("platform", "rnis-adapter", "pep", "path-manager", "dashboard", "flowrtt")
CHART = REPO / "charts/mec-transport-suite"
CLUSTER = REPO / "deploy/k8s/cluster.sh"


def run(*cmd: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command; fail the test with its output if it fails."""
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def tool(name: str) -> str:
    """A deployment tool built and cached by deploy/scripts/tools.sh (helm, kubectl)."""
    return run(str(REPO / "deploy/scripts/tools.sh"), "path").strip() + f"/{name}"


def helm() -> str:
    return tool("helm")


# The port variables of docker-compose.yml, by what listens there.
PORT_VARIABLES = {
    "platform": "PLATFORM_HTTP_PORT",
    "rnis-adapter": "RNIS_HTTP_PORT",
    "pep": "PEP_HTTP_PORT",
    "path-manager": "PM_HTTP_PORT",
    "dashboard": "DASHBOARD_HTTP_PORT",
    "flowrtt": "FLOWRTT_HTTP_PORT",
    "rabbitmq": "MTS_AMQP_PORT",
    "rabbitmq-management": "MTS_AMQP_MANAGEMENT_PORT",
    "rabbitmq-metrics": "MTS_AMQP_METRICS_PORT",
}


def env_file(kind: str, path: Path, **overrides: str) -> dict[str, str]:
    """Write what a user writes: `deploy/compose/env.sh <kind> > .env`, then their edits
    (appended, so they win, as a later line of .env does); return the variables."""
    text = run(str(REPO / "deploy/compose/env.sh"), kind)
    text += "".join(f"{k}={v}\n" for k, v in overrides.items())
    path.write_text(text)
    path.chmod(0o600)
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#")
    return dict(pairs)


@dataclass
class Stack:
    """A docker compose project of the suite, configured by one env file (its `.env`)."""

    project: str
    env_file: Path
    settings: dict[str, str]
    testbed: str = ""
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return self.settings["MTS_API_TOKEN"]

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        cmd = (DOCKER, "compose", "--env-file", str(self.env_file), *args)
        if check:
            return run(*cmd, timeout=timeout)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              check=False)  # fmt: skip
        return f"exit {done.returncode}\n{done.stdout}{done.stderr}"

    def up(self, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """`docker compose up -d --wait`: the documented command."""
        cmd = (DOCKER, "compose", "--env-file", str(self.env_file), "up", "--detach",
               "--no-build", "--wait", "--wait-timeout", str(int(timeout)))  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60,
                              cwd=REPO, check=False)  # fmt: skip

    def url(self, service: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}{path}"

    def exec(self, service: str, *cmd: str, timeout: float = 120) -> str:
        return self.compose("exec", "-T", service, *cmd, timeout=timeout)

    def in_netns(self, role: str, *cmd: str, timeout: float = 120) -> str:
        """Run cmd in one of the testbed's namespaces (server, ran, ue1, ...)."""
        return self.exec(
            "testbed", "ip", "netns", "exec", f"{self.testbed}-{role}", *cmd, timeout=timeout
        )

    def topology(self) -> dict[str, object]:
        raw = self.exec("testbed", "cat", f"/run/mts-testbed/{self.testbed}.json")
        return dict(json.loads(raw))

    def down(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "30")

    def leftovers(self) -> dict[str, list[str]]:
        """What of this project still exists on the machine."""
        label = f"label=com.docker.compose.project={self.project}"
        found = {
            kind: run(DOCKER, kind, "ls", "-q", *flags, "--filter", label).split()
            for kind, flags in (("container", ["-a"]), ("volume", []), ("network", []))
        }
        netns = run("ip", "netns", "list")
        found["netns"] = [ns for ns in netns.split() if ns.startswith(f"{self.testbed}-")]
        return found

    def states(self) -> dict[str, tuple[str, str]]:
        """service -> (state, health) of every container, also exited ones."""
        rows = [
            json.loads(line) for line in self.compose("ps", "-a", "--format", "json").splitlines()
        ]
        return {row["Service"]: (row["State"], row.get("Health", "")) for row in rows}

    def admin_token(self) -> str:
        """An access token of the platform admin (client credentials)."""
        r = httpx.post(self.url("platform", "/oauth2/token"), timeout=10,
                       data={"grant_type": "client_credentials"},
                       auth=("admin", self.settings["PLATFORM_ADMIN_CLIENT_SECRET"]))  # fmt: skip
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])


@dataclass
class Kube:
    """A client of the test cluster's API, with the admin's token."""

    kubeconfig: Path
    http: httpx.Client

    @classmethod
    def connect(cls, kubeconfig: Path) -> Kube:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        http = httpx.Client(
            base_url=cluster["server"],
            verify=ssl.create_default_context(cafile=cluster["certificate-authority"]),
            headers={"Authorization": f"Bearer {user['token']}"},
            timeout=30,
        )
        return cls(kubeconfig, http)

    def resource_path(self, obj: dict[str, Any], namespace: str) -> str:
        """The collection URL of an object's kind, found by API discovery."""
        group_version = obj["apiVersion"]
        base = f"/api/{group_version}" if "/" not in group_version else f"/apis/{group_version}"
        resources = self.http.get(base).raise_for_status().json()["resources"]
        kind = next(r for r in resources if r["kind"] == obj["kind"] and "/" not in r["name"])
        ns = f"/namespaces/{namespace}" if kind["namespaced"] else ""
        return f"{base}{ns}/{kind['name']}"

    def dry_run_create(self, obj: dict[str, Any], namespace: str) -> httpx.Response:
        return self.http.post(
            self.resource_path(obj, namespace),
            params={"dryRun": "All", "fieldValidation": "Strict"},
            json=obj,
        )

    def apply_file(self, path: Path) -> None:
        for obj in yaml.safe_load_all(path.read_text()):
            r = self.http.post(self.resource_path(obj, "default"), json=obj)
            assert r.status_code in (201, 409), r.text

    def names(self, namespace: str, resource: str) -> list[str]:
        r = self.http.get(f"{resource.format(ns=namespace)}").raise_for_status()
        return sorted(item["metadata"]["name"] for item in r.json()["items"])


def dump(stack: Stack) -> str:
    try:
        ps = stack.compose("ps", "-a")
        logs = stack.compose("logs", "--no-color", "--tail", "30", check=False)
    except BaseException as exc:  # diagnostics only
        return f"(no diagnostics: {exc})"
    return f"{ps}\n{logs}"
