"""Fixtures of the deployment tests: the Docker engine and docker compose projects of the
suite, each configured by one env file written by `deploy/compose/env.sh` (helpers in
harness.py)."""

from __future__ import annotations

import fcntl
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import harness

from harness import DOCKER, PORT_VARIABLES, REPO, Stack, dump, env_file, run

from mec_common.ports import free_port

SCENARIO = REPO / "testbed/configs/lte-25prb-meld.yaml"
REPORT_SF = 7  # not the emulator's default: the test sees that the adapter set it
HOST_LOCK = Path("/run/lock/mts-compose-host.lock")


@pytest.fixture(scope="session")
def docker_engine() -> None:
    run(str(REPO / "deploy/scripts/docker-engine.sh"), "ensure")
    run(DOCKER, "compose", "version")


def new_stack(kind: str, directory: Path, project: str, testbed: str = "", **edits: str) -> Stack:
    """A project configured as a user does (`env.sh kind > .env`, then edits), unique on
    this machine: its name, free ports, its own congestion control names (global to the
    kernel)."""
    ports = {name: free_port() for name in PORT_VARIABLES}
    edits = {
        "MTS_PROJECT": project,
        "PEP_MELD_INSTANCE": project,
        **{PORT_VARIABLES[name]: str(port) for name, port in ports.items()},
        **edits,
    }
    path = directory / ".env"
    settings = env_file(kind, path, **edits)
    return Stack(project=project, env_file=path, settings=settings, testbed=testbed, ports=ports)


def running(s: Stack, what: str) -> Iterator[Stack]:
    """`up -d --wait`, the stack while the tests use it, `down -v` (also on failure)."""
    try:
        started = time.monotonic()
        done = s.up()
        if done.returncode != 0:
            pytest.fail(f"compose up failed:\n{done.stderr}\n{dump(s)}")
        print(f"compose up ({what}): healthy after {time.monotonic() - started:.0f} s")
        yield s
    finally:
        s.down()


@pytest.fixture(scope="module")
def stack(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The suite with the emulated RAN (`env.sh emulated`), up and healthy."""
    suffix = secrets.token_hex(3)
    directory = tmp_path_factory.mktemp("compose")
    s = new_stack("emulated", directory, f"mtst{suffix}", f"t{suffix}", TESTBED_NAME=f"t{suffix}")
    yield from running(s, "profile emulated")


@pytest.fixture(scope="module")
def host_stack(docker_engine: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The suite in this machine's network namespace (`env.sh ran`, host mode) beside a RAN
    outside compose: the emulator's FlexRAN API, started on the host by `testbed up
    --mec-here` (so this namespace is the MEC host on the UEs' path, as on an OAI testbed)
    and reached by URL. Host-mode runs take the machine's interfaces ran0/wan0: one at a
    time (a lock)."""
    from mts_testbed.topology import Topology

    suffix = secrets.token_hex(3)
    name = f"h{suffix}"
    HOST_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with HOST_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        token = secrets.token_hex(16)
        testbed = [str(REPO / ".venv/bin/testbed")]
        subprocess.run(
            [*testbed, "up", "--config", str(SCENARIO), "--name", name, "--mec-here",
             "--emulator", str(REPO / "build/bin/ran-emulator")],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TESTBED_EMULATOR_TOKEN": token},
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        try:
            topo = Topology.load(name)
            s = new_stack(
                "ran",
                tmp_path_factory.mktemp("compose-host"),
                f"mtsh{suffix}",
                name,
                # The RAN outside compose: its URL and, since this one wants it, its token.
                RNIS_FLEXRAN_URL=topo.emulator.url_from_mec,
                RNIS_FLEXRAN_TOKEN=token,
                RNIS_REPORT_SF=str(REPORT_SF),
                RNIS_IP_MAP="",  # the emulator reports the UEs' addresses
                PEP_TPROXY_INTERFACES=topo.interfaces["backhaul_mec"],
                # the flow-RTT observer (its profile) on the same interface
                COMPOSE_PROFILES="flowrtt",
                FLOWRTT_INTERFACES=topo.interfaces["backhaul_mec"],
                PEP_ALLOWED_CLIENTS="10.30.0.0/16",
                PEP_ALLOWED_DESTINATIONS="10.10.0.0/24",
                PEP_TRANSPARENT_PORT=str(free_port()),
                # The machine's namespace is shared: the PEP's table, mark and routing table
                # of its own, and RabbitMQ's Erlang ports apart from the machine's RabbitMQ.
                PEP_TPROXY_NFT_TABLE=f"mts_pep_{suffix}",
                PEP_TPROXY_MARK=str(0x1000 + secrets.randbelow(0xE000)),
                PEP_TPROXY_TABLE=str(1000 + secrets.randbelow(30000)),
                MTS_AMQP_DIST_PORT=str(free_port()),
                MTS_AMQP_EPMD_PORT=str(free_port()),
            )
            yield from running(s, "host mode, RAN outside compose")
        finally:
            run(*testbed, "down", "--name", name, timeout=120)
