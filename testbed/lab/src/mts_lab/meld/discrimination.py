"""MELD's loss decisions joined with the emulator's ground truth: precision and recall.

The emulator labels every drop with its cause (``GET /emulator/v1/drops``: radio,
overflow, aqm, wan). A TCP sender reacts to a loss episode about one RTT after the drops
that caused it, once per episode (one ``ssthresh`` call, whatever the number of segments
lost). The kernel's decision log (``mec_pep.ran_aware.kernel.DecisionLog``) gives each
decision its flow and the sequence numbers the sender had out, [snd_una, snd_nxt): the
episode's drops are that flow's drops of a segment in that range, in the window
``(t - window_ns, t]`` before the decision and not already claimed by an earlier decision
of the flow. A decision without a flow (``sport`` None) falls back to its UE's drops in
the window. The episode's truth is *congestion* if any of its drops was a queue drop
(overflow, AQM, WAN), *radio* if all were radio losses, and unknown if none was found (a
spurious retransmit, or the window too short); unknown episodes are counted apart, never
scored.

A decision *says radio* when MELD kept the loss from the growth function (verdict
``SUPPRESS``); every other verdict (notify, stale, no radio state, mode off) reduces the
window, which is MELD saying *congestion*. Precision and recall are given for both classes.

``make experiment-meld-discrimination`` (``discrimination_experiment``) feeds it from
live runs; the join itself is tested on constructed episodes.
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
VERDICTS = {"off": 0, "no_data": 1, "stale": 2, "notify": 3, "suppress": 4, "rapid": 5}


class Truth(enum.Enum):
    RADIO = RADIO
    CONGESTION = CONGESTION
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Decision:
    """One loss event as the kernel decided it."""

    time_ns: int  # CLOCK_MONOTONIC, the emulator's clock
    ue: str  # the UE's name in the emulator (its drops carry it)
    verdict: int  # enum meld_verdict
    sport: int | None = None  # the flow on the RAN leg: sender port, receiver port
    dport: int | None = None
    snd_una: int = 0  # the sequence numbers out at the loss: [snd_una, snd_nxt)
    snd_nxt: int = 0

    @classmethod
    def from_log(cls, record: dict[str, Any], ue: str) -> Decision:
        """From ``MeldDecision.as_dict()``, for the UE named ``ue`` in the emulator."""
        return cls(int(record["time_ns"]), ue, VERDICTS[record["verdict"]],
                   record["flow"]["sport"], record["flow"]["dport"],
                   record["snd_una"], record["snd_nxt"])  # fmt: skip


@dataclass(frozen=True)
class Drop:
    """One labelled drop, as the emulator's drop log gives it."""

    time_ns: int
    ue: str
    cause: str
    sport: int = 0
    dport: int = 0
    tcp_seq: int = 0

    @classmethod
    def from_api(cls, event: dict[str, Any]) -> Drop:
        return cls(int(event["time_ns"]), str(event["ue"]), str(event["cause"]),
                   int(event.get("sport", 0)), int(event.get("dport", 0)),
                   int(event.get("tcp_seq", 0)))  # fmt: skip

    def in_episode(self, d: Decision) -> bool:
        """Of the decision's flow, a segment that was out when the loss was detected."""
        if (self.sport, self.dport) != (d.sport, d.dport):
            return False
        return (self.tcp_seq - d.snd_una) % 2**32 < (d.snd_nxt - d.snd_una) % 2**32


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


def episode_drops(decision: Decision, drops: list[Drop], window_ns: int) -> list[Drop]:
    """The drops a decision reacted to (of its flow and range when it has a flow)."""
    in_window = (
        d
        for d in drops
        if d.ue == decision.ue and decision.time_ns - window_ns < d.time_ns <= decision.time_ns
    )
    if decision.sport is None:
        return list(in_window)
    return [d for d in in_window if d.in_episode(decision)]


def episode_truths(
    decisions: Iterable[Decision], drops: Iterable[Drop], window_ns: int
) -> list[tuple[Decision, Truth]]:
    """Each decision (in time order) with the truth of its episode. A drop counts for the
    first decision of its flow that covers it."""
    if window_ns <= 0:
        raise ValueError("window_ns must be positive")
    unclaimed = sorted(drops, key=lambda d: d.time_ns)
    out = []
    for dec in sorted(decisions, key=lambda d: d.time_ns):
        mine = episode_drops(dec, unclaimed, window_ns)
        if dec.sport is not None:
            claimed = {id(d) for d in mine}
            unclaimed = [d for d in unclaimed if id(d) not in claimed]
        causes = {d.cause for d in mine}
        if not causes:
            truth = Truth.UNKNOWN
        else:
            truth = Truth.CONGESTION if causes & QUEUE_CAUSES else Truth.RADIO
        out.append((dec, truth))
    return out


def discrimination(
    decisions: Iterable[Decision], drops: Iterable[Drop], window_ns: int
) -> Discrimination:
    """Precision and recall of MELD's radio/congestion decisions against the truth."""
    out = Discrimination()
    for dec, truth in episode_truths(decisions, drops, window_ns):
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
