"""The shared free-port picker: below the ephemeral range, and really free."""

import socket
from pathlib import Path

import pytest

from mec_common import ports
from mec_common.ports import LOWEST, free_port


def first_ephemeral() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM])
def test_a_port_is_below_the_ephemeral_range_and_can_be_bound(kind: int) -> None:
    port = free_port(kind)
    assert LOWEST <= port < first_ephemeral()
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", port))


def test_a_port_a_listener_holds_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken, other = held.getsockname()[1], free_port()
        monkeypatch.setattr(ports, "_handed_out", {})  # ``other`` may be handed out again
        # The draw offers the held port first: the picker must find it taken and go on.
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [taken, other])
        assert free_port() == other


def test_a_port_is_not_handed_out_twice_before_it_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two callers that draw alike (here: the same order every time) still get two ports,
    though neither has been bound yet."""
    first = free_port()
    monkeypatch.setattr(ports.random, "sample", lambda population, k: [first, first + 1])
    assert free_port() == first + 1
