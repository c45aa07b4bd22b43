"""Many short concurrent connections through the relay, every byte checked (issue 20: twice
in ~4,000 relayed connections two stray bytes appeared at the start of a new connection).

Each connection carries its own random payload to the echo server and back; the client
compares the echo with what it sent, byte for byte, so a stray, lost or foreign byte in
either direction (a pipe handed on with data in it, a descriptor reused under a stale
event) fails the connection it lands in. Every mode, several relay threads, a pool that
recycles pipes from the start.
"""

from __future__ import annotations

import random
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest
from pep_support import CONNECTORS, DataServer, PepProcess, request

from mts_lab.line import Lab

pytestmark = pytest.mark.netns

CONNECTIONS = 3000  # over the three modes
CONCURRENT = 32


def echo_once(lab: Lab, server: DataServer, mode: str, seed: int) -> str | None:
    """One connection; None if the echo is exactly the payload, else what went wrong."""
    payload = random.Random(seed).randbytes(random.Random(seed).randint(1, 24_000))
    try:
        with CONNECTORS[mode](lab, server.address) as sock:
            sock.settimeout(60)
            sock.sendall(request(b"E") + payload)
            sock.shutdown(socket.SHUT_WR)
            echoed = bytearray()
            while chunk := sock.recv(65536):
                echoed += chunk
    except OSError as exc:
        return f"{mode} #{seed}: {exc!r}"
    if bytes(echoed) == payload:
        return None
    start = next((i for i, (a, b) in enumerate(zip(echoed, payload, strict=False)) if a != b),
                 min(len(echoed), len(payload)))  # fmt: skip
    return (f"{mode} #{seed}: {len(echoed)} bytes back for {len(payload)}, first difference "
            f"at {start}: {bytes(echoed[start:start + 8]).hex()} vs "
            f"{payload[start:start + 8].hex()}")  # fmt: skip


def test_every_byte_of_many_short_concurrent_connections(
    lab: Lab, pep: PepProcess, server: DataServer
) -> None:
    modes = list(CONNECTORS)
    with ThreadPoolExecutor(CONCURRENT) as pool:
        results = list(pool.map(lambda i: echo_once(lab, server, modes[i % len(modes)], i),
                                range(CONNECTIONS)))  # fmt: skip
    failed = [r for r in results if r is not None]
    counters = {k: v for k, v in pep.get("/pep/v1/stats").json().items()
                if k in ("refused", "aborted")}  # fmt: skip
    assert not failed, f"{len(failed)} of {CONNECTIONS} connections: {failed[:5]}; {counters}"
