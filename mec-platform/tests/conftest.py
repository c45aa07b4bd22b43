"""Fixtures: a real platform (uvicorn on a free port) and real HTTP callback receivers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.testing import Receiver, Running, end_leftover_apps, running_platform


@pytest.fixture(autouse=True)
def no_leftover_apps(tmp_path: Path) -> Iterator[None]:
    """Tests that start their own platform (restarts, other backends) leave no app behind."""
    yield
    end_leftover_apps(tmp_path)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    with running_platform(tmp_path) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()
