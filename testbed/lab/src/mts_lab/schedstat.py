"""Scheduler times of a process's threads, from ``/proc/<pid>/task/<tid>/schedstat``: the
kernel's own nanosecond counters (``/proc/.../stat`` has 10 ms ticks). The one reader the
lab tools share (``mts_lab.pep.bench``, ``.hook_delay``, ``.stages``)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class SchedStat(NamedTuple):
    run_ns: int  # on a CPU
    wait_ns: int  # runnable, waiting on a run queue for a CPU
    slices: int  # times it was given a CPU


def thread_ids(pid: int) -> list[int]:
    """The threads of process ``pid``; none if it has ended."""
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


def schedstat(pid: int, tid: int) -> SchedStat | None:
    """Thread ``tid`` of process ``pid``'s times; None if it has ended (its file gone, or
    read empty as it goes)."""
    try:
        fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
    except OSError:
        return None
    return SchedStat(*map(int, fields)) if len(fields) == 3 else None
