"""Fixtures: a real platform (uvicorn on a free port) and real HTTP callback receivers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.testing import Receiver, Running, running_platform


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    with running_platform(tmp_path) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()
