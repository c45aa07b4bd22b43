"""What an MPTCP connection carried on each path, read from the kernel (``ss``), for the
tests and experiments that check a path manager's decisions took effect."""

from __future__ import annotations

import time
from collections.abc import Mapping

from path_manager.actuation import subflow_bytes


def acked_per_path(netns: str, paths: Mapping[int, object]) -> dict[int, int]:
    """Bytes the peer acknowledged on each path (path -> the peer's address on it), summed
    over the subflows in ``netns`` toward that address."""
    out = dict.fromkeys(paths, 0)
    for (_, remote), acked in subflow_bytes(netns).items():
        for path, address in paths.items():
            if remote.startswith(f"{address}:"):
                out[path] += acked
    return out


def acked_growth(netns: str, paths: Mapping[int, object], seconds: float) -> dict[int, int]:
    """Bytes acknowledged on each path over the next ``seconds``."""
    before = acked_per_path(netns, paths)
    time.sleep(seconds)
    after = acked_per_path(netns, paths)
    return {path: after[path] - before[path] for path in paths}
