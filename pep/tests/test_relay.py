"""The relay in real namespaces: client ─ PEP ─ server, every mode."""

from __future__ import annotations

import pytest
from pep_support import CONNECTORS, DataServer, PepProcess, expected_digest, receive_digest, request, send_stream

from mec_pep.lab import Lab

pytestmark = pytest.mark.netns

MODES = list(CONNECTORS)


@pytest.mark.parametrize("mode", MODES)
def test_small_upload_and_download(lab: Lab, pep: PepProcess, server: DataServer, mode: str) -> None:
    connect = CONNECTORS[mode]
    size = 3_000_000
    with connect(lab, server.address) as sock:
        sock.sendall(request(b"U", size))
        send_stream(sock, size)
        assert sock.recv(64).decode() == expected_digest(size)
    with connect(lab, server.address) as sock:
        sock.sendall(request(b"D", size))
        assert receive_digest(sock) == (size, expected_digest(size))
    flows = pep.get("/pep/v1/stats").json()
    assert flows["established"] >= 2, flows
