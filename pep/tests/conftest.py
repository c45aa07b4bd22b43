"""Fixtures: one lab (client ─ pep ─ server namespaces), PEP process and data server per module.

Starting a PEP process takes seconds (imports), so a module shares one with the default
test settings; a module that needs other settings starts its own with ``start_pep``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pep_support import DataServer, PepProcess

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
def start_pep(
    lab: Lab, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., PepProcess]]:
    started: list[PepProcess] = []

    def start(**settings: Any) -> PepProcess:
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
