"""Small versions of ``make experiment-meld`` and ``make experiment-rapid``.

The whole chain on the emulated RAN: emulator → rnis-adapter → RabbitMQ → PEP → BPF maps,
with real downloads. Few, short runs: they check that the chain works and that the
kernel takes the decisions the modes promise, not the published figures (the full
experiments do that; docs/results.md).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mts_lab.meld import discrimination_experiment as discrimination
from mts_lab.meld import experiment as meld
from mts_lab.rapid import experiment as rapid

pytestmark = [pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]


# Each relay of the PEP (the compiled core runs the extension's hooks from its events).
RELAY_ENV = {"python": {"PEP_RELAY_CORE": "python"}, "uring": {"PEP_RELAY_CORE": "uring"}}


@pytest.mark.parametrize("relay", RELAY_ENV)
def test_meld_small(build: tuple[Path, Path], tmp_path: Path, relay: str) -> None:
    results = meld.run(["reno"], ["off", "meld-de"], runs=1, size=3_000_000, out=tmp_path,
                       pep_env=RELAY_ENV[relay])  # fmt: skip
    assert (tmp_path / "meld.png").stat().st_size > 0
    assert json.loads((tmp_path / "meld.json").read_text())["summary"]
    off, de = (results["summary"]["reno"][m]["verdicts"] for m in ("off", "meld-de"))
    assert off["losses"] > 0 and off["notified"] == off["losses"] and off["suppressed"] == 0
    assert de["suppressed"] > 0, de  # fresh radio state reached the kernel and was used
    assert de["no_data"] == 0


@pytest.mark.parametrize("relay", RELAY_ENV)
def test_rapid_small(build: tuple[Path, Path], tmp_path: Path, relay: str) -> None:
    results = rapid.run(runs=1, size=10_000_000, udp_seconds=5, scenarios=["short"], out=tmp_path,
                        pep_env=RELAY_ENV[relay])  # fmt: skip
    assert (tmp_path / "rapid.png").stat().st_size > 0
    short = results["summary"]["short"]
    assert set(short) == {"e2e", "pep", "rapid"}
    # Two Cubic downloads fill the 1 MB RLC queue end to end; RAPID keeps it short, so the
    # 500 kB transfer beside them completes sooner.
    assert short["rapid"]["short_fct_s"] < short["e2e"]["short_fct_s"], short


def test_meld_discrimination_small(build: tuple[Path, Path], tmp_path: Path) -> None:
    """One short run per mode on the discrimination scenario: both kinds of drop labels
    occur, the kernel logged decisions, and the join scores them against the labels."""
    results = discrimination.run(["reno"], list(discrimination.MODES), runs=1,
                                 size=2_000_000, out=tmp_path)  # fmt: skip
    assert set(results["summary"]["reno"]) == set(discrimination.MODES)
    assert (tmp_path / "discrimination.png").stat().st_size > 0
    saved = json.loads((tmp_path / "discrimination.json").read_text())
    runs = {m: saved["runs"]["reno"][m][0] for m in discrimination.MODES}
    drops = sum((Counter(r["drops"]) for r in runs.values()), Counter())
    assert drops["radio"] > 0 and drops["overflow"] > 0, drops
    for mode, r in runs.items():
        j = r["discrimination"]
        scored = sum(j["radio"][k] for k in ("tp", "fp", "fn", "tn"))
        assert len(r["decisions"]) == scored + j["unknown"] > 0, (mode, j)
        assert scored >= len(r["decisions"]) / 2, (mode, j)  # most decisions found their drops
    # off never says radio; the MELD modes take decisions from fresh radio state
    assert set(runs["off"]["verdicts"]) == {"off"} and runs["off"]["discrimination"]["radio"][
        "fp"] + runs["off"]["discrimination"]["radio"]["tp"] == 0  # fmt: skip
    for mode in ("meld-de", "meld-me", "meld-overflow"):
        assert runs[mode]["verdicts"].get("suppress", 0) > 0, runs[mode]["verdicts"]
        assert {r["mode"] for r in runs[mode]["decisions"]} == {mode}
    # ignore-loss keeps every loss; MELD-overflow decided on the history, against the
    # scenario's buffer (120 kB at 90 %)
    assert set(runs["ignore-loss"]["verdicts"]) == {"suppress"}, runs["ignore-loss"]["verdicts"]
    decided = ("notify", "suppress")
    fresh = [r for r in runs["meld-overflow"]["decisions"] if r["verdict"] in decided]
    assert fresh and all(r["full_bytes"] == 108_000 and r["window_buckets"] >= 1 for r in fresh)
    for r in fresh:
        assert (r["verdict"] == "notify") == (r["window_txq_peak_bytes"] >= r["full_bytes"]), r
    # run 1 sampled both RAN legs' windows, and every decision of a sampled flow got its
    # regrowth entry
    legs = runs["meld-overflow"]["ran_legs"]
    assert set(legs) == {str(p) for p in discrimination.PORTS}, legs.keys()
    assert all(s and {"t", "cwnd", "srtt_ms"} <= s[0].keys() for s in legs.values()), legs
    assert len(runs["meld-overflow"]["regrowth"]) == len(runs["meld-overflow"]["decisions"])
