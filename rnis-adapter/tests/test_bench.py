"""The small version of `make bench-rnis`: the whole pipeline runs and reports sane figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "bench_rnis.py"


@pytest.mark.slow
def test_quick_benchmark(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "polls/s" in r.stdout
    [result] = json.loads((tmp_path / "bench-rnis.json").read_text())["results"]
    assert result["ues"] == 8 and result["polls_per_s"] > 50, result
    assert result["consumed_per_s"] > 0 and result["source_to_consumer_us"]["p50"] > 0
    assert result["publish"] == "cell", "the quick case reads cell messages"
    assert result["consumed_per_s"] > 4 * result["consumed_messages_per_s"] > 0, "8 UEs each"
    assert set(result["cpu_cores"]) == {"adapter", "broker", "source", "consumer"}
    assert 0 < result["cpu_cores"]["adapter"] < 2
    assert (tmp_path / "bench-rnis.png").stat().st_size > 10_000
