"""A PEP under a seccomp profile that refuses unshare(2), as containerd's and Docker's
RuntimeDefault do to a container without SYS_ADMIN (found on a Kubernetes node): the relay
threads keep the process's descriptor table, say so, and relay as before; both relays."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pep_support import CONNECTORS, RELAYS, DataServer, PepProcess, check_half_close

from mts_lab.line import Lab

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    return RELAYS[request.param]


@pytest.fixture(scope="module")
def deny_unshare(seccomp_deny: Path) -> list[str]:
    wrapper = [str(seccomp_deny), "unshare"]
    refused = subprocess.run([*wrapper, "unshare", "--mount", "true"], check=False)
    assert refused.returncode != 0, "the filter lets unshare through"
    return wrapper


def test_relays_share_the_table_when_unshare_is_refused(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer, deny_unshare: list[str]
) -> None:
    pep = start_pep(wrapper=deny_unshare)
    stats = pep.get("/pep/v1/stats").json()
    assert stats["private_descriptor_tables"] is False, stats
    assert pep.log().count("unshare(CLONE_FILES) refused") == 1, "logged once, not per relay"
    assert stats["relay_threads"] > 1, stats  # else "once" would prove nothing
    assert "pep_private_descriptor_tables 0.0" in pep.get("/metrics").text
    for connect in CONNECTORS.values():
        check_half_close(connect(lab, server.address))
    assert pep.get("/pep/v1/stats").json()["established"] >= 3
    pep.stop()  # the next test's PEP takes the same ports


def test_relays_own_their_tables_otherwise(start_pep: Callable[..., PepProcess]) -> None:
    pep = start_pep()
    assert pep.get("/pep/v1/stats").json()["private_descriptor_tables"] is True
    assert "pep_private_descriptor_tables 1.0" in pep.get("/metrics").text
