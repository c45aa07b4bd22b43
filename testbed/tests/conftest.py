"""Fixtures for tests on real namespaces: a private topology per test module."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from mts_testbed import builder
from mts_testbed.topology import Topology

REPO = Path(__file__).resolve().parents[2]


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("testbed tests need root (network namespaces); run `make test` as root")
    if not builder.DEFAULT_EMULATOR.is_file():
        subprocess.run(["make", "-C", str(REPO), "build/bin/ran-emulator"], check=True)
    for tool in ("ip", "iperf3"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: `make system` installs it")


def unique_name() -> str:
    return "t" + secrets.token_hex(4)


@pytest.fixture(scope="module")
def make_topology(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[dict], Topology]]:
    """Bring up topologies from scenario dicts; every one is torn down at the end."""
    require_root()
    names: list[str] = []

    def make(scenario: dict) -> Topology:
        path = tmp_path_factory.mktemp("scenario") / "scenario.yaml"
        path.write_text(yaml.safe_dump(scenario))
        name = unique_name()
        names.append(name)
        return builder.up(path, name, log=lambda _: None)

    yield make
    for name in names:
        builder.down(name, log=None)


class Api:
    """The emulator's API from the root namespace (management link)."""

    def __init__(self, topo: Topology) -> None:
        self.client = httpx.Client(
            base_url=topo.emulator.url,
            headers={"Authorization": f"Bearer {topo.emulator.token}"},
            timeout=5.0,
        )

    def get(self, path: str) -> dict:
        r = self.client.get(path)
        r.raise_for_status()
        return r.json()

    def bearer(self, ue: str = "ue1", bs: int = 10000) -> dict:
        return self.get(f"/emulator/v1/ues/{ue}/cells/{bs}")

    def channel(self, ue: str = "ue1", bs: int = 10000, **change: object) -> dict:
        r = self.client.patch(f"/emulator/v1/ues/{ue}/cells/{bs}/channel", json=change)
        r.raise_for_status()
        return r.json()


def wait_listening(topo: Topology, ns: str, port: int, timeout: float = 30) -> None:
    """Wait until a TCP server listens on port in ns (a fixed pause is too short on a busy
    host: the client then meets a refused connection)."""
    deadline = time.monotonic() + timeout
    while not topo.exec(ns, "ss", "-Hltn", f"sport = :{port}").stdout.strip():
        assert time.monotonic() < deadline, f"nothing listens on port {port} in {ns}"
        time.sleep(0.05)


def counter_rate(read: Callable[[], int], start: float, window: float) -> tuple[float, float]:
    """The lowest and highest rate (per s) a counter can have had over window s, starting
    start s from now. Each read runs a process (ip netns exec), so the instant it reads at
    is only known to lie between the clock before and after it; on a busy host that is
    tens of ms, which a single clock reading would count as error of the rate."""
    time.sleep(start)
    before0, value0, after0 = time.monotonic(), read(), time.monotonic()
    time.sleep(window)
    before1, value1, after1 = time.monotonic(), read(), time.monotonic()
    n = value1 - value0
    return n / (after1 - before0), n / (before1 - after0)


def within(bounds: tuple[float, float], expected: float, tolerance: float) -> bool:
    """Whether some rate between bounds is within tolerance (relative) of expected."""
    low, high = bounds
    return low <= expected * (1 + tolerance) and high >= expected * (1 - tolerance)


@contextmanager
def udp_upload(
    topo: Topology, rate_bps: float, port: int, seconds: int = 5
) -> Iterator[Callable[[], int]]:
    """UDP from the first UE to the server at rate_bps for seconds (iperf3, 1000 B
    datagrams); yields a reader of the bytes the server's wan0 received so far."""
    server = topo.popen(
        topo.server.ns,
        "iperf3",
        "-s",
        "-1",
        "-p",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_listening(topo, topo.server.ns, port)
    client = topo.popen(
        topo.ues[0].ns,
        "iperf3",
        "-c",
        topo.server.addresses["wan0"],
        "-p",
        str(port),
        "-u",
        "-b",
        str(int(rate_bps)),
        "-l",
        "1000",
        "-t",
        str(seconds),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def rx() -> int:
        out = topo.exec(topo.server.ns, "cat", "/sys/class/net/wan0/statistics/rx_bytes")
        return int(out.stdout)

    try:
        yield rx
    finally:
        client.wait(seconds + 15)
        server.wait(seconds + 15)
