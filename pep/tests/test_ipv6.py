"""IPv6 through every mode: the mode tests of test_relay/test_transparent over IPv6.

The lab's namespaces have IPv6 (fd00:201:1::/64 client side, fd00:201:2::/64 server side);
the PEP listens on [::] in every mode beside IPv4 and intercepts IPv6 with an ip6 table.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable

import pytest
from pep_support import (
    DUAL_STACK,
    DataServer,
    PepProcess,
    check_client_abort,
    check_half_close,
    check_server_reset,
    connect_direct,
    connect_socks5,
    connect_tlv,
    expected_digest,
    receive_digest,
    request,
    send_stream,
)

from mts_lab.line import Lab

pytestmark = pytest.mark.netns

MB = 1 << 20


@pytest.fixture(scope="module")
def pep6(start_pep: Callable[..., PepProcess]) -> PepProcess:
    return start_pep(**DUAL_STACK)


def connectors(lab: Lab) -> dict[str, Callable[[Lab, tuple[str, int]], socket.socket]]:
    """Each mode reached over IPv6 (the explicit modes at the PEP's IPv6 address)."""
    return {
        "transparent": connect_direct,
        "socks5": functools.partial(connect_socks5, pep_host=lab.pep_client_side_ip6),
        "tlv": functools.partial(connect_tlv, pep_host=lab.pep_client_side_ip6),
    }


MODES = ["transparent", "socks5", "tlv"]


@pytest.mark.parametrize("mode", MODES)
def test_checksummed_both_ways_and_the_flow_state(
    lab: Lab, pep6: PepProcess, server6: DataServer, mode: str
) -> None:
    connect = connectors(lab)[mode]
    size = 32 * MB
    with connect(lab, server6.address) as sock:
        sock.sendall(request(b"U", size))
        send_stream(sock, size)
        assert sock.recv(64).decode() == expected_digest(size)
    with connect(lab, server6.address) as sock:
        sock.sendall(request(b"D", size))
        assert receive_digest(sock) == (size, expected_digest(size))
    with connect(lab, server6.address) as sock:
        sock.sendall(request(b"E") + b"six")
        assert sock.recv(3) == b"six"
        response = pep6.get("/pep/v1/flows", params={"ue": lab.client_ip6})
        assert response.status_code == 200, response.text
        (flow,) = response.json()["flows"]
        assert flow["mode"] == mode and flow["ue"] == lab.client_ip6
        assert flow["destination"] == f"[{server6.address[0]}]:{server6.address[1]}"
        assert flow["ran"]["peer"].startswith(f"[{lab.client_ip6}]:")
        assert flow["wan"]["tcp"]["state"] == "ESTABLISHED"
        ue = pep6.get(f"/pep/v1/ues/{lab.client_ip6}")
        assert ue.status_code == 200 and ue.json()["flows"] == 1
    assert server6.peers[-1][0] == lab.pep_server_side_ip6  # the PEP's own address


@pytest.mark.parametrize("mode", MODES)
def test_half_close_is_propagated(
    lab: Lab, pep6: PepProcess, server6: DataServer, mode: str
) -> None:
    check_half_close(connectors(lab)[mode](lab, server6.address))


@pytest.mark.parametrize("mode", MODES)
def test_server_reset_reaches_the_client(
    lab: Lab, pep6: PepProcess, server6: DataServer, mode: str
) -> None:
    check_server_reset(connectors(lab)[mode](lab, server6.address))


@pytest.mark.parametrize("mode", MODES)
def test_client_abort_reaches_the_server(
    lab: Lab, pep6: PepProcess, server6: DataServer, mode: str
) -> None:
    check_client_abort(server6, lambda: connectors(lab)[mode](lab, server6.address))


def test_an_ipv4_client_reaches_an_ipv6_server_through_socks5(
    lab: Lab, pep6: PepProcess, server6: DataServer
) -> None:
    with connect_socks5(lab, server6.address) as sock:  # to the PEP's IPv4 address
        sock.sendall(request(b"E") + b"4to6")
        assert sock.recv(4) == b"4to6"
