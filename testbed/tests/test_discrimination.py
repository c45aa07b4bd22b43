"""The join of MELD's loss decisions with the emulator's drop labels (issue 12)."""

from __future__ import annotations

import pytest

from mec_pep.ran_aware.kernel import Verdict
from mts_lab.meld.discrimination import (
    SUPPRESS_VERDICT,
    Decision,
    Drop,
    discrimination,
    read_drops,
)

MS = 1_000_000


def test_suppress_verdict_is_the_kernels() -> None:
    assert Verdict.SUPPRESS == SUPPRESS_VERDICT


def test_precision_and_recall_from_constructed_episodes() -> None:
    drops = [
        Drop(100 * MS, "ue1", "radio"),  # episode A: radio only
        Drop(101 * MS, "ue1", "radio"),
        Drop(300 * MS, "ue1", "radio"),  # episode B: radio and overflow -> congestion
        Drop(305 * MS, "ue1", "overflow"),
        Drop(500 * MS, "ue1", "aqm"),  # episode C: congestion
        Drop(700 * MS, "ue1", "radio"),  # episode D: radio
        Drop(700 * MS, "ue2", "overflow"),  # another UE's drop, same time: not D's
    ]
    decisions = [
        Decision(150 * MS, "ue1", int(Verdict.SUPPRESS)),  # A: radio said radio (TP)
        Decision(350 * MS, "ue1", int(Verdict.SUPPRESS)),  # B: congestion said radio (FP)
        Decision(550 * MS, "ue1", int(Verdict.NOTIFY)),  # C: congestion said congestion
        Decision(750 * MS, "ue1", int(Verdict.STALE)),  # D: radio said congestion (FN)
        Decision(950 * MS, "ue1", int(Verdict.SUPPRESS)),  # no drop in its window
    ]
    d = discrimination(decisions, drops, window_ns=100 * MS)
    assert (d.radio.tp, d.radio.fp, d.radio.fn, d.radio.tn) == (1, 1, 1, 1)
    assert d.radio.precision == 0.5 and d.radio.recall == 0.5
    assert (d.congestion.tp, d.congestion.fp, d.congestion.fn) == (1, 1, 1)
    assert d.unknown == 1
    # a window too short to reach back to the drops leaves everything unknown
    assert discrimination(decisions, drops, window_ns=10 * MS).unknown == 5
    # nothing said about a class: no precision (not 0, not 1)
    none = discrimination(decisions[2:3], drops, window_ns=100 * MS)
    assert none.radio.precision is None and none.radio.recall is None
    assert none.as_dict()["congestion"] == {
        "tp": 1, "fp": 0, "fn": 0, "tn": 0, "precision": 1.0, "recall": 1.0,
    }  # fmt: skip
    with pytest.raises(ValueError):
        discrimination(decisions, drops, window_ns=0)


def test_read_drops_pages_and_refuses_lost_truth() -> None:
    event = {"time_ns": 5, "ue": "ue1", "cause": "radio"}
    pages = {
        0: {"drops": [event, event], "next": 2, "lost": 0},
        2: {"drops": [event], "next": 3, "lost": 0},
        3: {"drops": [], "next": 3, "lost": 0},
    }

    def get(path: str) -> dict:
        return pages[int(path.split("after=")[1].split("&")[0])]

    assert list(read_drops(get)) == [Drop(5, "ue1", "radio")] * 3
    pages[0]["lost"] = 7
    with pytest.raises(RuntimeError, match="lost 7"):
        list(read_drops(get))
