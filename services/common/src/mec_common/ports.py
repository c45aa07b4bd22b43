"""Free ports for services a test or an experiment starts on loopback.

Binding port 0 hands out a port from the kernel's ephemeral range, where the machine's own
outgoing connections also take their source ports. A port picked that way and listened on
seconds later can meanwhile be some connection's source port, and a listener cannot bind a
port a connected socket holds (not even with ``SO_REUSEADDR``): the service then fails to
start. A compose PEP did so in CI, restarting every 3 s. So ports come from below that range.

A port handed out looks free until the service it was meant for binds it, which may be a
moment later in a child process; a second call meanwhile could hand it out again (CI at
65cfb08: the PEP and the path manager of the security suite got the same port, and the path
manager's health check was answered by the PEP). So this process does not hand out the same
port twice within ``REUSE_AFTER_S``.
"""

from __future__ import annotations

import random
import socket
import time
from pathlib import Path

LOWEST = 10000
"""The lowest port handed out: clear of the well-known and most registered service ports."""

PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")

REUSE_AFTER_S = 600.0
"""How long a port handed out is not handed out again by this process."""

_handed_out: dict[int, float] = {}  # port -> time.monotonic() it was handed out


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port of ``kind`` (TCP or UDP) that no socket holds on 127.0.0.1 now, drawn at random
    between ``LOWEST`` and the first ephemeral port, so that parallel callers rarely collide."""
    first_ephemeral = int(PORT_RANGE.read_text().split()[0])
    now = time.monotonic()
    for port in random.sample(range(LOWEST, first_ephemeral), 200):
        if now - _handed_out.get(port, -REUSE_AFTER_S) < REUSE_AFTER_S:
            continue
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out[port] = now
            return port
    raise RuntimeError(f"no free port in {LOWEST}-{first_ephemeral - 1}")
