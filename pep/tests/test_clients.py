"""The client libraries: C header and Python module agree on the wire, and both work
against a running PEP; TCP Fast Open really carries the TLV in the SYN."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pep_tlv
import pytest
from pep_support import TLV_PORT, DataServer, PepProcess, request

from mts_lab.line import Lab, in_netns

HERE = Path(__file__).resolve().parent
HEADER_DIR = HERE.parent / "clients" / "c"


@pytest.fixture(scope="module")
def c_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("c") / "tlv_client"
    subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{HEADER_DIR}", "-o", str(binary),
         str(HERE / "tools" / "tlv_client.c")],
        check=True,
    )  # fmt: skip
    return binary


@pytest.mark.parametrize(
    ("ip", "port", "buffer"), [("10.0.0.1", 80, None), ("192.0.2.200", 65535, 0x12345678)]
)
def test_c_and_python_encode_the_same_bytes(
    c_client: Path, ip: str, port: int, buffer: int | None
) -> None:
    args = [str(c_client), "encode", ip, str(port), *([str(buffer)] if buffer else [])]
    c_hex = subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()
    assert bytes.fromhex(c_hex) == pep_tlv.encode((ip, port), buffer_size=buffer)


@pytest.mark.netns
def test_c_client_through_the_pep(
    lab: Lab, pep: PepProcess, server: DataServer, c_client: Path
) -> None:
    done = subprocess.run(
        ["ip", "netns", "exec", lab.client_ns, str(c_client), "echo",
         lab.pep_client_side_ip, str(TLV_PORT), *map(str, server.address)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "hello"


@pytest.mark.netns
def test_the_tlv_rides_in_the_syn_once_a_cookie_is_cached(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    pep_address = (lab.pep_client_side_ip, TLV_PORT)
    lab.sh(lab.client_ns, "ip tcp_metrics flush all")  # forget cached TFO cookies
    socks = []
    for _ in range(2):  # the first connection fetches the TFO cookie
        sock = in_netns(lab.client_ns, lambda: pep_tlv.connect(server.address, pep_address))
        sock.sendall(request(b"E") + b"x")
        assert sock.recv(1) == b"x"
        socks.append(sock)
    flows = pep.get("/pep/v1/flows", params={"mode": "tlv"}).json()["flows"]
    assert [f["ran"]["tcp"]["fast_open"] for f in flows] == [False, True]
    for sock in socks:
        sock.close()


@pytest.mark.netns
def test_nonblocking_python_client(lab: Lab, pep: PepProcess, server: DataServer) -> None:
    pep_address = (lab.pep_client_side_ip, TLV_PORT)
    sock = in_netns(lab.client_ns, lambda: socket.socket())
    sock.setblocking(False)
    pep_tlv.send_tlv(sock, server.address, pep_address, data=request(b"E") + b"nb")
    sock.setblocking(True)
    sock.settimeout(5)
    assert sock.recv(2) == b"nb"
    sock.close()
