"""Small versions of ``make experiment-meld`` and ``make experiment-rapid``.

The whole chain on the emulated RAN: emulator → rnis-adapter → RabbitMQ → PEP → BPF maps,
with real downloads. Few, short runs: they check that the chain works and that the
kernel takes the decisions the modes promise, not the published figures (the full
experiments do that; docs/results.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mts_lab.meld import experiment as meld
from mts_lab.rapid import experiment as rapid

pytestmark = [pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]


def test_meld_small(build: tuple[Path, Path], tmp_path: Path) -> None:
    results = meld.run(["reno"], ["off", "meld-de"], runs=1, size=3_000_000, out=tmp_path)
    assert (tmp_path / "meld.png").stat().st_size > 0
    assert json.loads((tmp_path / "meld.json").read_text())["summary"]
    off, de = (results["summary"]["reno"][m]["verdicts"] for m in ("off", "meld-de"))
    assert off["losses"] > 0 and off["notified"] == off["losses"] and off["suppressed"] == 0
    assert de["suppressed"] > 0, de  # fresh radio state reached the kernel and was used
    assert de["no_data"] == 0


def test_rapid_small(build: tuple[Path, Path], tmp_path: Path) -> None:
    results = rapid.run(runs=1, size=10_000_000, udp_seconds=5, scenarios=["short"], out=tmp_path)
    assert (tmp_path / "rapid.png").stat().st_size > 0
    short = results["summary"]["short"]
    assert set(short) == {"e2e", "pep", "rapid"}
    # Two Cubic downloads fill the 1 MB RLC queue end to end; RAPID keeps it short, so the
    # 500 kB transfer beside them completes sooner.
    assert short["rapid"]["short_fct_s"] < short["e2e"]["short_fct_s"], short
