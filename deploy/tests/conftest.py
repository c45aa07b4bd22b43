"""Fixtures of the deployment tests: the Docker engine and a docker compose project of the
suite with the emulated RAN (helpers in harness.py)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import harness

from harness import DOCKER, REPO, SERVICES, Stack, dump, free_port, run


@pytest.fixture(scope="session")
def docker_engine() -> None:
    run(str(REPO / "deploy/scripts/docker-engine.sh"), "ensure")
    run(DOCKER, "compose", "version")


@pytest.fixture(scope="module")
def stack(docker_engine: None) -> Iterator[Stack]:
    """The suite with the emulated RAN, up and healthy; removed afterwards, also on failure."""
    suffix = secrets.token_hex(3)
    s = Stack(project=f"mtst{suffix}", testbed=f"t{suffix}", env=dict(os.environ))
    s.ports = {
        name: free_port()
        for name in (*SERVICES, "rabbitmq", "rabbitmq-management", "rabbitmq-metrics")
    }
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
        PM_HOST_PORT=str(s.ports["path-manager"]),
        RABBITMQ_HOST_PORT=str(s.ports["rabbitmq"]),
        RABBITMQ_MANAGEMENT_HOST_PORT=str(s.ports["rabbitmq-management"]),
        RABBITMQ_METRICS_HOST_PORT=str(s.ports["rabbitmq-metrics"]),
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
            pytest.fail(f"compose up failed:\n{done.stderr}\n{dump(s)}")
        print(f"compose up (profile emulated): healthy after {time.monotonic() - started:.0f} s")
        yield s
    finally:
        s.down()
