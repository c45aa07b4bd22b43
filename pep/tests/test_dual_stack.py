"""One PEP for IPv4 and IPv6 at once, through every mode: each mode's data and closing
behaviour over both IP versions, the IPv6 versions of test_relay's mode tests (iperf3, refusals,
TLV options), and what only IPv6 has (test_ipv6_transparent: IPv6's own interception).

The lab's namespaces have IPv6 (fd00:201:1::/64 client side, fd00:201:2::/64 server side);
the PEP listens on [::] in every mode beside IPv4 and intercepts IPv6 with an ip6 table.
"""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

import pytest
from pep_support import (
    CONNECTORS,
    RELAYS,
    TLV_PORT,
    DataServer,
    PepProcess,
    ThroughPep,
    check_client_abort,
    check_half_close,
    check_server_reset,
    connect_socks5,
    connect_tlv,
    expected_digest,
    receive_digest,
    request,
    send_stream,
)

from mts_lab.line import Lab, in_netns

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Every test here runs against both relays (conftest's ``relay_settings``)."""
    return RELAYS[request.param]


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


@pytest.mark.parametrize("reverse", [False, True], ids=["upload", "download"])
def test_iperf3_over_ipv6(lab: Lab, pep6: PepProcess, iperf_server: int, reverse: bool) -> None:
    """test_relay's iperf3 case over IPv6, transparent mode (the preload shim that takes
    iperf3 through SOCKS5/TLV is IPv4 only; those modes' IPv6 data is checked above)."""
    before = pep6.stats()
    cmd = f"iperf3 -6 -c {lab.server_ip6} -p {iperf_server} -t 2 -P 2 -J"
    out = lab.sh(lab.client_ns, cmd + (" -R" if reverse else ""))
    result = json.loads(out)["end"]["sum_received"]
    assert result["bits_per_second"] > 1e8, result
    after = pep6.stats()
    relayed = "bytes_to_ue" if reverse else "bytes_from_ue"
    assert after[relayed] - before[relayed] >= result["bytes"]
    assert after["established"] - before["established"] == 3  # control + 2 streams


def test_denied_ipv6_destination_is_refused(lab: Lab, pep6: PepProcess) -> None:
    """Only the allowed IPv6 destinations may be reached (fd00:201:2::/64 here)."""
    denied = (lab.client_ip6, 22)
    before = pep6.stats()["refused"].get("destination not allowed", 0)
    with pytest.raises(ConnectionRefusedError, match="reply 2"):  # 2 = not allowed
        connect_socks5(lab, denied, pep_host=lab.pep_client_side_ip6)
    with (
        connect_tlv(lab, denied, pep_host=lab.pep_client_side_ip6) as sock,
        pytest.raises(ConnectionResetError),
    ):
        sock.recv(1)
    after = pep6.stats()["refused"].get("destination not allowed", 0)
    assert after - before == 2


def test_connection_to_a_closed_ipv6_port_is_reported(lab: Lab, pep6: PepProcess) -> None:
    with pytest.raises(ConnectionRefusedError, match="reply 5"):  # 5 = connection refused
        connect_socks5(lab, (lab.server_ip6, 9), pep_host=lab.pep_client_side_ip6)


def test_tlv_over_ipv6_after_bytes_and_buffer_size_option(
    lab: Lab, pep6: PepProcess, server6: DataServer
) -> None:
    """CONNECT6 with BUFFER_SIZE and application bytes right behind the TLV, to the PEP's
    IPv6 address."""
    import pep_tlv

    pep_address = (lab.pep_client_side_ip6, TLV_PORT)
    sock = in_netns(lab.client_ns, lambda: socket.socket(socket.AF_INET6))
    sock.settimeout(5)
    with sock:
        pep_tlv.send_tlv(
            sock, server6.address, pep_address, buffer_size=8 << 20, data=request(b"E") + b"early"
        )
        assert sock.recv(5) == b"early"
        flows = pep6.get("/pep/v1/flows", params={"mode": "tlv", "ue": lab.client_ip6})
        (flow,) = flows.json()["flows"]
        assert flow["destination"] == f"[{server6.address[0]}]:{server6.address[1]}"


def test_connect_to_the_pep_itself_over_ipv6_is_refused(lab: Lab, pep6: PepProcess) -> None:
    """A TLV asking for the PEP's own IPv6 listener would loop; it is refused."""
    own = (lab.pep_server_side_ip6, TLV_PORT)  # inside fd00:201:2::/64
    before = pep6.stats()["refused"].get("destination not allowed", 0)
    with (
        connect_tlv(lab, own, pep_host=lab.pep_client_side_ip6) as sock,
        contextlib.suppress(ConnectionResetError),
    ):
        assert sock.recv(1) == b""
    assert pep6.stats()["refused"].get("destination not allowed", 0) - before == 1
