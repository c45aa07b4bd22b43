"""``make run`` in small: the whole system on the emulated RAN, through the MEC platform.

Testbed, platform in the MEC namespace, the RNIS adapter and the PEP onboarded from their
AppDs and started by the platform, RNIS → RabbitMQ → PEP → BPF, three short downloads.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from mts_lab import run

pytestmark = [pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_the_whole_system_runs(tmp_path: Path) -> None:
    for built in ("build/bin/rnis-adapter", "build/bpf/meld.bpf.o", "build/bin/meld-loader"):
        assert (REPO / built).exists(), f"{built} is missing: run `make build` (make test does)"
    name = f"tr{secrets.token_hex(2)}"
    code = run.main(["--name", name, "--size", "1500000", "--out", str(tmp_path)])
    assert code == 0
    result = json.loads((tmp_path / "result.json").read_text())
    e2e, pep_off, meld = result["downloads"]
    assert [d["label"] for d in result["downloads"]] == ["end to end", "PEP, MELD off",
                                                         "PEP + MELD-DE"]  # fmt: skip
    assert e2e["meld"] is None
    # Through the PEP every loss reaches the CCA with MELD off; with MELD-DE, fresh radio
    # state from the RNIS feed lets the kernel keep (some of) them from it.
    assert pep_off["meld"]["suppressed"] == 0
    assert meld["meld"]["suppressed"] > 0, meld["meld"]
    assert (tmp_path / "result.png").stat().st_size > 0
