"""MELD's loss decisions joined with the emulator's ground truth: precision and recall.

The emulator labels every drop with its cause (``GET /emulator/v1/drops``: radio,
overflow, aqm, wan). A TCP sender reacts to a loss episode about one RTT after the drops
that caused it, once per episode (one ``ssthresh`` call, whatever the number of segments
lost). So each decision is matched with the drops of its UE in the window
``(t - window_ns, t]`` before it, and the episode's truth is *congestion* if any of those
drops was a queue drop (overflow, AQM, WAN), *radio* if all were radio losses, and
unknown if none was found (a spurious retransmit, or the window too short); unknown
episodes are counted apart, never scored.

A decision *says radio* when MELD kept the loss from the growth function (verdict
``SUPPRESS``); every other verdict (notify, stale, no radio state, mode off) reduces the
window, which is MELD saying *congestion*. Precision and recall are given for both classes.

What is still absent (issue 12): the kernel program keeps per-UE counters and the last
loss of each socket, not a per-event log with timestamps, so an experiment cannot yet feed
this join from a live run; the join is tested on constructed episodes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

RADIO = "radio"
CONGESTION = "congestion"
QUEUE_CAUSES = frozenset({"overflow", "aqm", "wan"})
SUPPRESS_VERDICT = 4  # enum meld_verdict in pep/bpf/meld.h (mec_pep.ran_aware.kernel.Verdict)


class Truth(enum.Enum):
    RADIO = RADIO
    CONGESTION = CONGESTION
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Decision:
    """One loss event as the kernel decided it."""

    time_ns: int  # CLOCK_MONOTONIC, the emulator's clock
    ue: str
    verdict: int  # enum meld_verdict


@dataclass(frozen=True)
class Drop:
    """One labelled drop, as the emulator's drop log gives it."""

    time_ns: int
    ue: str
    cause: str

    @classmethod
    def from_api(cls, event: dict[str, Any]) -> Drop:
        return cls(int(event["time_ns"]), str(event["ue"]), str(event["cause"]))


@dataclass
class Scores:
    """Confusion counts of one class (radio or congestion) and what follows from them."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def as_dict(self) -> dict[str, int | float | None]:
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "precision": self.precision, "recall": self.recall}  # fmt: skip


@dataclass
class Discrimination:
    radio: Scores = field(default_factory=Scores)
    congestion: Scores = field(default_factory=Scores)
    unknown: int = 0  # decisions with no drop in their window

    def as_dict(self) -> dict[str, object]:
        return {RADIO: self.radio.as_dict(), CONGESTION: self.congestion.as_dict(),
                "unknown": self.unknown}  # fmt: skip


def episode_truth(decision: Decision, drops: list[Drop], window_ns: int) -> Truth:
    """The cause of the episode a decision reacted to (drops sorted by time)."""
    causes = {
        d.cause
        for d in drops
        if d.ue == decision.ue and decision.time_ns - window_ns < d.time_ns <= decision.time_ns
    }
    if not causes:
        return Truth.UNKNOWN
    return Truth.CONGESTION if causes & QUEUE_CAUSES else Truth.RADIO


def discrimination(
    decisions: Iterable[Decision], drops: Iterable[Drop], window_ns: int
) -> Discrimination:
    """Precision and recall of MELD's radio/congestion decisions against the truth."""
    if window_ns <= 0:
        raise ValueError("window_ns must be positive")
    ordered = sorted(drops, key=lambda d: d.time_ns)
    out = Discrimination()
    for dec in decisions:
        truth = episode_truth(dec, ordered, window_ns)
        if truth is Truth.UNKNOWN:
            out.unknown += 1
            continue
        said_radio = dec.verdict == SUPPRESS_VERDICT
        is_radio = truth is Truth.RADIO
        _score(out.radio, said=said_radio, actual=is_radio)
        _score(out.congestion, said=not said_radio, actual=not is_radio)
    return out


def _score(s: Scores, *, said: bool, actual: bool) -> None:
    if said and actual:
        s.tp += 1
    elif said:
        s.fp += 1
    elif actual:
        s.fn += 1
    else:
        s.tn += 1


def read_drops(get: Callable[[str], dict[str, Any]], after: int = 0) -> Iterator[Drop]:
    """Every drop after cursor ``after`` from the emulator's log (``get`` = an authorised
    GET of a path returning JSON). Raises if the ring overwrote drops before they were read:
    a join with missing truth would be wrong, not approximate."""
    while True:
        page = get(f"/emulator/v1/drops?after={after}&limit=10000")
        if page["lost"]:
            raise RuntimeError(f"the emulator's drop log lost {page['lost']} drops after {after}")
        yield from (Drop.from_api(e) for e in page["drops"])
        if not page["drops"]:
            return
        after = page["next"]
