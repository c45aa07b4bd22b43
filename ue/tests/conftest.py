"""Fixtures of the SIGMA tests: the object registered under a unique instance (parallel
runs never share congestion controls or maps), torn down at the end."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from mts_ue.sigma import Sigma, build_paths

# not under /sys/fs/bpf: the emulator (under `ip netns exec`) must see the pins
PIN_ROOT = Path("/run/mts-ue-test-bpf")


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("SIGMA tests need root (BPF struct_ops, network namespaces)")
    for path in build_paths():
        if not path.is_file():
            pytest.fail(f"{path} is missing: run `make build`")


@pytest.fixture(scope="module")
def sigma() -> Iterator[Sigma]:
    """SIGMA registered under a unique instance; its pin dir is a grant feed's target."""
    require_root()
    loaded = Sigma.load(PIN_ROOT, "t" + secrets.token_hex(4))
    loaded.configure(stale_ms=20)
    try:
        yield loaded
    finally:
        loaded.close()
