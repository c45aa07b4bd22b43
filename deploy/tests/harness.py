"""Helpers of the deployment tests: run a command, a docker compose project of the suite.

Everything is unique per run (project name, testbed name, host ports, credentials), so
the tests run beside other developers' work on the same machine.
"""

from __future__ import annotations

import json
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's CLI (docker-engine.sh explains why)
SERVICES = ("platform", "rnis-adapter", "pep", "path-manager")


def run(*cmd: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    """Run a command; fail the test with its output if it fails."""
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Stack:
    """A running docker compose project (profile emulated)."""

    project: str
    testbed: str
    env: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def token(self) -> str:
        return self.env["MTS_API_TOKEN"]

    def compose(self, *args: str, timeout: float = 300) -> str:
        return run(DOCKER, "compose", "--profile", "emulated", *args, env=self.env, timeout=timeout)

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


def dump(stack: Stack) -> str:
    try:
        ps = stack.compose("ps", "-a")
        logs = stack.compose("logs", "--no-color", "--tail", "30")
    except BaseException as exc:  # diagnostics only
        return f"(no diagnostics: {exc})"
    return f"{ps}\n{logs}"
