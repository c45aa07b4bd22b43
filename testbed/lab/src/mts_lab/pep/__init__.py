"""Benchmarks and experiments of the PEP's relay (split TCP)."""

from __future__ import annotations

import os
from collections.abc import Callable

from mts_lab.line import Lab


def in_lab(prefix: str, body: Callable[[Lab], None]) -> int:
    """``body(lab)`` in a lab of its own (removed after), with the machine's load printed
    before and after (docs/results.md records it with each figure)."""
    lab = Lab.create(prefix)
    try:
        print(f"load {os.getloadavg()[0]:.1f}")
        body(lab)
        print(f"load {os.getloadavg()[0]:.1f}")
    finally:
        lab.down()
    return 0
