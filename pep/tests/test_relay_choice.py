"""PEP_RELAY_CORE: ``auto`` (the default) runs the compiled core where it can, else the
Python relay, and says which and why; ``uring`` refuses to start where the core cannot run.
Where pidfd_getfd is refused (Docker's default seccomp profile) the core still runs, its relay
threads in the process's descriptor table."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pep_support import (
    CONNECTORS,
    SOCKS_PORT,
    DataServer,
    PepProcess,
    check_half_close,
    connect_direct,
    connect_socks5,
    request,
)

from mec_pep.config import PepSettings
from mec_pep.core import BUFFER_BYTES, JOIN_PORTS, MAX_RANGES, check_core_settings, choose_relay
from mts_lab.line import Lab

pytestmark = pytest.mark.netns

BEYOND_THE_CORE = {  # one setting each that the core does not carry: the reason auto names
    "PEP_RAN_MPTCP with more than": dict(
        ran_mptcp=True, tproxy_ports=list(range(8000, 8001 + JOIN_PORTS))
    ),
    "networks in the access lists": dict(
        allowed_clients=[f"10.{i // 256}.{i % 256}.0/24" for i in range(MAX_RANGES + 1)]
    ),
    "PEP_RELAY_METHOD=copy with PEP_PIPE_SIZE": dict(relay_method="copy"),
}


def _relays_through(lab: Lab, pep: PepProcess, server: DataServer) -> None:
    for connect in (connect_direct, connect_socks5):
        with connect(lab, server.address) as sock:
            sock.sendall(request(b"E") + b"hello")
            assert sock.recv(5) == b"hello"


# What the core needs of the kernel, refused by a seccomp filter.
CORE_CALLS = ("io_uring_setup",)


@pytest.fixture(scope="module", params=CORE_CALLS)
def deny(request: pytest.FixtureRequest, seccomp_deny: Path) -> tuple[str, list[str]]:
    """A system call the core needs, and a wrapper under which it is refused, as the probe
    sees it."""
    wrapper = [str(seccomp_deny), request.param]
    probe = "from mec_pep.core import kernel_refusals; print(kernel_refusals())"
    seen = subprocess.run([*wrapper, sys.executable, "-c", probe], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    assert f"{request.param} refused (Operation not permitted" in seen, seen
    return request.param, wrapper


def test_auto_is_the_default_and_takes_the_core_here(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer
) -> None:
    assert PepSettings.model_fields["relay_core"].default == "auto"
    pep = start_pep()
    stats = pep.stats()
    assert stats["relay"] == "uring", stats
    assert stats["relay_reason"].startswith("auto: the compiled core"), stats
    assert pep.log().count("relay chosen") == 1
    health = pep.get("/healthz", auth=False).json()
    assert "uring, 2 relay threads (auto: the compiled core" in str(health), health
    _relays_through(lab, pep, server)
    pep.stop()  # the next test's PEP takes the same ports


@pytest.mark.parametrize("reason", BEYOND_THE_CORE)
def test_auto_leaves_to_python_what_the_core_does_not_carry(reason: str) -> None:
    settings = PepSettings(**BEYOND_THE_CORE[reason])
    relay, why = choose_relay(settings)
    assert relay == "python" and why.startswith("auto: the Python relay") and reason in why, why
    with pytest.raises(ValueError, match=reason):
        check_core_settings(settings)  # what uring refuses


def test_auto_takes_the_core_for_copy_at_its_buffer_size() -> None:
    assert choose_relay(PepSettings(relay_method="copy", pipe_size=BUFFER_BYTES))[0] == "uring"


def test_auto_takes_python_without_the_core_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEP_CORE_LIBRARY", "/nonexistent/libmec_pep_core.so")
    relay, why = choose_relay(PepSettings())
    assert relay == "python" and "/nonexistent/libmec_pep_core.so is missing" in why, why


def test_auto_takes_python_for_mptcp_with_more_ports_than_the_core_has_joins_for(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer
) -> None:
    ports = ",".join(str(p) for p in range(18000, 18001 + JOIN_PORTS))
    pep = start_pep(ran_mptcp="true", tproxy_ports=f"{server.address[1]},{ports}")
    stats = pep.stats()
    assert stats["relay"] == "python", stats
    assert f"PEP_RAN_MPTCP with more than {JOIN_PORTS} PEP_TPROXY_PORTS" in stats["relay_reason"]
    assert pep.log().count("relay chosen") == 1
    _relays_through(lab, pep, server)
    pep.stop()


def test_auto_takes_python_where_a_call_the_core_needs_is_refused(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer,
    deny: tuple[str, list[str]],
) -> None:  # fmt: skip
    call, wrapper = deny
    pep = start_pep(wrapper=wrapper)
    stats = pep.stats()
    assert stats["relay"] == "python", stats
    assert f"{call} refused (Operation not permitted" in stats["relay_reason"], stats
    assert pep.log().count("relay chosen") == 1
    _relays_through(lab, pep, server)
    pep.stop()


def test_uring_refuses_to_start_where_a_call_the_core_needs_is_refused(
    start_pep: Callable[..., PepProcess], deny: tuple[str, list[str]]
) -> None:
    call, wrapper = deny
    with pytest.raises(RuntimeError, match=f"PEP_RELAY_CORE=uring cannot run here: {call}"):
        start_pep(wrapper=wrapper, relay_core="uring")


def test_uring_refuses_to_start_with_settings_the_core_does_not_carry(
    start_pep: Callable[..., PepProcess],
) -> None:
    with pytest.raises(RuntimeError, match="PEP_RELAY_CORE=uring does not carry PEP_RELAY_METHOD"):
        start_pep(relay_core="uring", relay_method="copy")


@pytest.fixture(scope="module")
def docker_default(seccomp_deny: Path) -> list[str]:
    """A wrapper refusing what Docker 20.10's default seccomp profile refuses a container
    without CAP_SYS_PTRACE and SYS_ADMIN of what the core would use: pidfd_getfd and
    unshare (one filter each, stacked)."""
    return [str(seccomp_deny), "pidfd_getfd", str(seccomp_deny), "unshare"]


def test_auto_takes_the_core_with_a_shared_table_where_pidfd_getfd_is_refused(
    lab: Lab, start_pep: Callable[..., PepProcess], server: DataServer, docker_default: list[str]
) -> None:
    """The core's sockets are then read by number in the process's table: the flows' TCP_INFO
    (the API), a listener opened at run time, a reset by the API, relaying in every mode."""
    pep = start_pep(wrapper=docker_default)
    stats = pep.stats()
    assert stats["relay"] == "uring", stats
    shared = "share the process's descriptor table: pidfd_getfd refused (Operation not permitted"
    assert shared in stats["relay_reason"], stats
    assert stats["private_descriptor_tables"] is False, stats
    assert "pep_private_descriptor_tables 0.0" in pep.get("/metrics").text
    for connect in CONNECTORS.values():
        check_half_close(connect(lab, server.address))
    with connect_direct(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"x")
        assert sock.recv(1) == b"x"
        flows = pep.get("/pep/v1/flows", params={"ue": lab.client_ip}).json()["flows"]
        assert len(flows) == 1 and flows[0]["stage"] == "relaying", flows
        for leg in ("ran", "wan"):
            tcp = flows[0][leg]["tcp"]
            assert tcp["state"] == "ESTABLISHED" and tcp["rtt_us"] > 0, (leg, flows)
        deleted = pep.request("DELETE", f"/pep/v1/flows/{flows[0]['id']}")
        assert deleted.status_code == 204, deleted.text
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(1)
    off = pep.request("PATCH", "/pep/v1/config", json={"socks5_port": None})
    assert off.status_code == 200 and "socks5" not in off.json()["listeners"], off.text
    on = pep.request("PATCH", "/pep/v1/config", json={"socks5_port": SOCKS_PORT})
    assert on.status_code == 200 and "socks5" in on.json()["listeners"], on.text
    _relays_through(lab, pep, server)  # SOCKS5 through the listener the threads dup'd
    pep.stop()
