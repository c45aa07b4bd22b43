"""Free ports for services a test or an experiment starts on loopback.

Binding port 0 hands out a port from the kernel's ephemeral range, where the machine's own
outgoing connections also take their source ports. A port picked that way and listened on
seconds later can meanwhile be some connection's source port, and a listener cannot bind a
port a connected socket holds (not even with ``SO_REUSEADDR``): the service then fails to
start. A compose PEP did so in CI, restarting every 3 s. So ports come from below that range.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 10000
"""The lowest port handed out: clear of the well-known and most registered service ports."""

PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port of ``kind`` (TCP or UDP) that no socket holds on 127.0.0.1 now, drawn at random
    between ``LOWEST`` and the first ephemeral port, so that parallel callers rarely collide."""
    first_ephemeral = int(PORT_RANGE.read_text().split()[0])
    for port in random.sample(range(LOWEST, first_ephemeral), 200):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {LOWEST}-{first_ephemeral - 1}")
