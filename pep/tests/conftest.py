"""Fixtures: one lab (client ─ pep ─ server namespaces), PEP process and data server per module.

Starting a PEP process takes seconds (imports), so a module shares one with the default
test settings; a module that needs other settings starts its own with ``start_pep``.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pep_support import (
    CONNECTORS,
    DUAL_STACK,
    DataServer,
    PepProcess,
    ThroughPep,
    connect_socks5,
    connect_tlv,
    wait_for,
)

from mts_lab.line import Lab


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0:
        pytest.fail("PEP tests need root (network namespaces, TPROXY)")
    lab = Lab.create("pt")
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def server(lab: Lab) -> Iterator[DataServer]:
    srv = DataServer(lab)
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def server6(lab: Lab) -> Iterator[DataServer]:
    """The data server on the lab server's IPv6 address."""
    srv = DataServer(lab, host=lab.server_ip6)
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture(scope="module")
def relay_settings() -> dict[str, Any]:
    """PEP settings of the relay under test: the default (``auto``: the compiled core where
    it can run, as here; test_relay_choice.py holds it to that). A module whose tests run
    against both relays overrides this fixture, parametrized over ``pep_support.RELAYS``."""
    return {}


@pytest.fixture(scope="session")
def seccomp_deny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tools/seccomp_deny.c built: ``seccomp_deny CALL COMMAND...`` runs the command with that
    system call refused (EPERM), as a container's seccomp profile refuses it."""
    binary = tmp_path_factory.mktemp("seccomp") / "seccomp_deny"
    source = Path(__file__).resolve().parent / "tools" / "seccomp_deny.c"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(binary), str(source)],
                   check=True)  # fmt: skip
    return binary


@pytest.fixture(scope="module")
def start_pep(
    lab: Lab, tmp_path_factory: pytest.TempPathFactory, relay_settings: dict[str, Any]
) -> Iterator[Callable[..., PepProcess]]:
    started: list[PepProcess] = []

    def start(**settings: Any) -> PepProcess:
        settings = {**relay_settings, **settings}
        pep = PepProcess(lab, tmp_path_factory.mktemp("pep"), **settings)
        started.append(pep)
        return pep

    try:
        yield start
    finally:
        for pep in started:
            pep.stop()


@pytest.fixture(scope="module")
def pep(start_pep: Callable[..., PepProcess]) -> PepProcess:
    return start_pep()


@pytest.fixture(scope="module")
def pep6(start_pep: Callable[..., PepProcess]) -> PepProcess:
    """A PEP for the lab's IPv4 and IPv6 clients and servers at once."""
    return start_pep(**DUAL_STACK)


@pytest.fixture(scope="module")
def through_pep(lab: Lab, server: DataServer, server6: DataServer) -> ThroughPep:
    """``through_pep(family, mode)``: a connection from the client namespace to the data server of
    that IP version ("ipv4", "ipv6") through the PEP in that mode; IPv6 reaches the explicit
    modes at the PEP's IPv6 address."""
    ipv6 = {
        "transparent": CONNECTORS["transparent"],
        "socks5": functools.partial(connect_socks5, pep_host=lab.pep_client_side_ip6),
        "tlv": functools.partial(connect_tlv, pep_host=lab.pep_client_side_ip6),
    }

    def connect(family: str, mode: str) -> socket.socket:
        if family == "ipv6":
            return ipv6[mode](lab, server6.address)
        return CONNECTORS[mode](lab, server.address)

    return connect


@pytest.fixture(scope="module")
def iperf_server(lab: Lab) -> Iterator[int]:
    """An iperf3 server in the server namespace (both IP versions); its port."""
    port = 5301
    proc = lab.popen(lab.server_ns, ["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL)
    wait_for(lambda: f":{port}" in lab.sh(lab.server_ns, "ss -ltn"), what="iperf3 server")
    yield port
    proc.terminate()
    proc.wait()
