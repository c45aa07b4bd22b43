"""Cyclic garbage of other threads never collected in a relay thread (``mec_pep.relay.collector``).

The scenario runs in its own process (``tools/gc_in_relay.py``), where the relays' own
descriptors provably reuse the numbers of the main thread's sockets; it needs no namespace.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

from mec_pep.relay.collector import GarbageCollector

TOOL = Path(__file__).resolve().parent / "tools" / "gc_in_relay.py"


def test_garbage_of_another_thread_leaves_the_relays_descriptors_alone() -> None:
    run = subprocess.run(
        [sys.executable, str(TOOL)], capture_output=True, text=True, timeout=180, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.splitlines()[-1])
    # The hazard is real: each relay's epoll has the number of a main-thread socket.
    assert set(report["epolls"]) <= set(report["foreign"]), report
    assert report["alive"] == [True, True], report
    assert report["relayed"] == 8, report
    assert not report["gc_enabled_while_running"]
    # The garbage was still collected, in a thread of the process's table: the main
    # thread's descriptors were the ones closed.
    assert report["collected"], report
    assert sorted(report["closed_here"]) == sorted(report["foreign"]), report
    assert report["gc_enabled_after_stop"]


def test_the_collector_runs_the_generation_the_interpreter_would() -> None:
    collector = GarbageCollector()
    was_enabled, old = gc.isenabled(), gc.get_threshold()
    gc.collect()
    try:
        gc.disable()
        gc.set_threshold(100, 2, 1)
        assert collector.collect_due() is None  # generation 0 below its threshold
        keep: list[list[list[int]]] = []
        generations = []
        while len(generations) < 9:
            keep.append([[] for _ in range(200)])  # past generation 0's threshold
            generations.append(collector.collect_due())
        # generation 1 after 3 collections of 0, a full one after 2 of generation 1
        assert generations == [0, 0, 0, 1, 0, 0, 0, 1, 2]
    finally:
        gc.set_threshold(*old)
        if was_enabled:
            gc.enable()
