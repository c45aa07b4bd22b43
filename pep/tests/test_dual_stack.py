"""One PEP for IPv4 and IPv6 at once, through every mode: each mode's data and closing
behaviour over both IP versions, and what only IPv6 has (test_relay has the rest of the
relay's tests, test_ipv6_transparent IPv6's own interception).

The lab's namespaces have IPv6 (fd00:201:1::/64 client side, fd00:201:2::/64 server side);
the PEP listens on [::] in every mode beside IPv4 and intercepts IPv6 with an ip6 table.
"""

from __future__ import annotations

import pytest
from pep_support import (
    CONNECTORS,
    DataServer,
    PepProcess,
    ThroughPep,
    check_client_abort,
    check_half_close,
    check_server_reset,
    connect_socks5,
    expected_digest,
    receive_digest,
    request,
    send_stream,
)

from mts_lab.line import Lab

pytestmark = pytest.mark.netns

MB = 1 << 20
MODES = list(CONNECTORS)
FAMILIES = ["ipv4", "ipv6"]


@pytest.mark.parametrize("mode", MODES)
def test_checksummed_both_ways_and_the_flow_state_over_ipv6(
    lab: Lab, pep6: PepProcess, server6: DataServer, through_pep: ThroughPep, mode: str
) -> None:
    size = 32 * MB
    with through_pep("ipv6", mode) as sock:
        sock.sendall(request(b"U", size))
        send_stream(sock, size)
        assert sock.recv(64).decode() == expected_digest(size)
    with through_pep("ipv6", mode) as sock:
        sock.sendall(request(b"D", size))
        assert receive_digest(sock) == (size, expected_digest(size))
    with through_pep("ipv6", mode) as sock:
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


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_half_close_is_propagated(
    pep6: PepProcess, through_pep: ThroughPep, family: str, mode: str
) -> None:
    check_half_close(through_pep(family, mode))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_server_reset_reaches_the_client(
    pep6: PepProcess, through_pep: ThroughPep, family: str, mode: str
) -> None:
    check_server_reset(through_pep(family, mode))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_client_abort_reaches_the_server(
    pep6: PepProcess,
    server: DataServer,
    server6: DataServer,
    through_pep: ThroughPep,
    family: str,
    mode: str,
) -> None:
    check_client_abort(server6 if family == "ipv6" else server, lambda: through_pep(family, mode))


def test_an_ipv4_client_reaches_an_ipv6_server_through_socks5(
    lab: Lab, pep6: PepProcess, server6: DataServer
) -> None:
    with connect_socks5(lab, server6.address) as sock:  # to the PEP's IPv4 address
        sock.sendall(request(b"E") + b"4to6")
        assert sock.recv(4) == b"4to6"
