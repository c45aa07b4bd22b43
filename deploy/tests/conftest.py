"""Fixtures of the deployment tests: the Docker engine, a docker compose project of the
suite with the emulated RAN, and helpers to run commands in it.

Everything is unique per run (project name, testbed name, host ports, credentials), so
the tests run beside other developers' work on the same machine.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"  # Debian's CLI (docker-engine.sh explains why)
SERVICES = ("platform", "rnis-adapter", "pep")
API_PORTS = {"platform": 8100, "rnis-adapter": 8101, "pep": 8102}


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


@pytest.fixture(scope="session")
def docker_engine() -> None:
    run(str(REPO / "deploy/scripts/docker-engine.sh"), "ensure")
    run(DOCKER, "compose", "version")


def _dump(stack: Stack) -> str:
    try:
        ps = stack.compose("ps", "-a")
        logs = stack.compose("logs", "--no-color", "--tail", "30")
    except BaseException as exc:  # diagnostics only
        return f"(no diagnostics: {exc})"
    return f"{ps}\n{logs}"


@pytest.fixture(scope="module")
def stack(docker_engine: None) -> Iterator[Stack]:
    """The suite with the emulated RAN, up and healthy; removed afterwards, also on failure."""
    suffix = secrets.token_hex(3)
    s = Stack(project=f"mtst{suffix}", testbed=f"t{suffix}", env=dict(os.environ))
    s.ports = {name: free_port() for name in (*SERVICES, "rabbitmq", "rabbitmq-management")}
    s.env.update(
        MTS_PROJECT=s.project,
        TESTBED_NAME=s.testbed,
        MTS_AMQP_PASSWORD=secrets.token_hex(16),
        MTS_API_TOKEN=secrets.token_hex(16),
        PLATFORM_ADMIN_CLIENT_SECRET=secrets.token_hex(16),
        TESTBED_EMULATOR_TOKEN=secrets.token_hex(16),
        PEP_MELD_INSTANCE=s.project,  # congestion control names are global to the kernel
        PLATFORM_HOST_PORT=str(s.ports["platform"]),
        RNIS_HOST_PORT=str(s.ports["rnis-adapter"]),
        PEP_HOST_PORT=str(s.ports["pep"]),
        PM_HOST_PORT=str(free_port()),
        RABBITMQ_HOST_PORT=str(s.ports["rabbitmq"]),
        RABBITMQ_MANAGEMENT_HOST_PORT=str(s.ports["rabbitmq-management"]),
    )
    try:
        started = time.monotonic()
        done = subprocess.run(
            [
                DOCKER,
                "compose",
                "--profile",
                "emulated",
                "up",
                "--detach",
                "--no-build",
                "--wait",
                "--wait-timeout",
                "240",
            ],
            capture_output=True,
            text=True,
            env=s.env,
            cwd=REPO,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"compose up failed:\n{done.stderr}\n{_dump(s)}")
        print(f"compose up (profile emulated): healthy after {time.monotonic() - started:.0f} s")
        yield s
    finally:
        s.down()
