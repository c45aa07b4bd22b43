"""Fixtures: a real platform (uvicorn on a free port) and real HTTP callback receivers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.testing import Receiver, Running, make_settings


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    running = Running(make_settings(tmp_path))
    yield running
    running.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()
