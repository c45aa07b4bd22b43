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


def test_flow_decisions_take_only_their_segments_once() -> None:
    """With the kernel log's flow and [snd_una, snd_nxt), an episode is the drops of that
    flow's outstanding segments; a drop belongs to the first decision that covers it."""
    a, b = (5001, 40000), (5002, 40001)  # two flows of one UE
    drops = [
        Drop(100 * MS, "ue1", "radio", *a, tcp_seq=1_000),
        Drop(101 * MS, "ue1", "overflow", *b, tcp_seq=1_000),  # other flow: not A1's
        Drop(102 * MS, "ue1", "overflow", *a, tcp_seq=90_000),  # beyond A1's snd_nxt
        Drop(300 * MS, "ue1", "radio", *a, tcp_seq=2**32 - 100),  # seq wrapped in A2's range
    ]
    decisions = [
        Decision(150 * MS, "ue1", int(Verdict.SUPPRESS), *a, snd_una=500, snd_nxt=80_000),
        # covers 90,000 (overflow) and the wrapped radio drop: congestion, said radio
        Decision(
            400 * MS, "ue1", int(Verdict.SUPPRESS), *a, snd_una=2**32 - 1_000, snd_nxt=100_000
        ),
        # covers drop 1 of A again, but A1 claimed it: unknown
        Decision(450 * MS, "ue1", int(Verdict.NOTIFY), *a, snd_una=0, snd_nxt=2_000),
    ]
    d = discrimination(decisions, drops, window_ns=1_000 * MS)
    assert (d.radio.tp, d.radio.fp, d.congestion.fn, d.unknown) == (1, 1, 1, 1)
    record = {"time_ns": 7, "verdict": "suppress", "flow": {"src": "10.0.0.1", "sport": 5001,
              "dport": 40000}, "snd_una": 1, "snd_nxt": 9}  # fmt: skip
    assert Decision.from_log(record, "ue1") == Decision(7, "ue1", 4, 5001, 40000, 1, 9)


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
