"""Where one bulk stream's time goes, thread by thread: running, waiting for a CPU, asleep.

    python -m mts_lab.pep.stages [SYSTEM ...] [--cases download_1,upload_1] [--rounds N]

An iperf3 stream (the bench's topology and servers) through each system (``direct``:
routed; ``core``: the PEP's compiled relay, its default; ``pep``: its Python relay;
``NAME:PEP_X=V,...``: the core with settings), interleaved round by round. Lab keys in a
variant's settings, not passed to the PEP: ``SYSTEM=direct|core|pep|haproxy`` (the system
the variant runs, default the core); for the run: ``PIN_SENDER=CPU``, ``PIN_PROXY=CPU``,
``PIN_RECEIVER=CPU`` (that stage's threads on one CPU: placement as an experiment, e.g.
``s0-pr1:SYSTEM=core,PIN_SENDER=0,PIN_PROXY=1,PIN_RECEIVER=1``), ``FIFO_PROXY=PRIO`` (the
proxy's threads SCHED_FIFO), ``RPS=MASK`` (receive packet steering on the rx queue of
every veth of the lab, hex CPU mask; 0 after the run) and ``RFS=ENTRIES`` (receive flow
steering too). In a window of
``--seconds`` after the first second of each run, per stage thread (the sending iperf3,
the proxy's threads that ran, the receiving iperf3, the kernel's threads that ran) from
``/proc/<pid>/task/<tid>/schedstat``: the share of the window it ran (softirq work done
inline in its context included: this kernel has no IRQ time accounting), waited runnable
on a run queue, and slept; the mean wait per time it got a CPU; its voluntary and
involuntary switches per GB. Per CPU: the shares in user, system, softirq, idle (``/proc/stat``,
tick-sampled); machine-wide context switches per GB. With ``--where``, also sampled every
``SAMPLE_S`` from ``/proc/<tid>/stat`` and ``wchan``: where the busiest thread of each
stage was (running or runnable, or asleep in which kernel function); the sampler's own CPU
is reported, since it takes some from the stages.

Does a stream's rate follow from one saturated thread (one stage ~100 % running), from
run-queue waiting (three busy stages on two CPUs) or from sleeping between hand-offs
(every stage often asleep, the machine idle)? JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mts_lab.line import Lab
from mts_lab.pep.bench import (
    IPERF_DIRECT,
    PEP_SETTINGS,
    Bench,
    per_cpu_seconds,
    per_cpu_since,
)
from mts_lab.schedstat import schedstat, thread_ids

WARM_S = 1.0  # slow start and the splice switch (after 64 KiB) are over by then
TAIL_S = 0.5  # the window ends before iperf3 does
SAMPLE_S = 0.01  # sampling period (3 threads: ~500 small reads a second)
ENDS = ("sender", "receiver")
# Other sessions share the machine: a round in which busy CPU outside the listed threads
# (theirs, or threads below MIN_RUN_PCT) exceeds this (% of one CPU) is disturbed. The
# undisturbed rounds of 27 Nov 05:48-06:33 UTC had 3.5-13.4 %, the disturbed 48-110 %.
DISTURBED_PCT = 25.0
MIN_RUN_PCT = 1.0  # threads that ran less are left out (the PEP's idle Python threads)
PINS = {"PIN_SENDER": "sender", "PIN_PROXY": "proxy", "PIN_RECEIVER": "receiver"}
# A variant's settings the lab applies, not the PEP.
LAB_KEYS = ("SYSTEM", "RPS", "RFS", "FIFO_PROXY", *PINS)


def kernel_threads() -> list[int]:
    """Kernel threads (children of kthreadd): ksoftirqd, kworkers, io_uring workers are not
    (those are the proxy's own threads)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == "2":
                pids.append(int(entry.name))
    return pids


def thread_state(pid: int, tid: int) -> dict[str, Any] | None:
    """schedstat (ns on a CPU, ns waiting runnable, times given a CPU) and switch counts."""
    base = Path(f"/proc/{pid}/task/{tid}")
    stat = schedstat(pid, tid)
    try:
        status = (base / "status").read_text()
        comm = (base / "comm").read_text().strip()
    except OSError:
        return None  # ended
    if stat is None:
        return None  # ended before its times were read
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "comm": comm,
        **stat._asdict(),
        "voluntary": int(fields["voluntary_ctxt_switches"]),
        "involuntary": int(fields["nonvoluntary_ctxt_switches"]),
    }


def machine_switches() -> int:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("ctxt "):
            return int(line.split()[1])
    raise RuntimeError("no ctxt in /proc/stat")


class Sleeps(threading.Thread):
    """Samples where the stage threads are: on a run queue or CPU (``R``), or asleep and in
    which kernel function (``wchan``), every SAMPLE_S until stopped; and how the runnable
    ones are placed: ``stacked``, two or more on one CPU's run queue while none is on
    another CPU (one of them waits though a CPU may be free)."""

    def __init__(self, threads: dict[str, tuple[int, int]]) -> None:
        super().__init__(daemon=True)
        self.threads = threads
        self.seen: dict[str, Counter[str]] = {role: Counter() for role in threads}
        self.placements: Counter[str] = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        cpus = os.cpu_count() or 1
        while not self.halt.wait(SAMPLE_S):
            runnable = [0] * cpus
            for role, (pid, tid) in self.threads.items():
                base = f"/proc/{pid}/task/{tid}"
                try:
                    fields = Path(f"{base}/stat").read_text().rsplit(")", 1)[1].split()
                    where = "runnable" if fields[0] == "R" else Path(f"{base}/wchan").read_text()
                except OSError:
                    continue
                self.seen[role][where or fields[0]] += 1
                if fields[0] == "R":
                    runnable[int(fields[36])] += 1  # field 39: its CPU (run queue)
            stacked = max(runnable) >= 2 and min(runnable) == 0
            self.placements[
                "stacked" if stacked else "all asleep" if sum(runnable) == 0 else "spread"
            ] += 1

    def shares(self) -> dict[str, dict[str, float]]:
        """Per role (and ``placement``): the share of its samples (%) in each place."""
        return {
            role: {k: round(100 * n / max(sum(c.values()), 1), 1) for k, n in c.most_common(6)}
            for role, c in (*self.seen.items(), ("placement", self.placements))
        }


TRACEFS = Path("/sys/kernel/tracing")
WAKE_EVENTS = ("sched/sched_waking", "sched/sched_wakeup", "sched/sched_migrate_task")
MIGRATE_LINE = re.compile(r"sched_migrate_task: comm=.* pid=(?P<pid>\d+) prio=")
WAKE_LINE = re.compile(
    r"^\s*(?P<waker>.+?)-\d+\s+\[(?P<cpu>\d+)\].*?(?P<event>sched_waking|sched_wakeup): "
    r"comm=.* pid=(?P<pid>\d+) prio=\d+ target_cpu=(?P<target>\d+)"
)


class Wakeups:
    """Where the scheduler puts the stage threads when they are woken: ``sched_waking``
    fires on the waker's CPU (and names the wakee's previous CPU), ``sched_wakeup`` names the
    CPU chosen, ``sched_migrate_task`` every move between CPUs (at wake-up or by the load
    balancer). Recorded in a tracefs instance of its own, filtered to the stage threads (a
    few thousand events a second). Per role: wake-ups, the share put on the waker's CPU,
    the share moved off the previous CPU, the share put on each CPU, the share by waker
    (softirq work shows as the thread it interrupted); its moves between CPUs in all (a
    count, not a share)."""

    def __init__(self, threads: dict[str, tuple[int, int]]) -> None:
        self.roles = {tid: role.split()[0] for role, (_, tid) in threads.items()}
        self.dir = TRACEFS / "instances" / f"mts-stages-{os.getpid()}"

    def __enter__(self) -> Wakeups:
        self.dir.mkdir()
        pids = " || ".join(f"pid == {tid}" for tid in self.roles)
        for event in WAKE_EVENTS:
            (self.dir / "events" / event / "filter").write_text(pids)
            (self.dir / "events" / event / "enable").write_text("1")
        (self.dir / "tracing_on").write_text("1")
        return self

    def __exit__(self, *_: object) -> None:
        (self.dir / "tracing_on").write_text("0")
        self.text = (self.dir / "trace").read_text()
        self.dir.rmdir()

    def shares(self) -> dict[str, dict[str, Any]]:
        waking: dict[str, tuple[str, str, str]] = {}  # pid: (waker, waker's CPU, previous CPU)
        placed: dict[str, Counter[str]] = {r: Counter() for r in self.roles.values()}
        for line in self.text.splitlines():
            if moved := MIGRATE_LINE.search(line):
                placed[self.roles[int(moved["pid"])]]["migrations"] += 1
            if (m := WAKE_LINE.match(line)) is None:
                continue
            if m["event"] == "sched_waking":
                waking[m["pid"]] = (m["waker"].strip(), m["cpu"], m["target"])
            elif m["pid"] in waking:
                waker, waker_cpu, previous = waking.pop(m["pid"])
                c = placed[self.roles[int(m["pid"])]]
                c["wakeups"] += 1
                c["on waker's CPU"] += m["target"] == waker_cpu
                c["moved"] += m["target"] != previous
                c[f"to CPU {int(m['target'])}"] += 1
                c[f"by {waker}"] += 1
        return {
            role: {k: c[k] for k in ("wakeups", "migrations")}
            | {
                k: round(100 * n / c["wakeups"], 1)
                for k, n in c.items()
                if k not in ("wakeups", "migrations")
            }
            for role, c in placed.items()
            if c["wakeups"]
        }


def _iperf3_server(bench: Bench, port: int) -> int:
    for proc in bench.procs:
        args = proc.args
        if isinstance(args, list) and args[-3:] == ["-s", "-p", str(port)]:
            return proc.pid
    raise RuntimeError(f"no iperf3 server on {port}")


def stream(
    bench: Bench,
    system: str,
    streams: int,
    download: bool,
    seconds: float,
    where: bool,
    pins: dict[str, int] | None = None,
    wakeups: bool = False,
    fifo: int = 0,
) -> dict[str, Any]:
    """One iperf3 run through ``system``, measured in a window of ``seconds``; with
    ``where``, the stage threads' places sampled too (which costs the sampler's CPU); with
    ``pins`` (role: CPU), those stages' threads run on that CPU only, for this run; with
    ``wakeups``, where the busiest thread of each stage is put when woken; with ``fifo``, the
    proxy's threads run SCHED_FIFO at that priority for this run."""
    host, port = bench.target(system)
    length = WARM_S + seconds + TAIL_S
    cmd = ["iperf3", "-c", host, "-p", str(port), "-t", str(length), "-P", str(streams), "-J"]
    client = bench.lab.popen(
        bench.lab.client_ns,
        [*cmd, *(["-R"] if download else [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    server = _iperf3_server(bench, IPERF_DIRECT if system == "haproxy" else port)  # its backend
    # The stages: sender, proxy, receiver; by role, the (pid, tid) of each thread.
    ends = {"sender": server, "receiver": client.pid}
    if not download:
        ends = {"sender": client.pid, "receiver": server}
    time.sleep(WARM_S / 2)
    threads = {role: [(pid, tid) for tid in thread_ids(pid)] for role, pid in ends.items()}
    threads["proxy"] = [(p.pid, tid) for p in bench.processes(system) for tid in thread_ids(p.pid)]
    threads["kernel"] = [(pid, pid) for pid in kernel_threads()]
    pinned = _pin(threads, pins or {})
    _policy(threads["proxy"], fifo)
    warm = {key: thread_state(*key) for group in threads.values() for key in group}
    time.sleep(WARM_S / 2)
    busiest = _busiest(threads, warm) if where or wakeups else {}
    sleeps = Sleeps(busiest if where else {})
    tracer = Wakeups(busiest)
    sleeps.start()
    threads["sampler"] = [(os.getpid(), tid) for tid in thread_ids(os.getpid())]  # its own cost
    # The window starts before the first thread is read and ends after the last: each
    # thread's counts cover part of it, so running + waiting never exceed it.
    with tracer if wakeups else contextlib.nullcontext():
        cpus, switches, started = per_cpu_seconds(), machine_switches(), time.monotonic()
        before = {key: thread_state(*key) for group in threads.values() for key in group}
        time.sleep(seconds)
        after = {key: thread_state(*key) for key in before}
    wall = time.monotonic() - started
    per_cpu, switches = per_cpu_since(cpus, wall), machine_switches() - switches
    sleeps.halt.set()
    sleeps.join()
    report = json.loads(client.communicate(timeout=60)[0])
    _unpin(pinned)
    _policy(threads["proxy"], 0)
    if "error" in report:
        raise RuntimeError(f"iperf3 through {system}: {report['error']}")
    gbps = report["end"]["sum_received"]["bits_per_second"] / 1e9
    gigabytes = gbps * wall / 8  # the window's bytes at the run's rate
    stages = []
    for role, group in threads.items():
        for key in group:
            row = _stage_row(role, key[1], before[key], after[key], wall, gigabytes)
            if row is not None and (role in ENDS or row["run_pct"] >= MIN_RUN_PCT):
                row["where"] = sleeps.shares().get(f"{role} {key[1]}", {})
                stages.append(row)
    busy = sum(100 - c["idle"] - c["iowait"] for c in per_cpu)
    return {
        "gbps": gbps,
        "window_s": wall,
        "stages": stages,
        "placement_pct": sleeps.shares()["placement"],
        "per_cpu_pct": per_cpu,
        # Busy CPU (% of one) not in the rows: other sessions' work, threads that ran less
        # than MIN_RUN_PCT, softirq work that interrupted the idle task.
        "unlisted_pct": round(busy - sum(r["run_pct"] for r in stages), 1),
        # The machine's busy CPU-seconds per Gbit (every process, softirq included).
        "machine_cpu_s_per_gbit": busy / 100 / gbps,
        "machine_switches_per_gb": switches / gigabytes,
        "load": os.getloadavg()[0],
        "pins": pins or {},
        "wakeups_pct": tracer.shares() if wakeups else {},
    }


def _pin(threads: dict[str, list[tuple[int, int]]], pins: dict[str, int]) -> list[int]:
    """Each thread of a pinned stage on its CPU; the threads pinned. io_uring's workers
    refuse an affinity (PF_NO_SETAFFINITY) and are left where the kernel puts them."""
    pinned = []
    for role, cpu in pins.items():
        for _, tid in threads[role]:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, {cpu})
                pinned.append(tid)
    return pinned


def _unpin(tids: list[int]) -> None:
    """The long-lived servers and the PEP may run anywhere again (for the next variant)."""
    for tid in tids:
        with contextlib.suppress(OSError):  # ended
            os.sched_setaffinity(tid, range(os.cpu_count() or 1))


def _policy(group: list[tuple[int, int]], fifo: int) -> None:
    """The threads SCHED_FIFO at priority ``fifo`` (a real-time thread is pushed to a CPU
    running none at wake-up), or back to SCHED_OTHER (0)."""
    policy = os.SCHED_FIFO if fifo else os.SCHED_OTHER
    for _, tid in group:
        with contextlib.suppress(OSError):  # ended, or an io_uring worker
            os.sched_setscheduler(tid, policy, os.sched_param(fifo))


VETHS = ("client_ns c0", "pep_ns pc0", "pep_ns ps0", "server_ns s0")  # every rx queue


def set_rps(lab: Lab, mask: str, flows: int = 0) -> None:
    """Receive packet steering on every veth of the lab (``mask``: hex CPUs; 0: off). A
    veth's receive runs in the sender's softirq on the sender's CPU; with RPS, in the
    softirq of the CPU the flow's hash picks from ``mask``; with ``flows`` (RFS, receive
    flow steering: that many flow entries), of the CPU the receiving socket's reader last
    ran on. The flow table is the kernel's, not a namespace's: set for the run, 0 after."""
    for place in VETHS:
        ns, dev = place.split()
        queue = f"/sys/class/net/{dev}/queues/rx-0"
        lab.sh(getattr(lab, ns), f"echo {mask} > {queue}/rps_cpus")
        lab.sh(getattr(lab, ns), f"echo {flows} > {queue}/rps_flow_cnt")
    Path("/proc/sys/net/core/rps_sock_flow_entries").write_text(f"{flows}\n")


def _busiest(
    threads: dict[str, list[tuple[int, int]]], since: dict[tuple[int, int], dict[str, Any] | None]
) -> dict[str, tuple[int, int]]:
    """Per stage (sender, proxy, receiver), the thread that ran most since ``since``: the
    one the sampler follows ("ROLE TID": (pid, tid))."""
    chosen = {}
    for role in ("sender", "proxy", "receiver"):
        ran = []
        for key in threads[role]:
            a, b = since[key], thread_state(*key)
            if a is not None and b is not None:
                ran.append((b["run_ns"] - a["run_ns"], key))
        if ran:
            key = max(ran)[1]
            chosen[f"{role} {key[1]}"] = key
    return chosen


def _stage_row(
    role: str,
    tid: int,
    a: dict[str, Any] | None,
    b: dict[str, Any] | None,
    wall: float,
    gigabytes: float,
) -> dict[str, Any] | None:
    if a is None or b is None:
        return None  # started or ended inside the window
    run, wait = (b["run_ns"] - a["run_ns"]) / 1e9, (b["wait_ns"] - a["wait_ns"]) / 1e9
    slices = b["slices"] - a["slices"]
    return {
        "role": role,
        "tid": tid,
        "comm": b["comm"],
        "run_pct": round(100 * run / wall, 1),
        "wait_pct": round(100 * wait / wall, 1),
        "sleep_pct": round(100 * max(wall - run - wait, 0.0) / wall, 1),
        "wait_us_per_slice": round(wait / slices * 1e6, 1) if slices else None,
        "voluntary_per_gb": round((b["voluntary"] - a["voluntary"]) / gigabytes),
        "involuntary_per_gb": round((b["involuntary"] - a["involuntary"]) / gigabytes),
    }


def run(
    systems: dict[str, dict[str, str] | None],
    cases: list[str],
    rounds: int,
    seconds: float,
    out: Path,
    where: bool = False,
    retries: int = 0,
    json_name: str = "stages",
    wakeups: bool = False,
) -> dict[str, Any]:
    """``stream`` for every system and case, round after round (a run disturbed by other
    work again, up to ``retries`` times; every run kept); then the lab goes down."""
    lab = Lab.create("pt")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-stages-")))
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    load_before = os.getloadavg()
    try:
        bench.start()
        for r in range(rounds):
            for name, settings in systems.items():
                kind, lab_keys, pep = _variant(name, settings)
                if kind in PEP_SETTINGS:
                    bench.use(kind, **pep)
                pins = {PINS[k]: int(v) for k, v in lab_keys.items() if k in PINS}
                set_rps(lab, lab_keys.get("RPS", "0"), int(lab_keys.get("RFS", "0")))
                for case in cases:
                    direction, streams = case.split("_")
                    for _ in range(1 + retries):  # a disturbed run again, up to ``retries``
                        x = stream(
                            bench, kind, int(streams), direction == "download", seconds, where,
                            pins, wakeups, int(lab_keys.get("FIFO_PROXY", "0")),
                        )  # fmt: skip
                        x["rps"] = {k: lab_keys.get(k, "0") for k in ("RPS", "RFS")}
                        samples.setdefault(case, {}).setdefault(name, []).append(x)
                        print(f"round {r + 1}/{rounds} {case} {name}: {_line(x)}", flush=True)
                        if x["unlisted_pct"] <= DISTURBED_PCT:
                            break
    finally:
        set_rps(lab, "0")  # the flow table is the kernel's: not left to the next user
        bench.stop()
        lab.down()
    results = {
        "summary": {
            case: {name: _summary(runs) for name, runs in by_name.items()}
            for case, by_name in samples.items()
        },
        "samples": samples,
        "seconds": seconds,
        "rounds": rounds,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{json_name}.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def _variant(
    name: str, settings: dict[str, str] | None
) -> tuple[str, dict[str, str], dict[str, str]]:
    """The bench's system for a name (direct, pep, core, haproxy; a variant with settings is
    the core unless SYSTEM says otherwise), the lab's keys and the PEP's settings."""
    given = settings or {}
    lab_keys = {k: v for k, v in given.items() if k in LAB_KEYS}
    pep = {k: v for k, v in given.items() if k not in LAB_KEYS}
    if settings is None and name not in ("direct", "haproxy", *PEP_SETTINGS):
        raise ValueError(f"unknown system {name}")
    kind = lab_keys.get("SYSTEM", name if settings is None else "core")
    if pep and kind not in PEP_SETTINGS:
        raise ValueError(f"{name}: PEP settings for {kind}")
    return kind, lab_keys, pep


def _line(x: dict[str, Any]) -> str:
    cpus = " ".join(
        f"cpu{i} idle {c['idle'] + c['iowait']:.0f}% softirq {c['softirq']:.0f}%"
        for i, c in enumerate(x["per_cpu_pct"])
    )
    stages = "\n    ".join(
        f"{s['role']}({s['comm']}) run {s['run_pct']:.0f} wait {s['wait_pct']:.0f} "
        f"sleep {s['sleep_pct']:.0f} ({s['wait_us_per_slice']} us/slice, "
        f"{s['voluntary_per_gb']}+{s['involuntary_per_gb']} sw/GB)"
        + (f" {s['where']}" if s["where"] else "")
        for s in x["stages"]
        if s["role"] != "kernel" or s["run_pct"] >= 5
    )
    wakes = "".join(f"\n    woken {role}: {w}" for role, w in x.get("wakeups_pct", {}).items())
    return (
        f"{x['gbps']:.2f} Gbit/s, {cpus}, {x['machine_switches_per_gb']:.0f} switches/GB, "
        f"machine {x['machine_cpu_s_per_gbit']:.3f} CPU-s/Gbit, unlisted {x['unlisted_pct']}%, "
        f"load {x['load']:.1f}, {x['placement_pct']}\n    {stages}{wakes}"
    )


def _summary(all_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds: the rate, each CPU's idle and softirq shares, and per role the
    busiest thread's shares (the proxy's relay thread is its busiest). Rounds in which work
    outside the stages took more than DISTURBED_PCT of a CPU are left out (kept in the
    samples, counted here), unless every round was."""
    runs = [x for x in all_runs if x["unlisted_pct"] <= DISTURBED_PCT] or all_runs
    busiest: dict[str, list[dict[str, Any]]] = {}
    for x in runs:
        for role in ("sender", "proxy", "receiver"):
            rows = [s for s in x["stages"] if s["role"] == role]
            if rows:
                busiest.setdefault(role, []).append(max(rows, key=lambda s: s["run_pct"]))
    return {
        "rounds_disturbed": sum(x["unlisted_pct"] > DISTURBED_PCT for x in all_runs),
        "gbps": statistics.median(x["gbps"] for x in runs),
        "gbps_samples": [round(x["gbps"], 2) for x in runs],
        "idle_pct": [  # iowait is idle too: the relay's io_uring waits count as iowait
            statistics.median(
                x["per_cpu_pct"][i]["idle"] + x["per_cpu_pct"][i]["iowait"] for x in runs
            )
            for i in range(len(runs[0]["per_cpu_pct"]))
        ],
        "softirq_pct": [
            statistics.median(x["per_cpu_pct"][i]["softirq"] for x in runs)
            for i in range(len(runs[0]["per_cpu_pct"]))
        ],
        "machine_switches_per_gb": statistics.median(x["machine_switches_per_gb"] for x in runs),
        "machine_cpu_s_per_gbit": statistics.median(x["machine_cpu_s_per_gbit"] for x in runs),
        "unlisted_pct": statistics.median(x["unlisted_pct"] for x in runs),
        "busiest_thread": {
            role: {
                k: statistics.median(r[k] for r in rows)
                for k in (
                    "run_pct",
                    "wait_pct",
                    "sleep_pct",
                    "voluntary_per_gb",
                    "involuntary_per_gb",
                )
            }
            for role, rows in busiest.items()
        },
        "placement_pct": {
            k: statistics.median(x["placement_pct"].get(k, 0.0) for x in runs)
            for k in ("stacked", "spread", "all asleep")
        },
        "load": [round(x["load"], 1) for x in runs],
    }


def _system(text: str) -> tuple[str, dict[str, str] | None]:
    """direct | core | pep | NAME:PEP_X=1,PEP_Y=2 (the core with those settings)"""
    name, _, assignments = text.partition(":")
    if not assignments:
        return name, None
    return name, dict(a.split("=", 1) for a in assignments.split(","))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("systems", nargs="*", default=["direct", "core"])
    parser.add_argument("--cases", default="download_1,upload_1", help="DIRECTION_STREAMS,...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="the measured window")
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep"))
    parser.add_argument("--where", action="store_true", help="also sample where threads sleep")
    parser.add_argument("--retries", type=int, default=0, help="a disturbed run again, N times")
    parser.add_argument("--name", default="stages", help="the JSON's name in --out")
    parser.add_argument("--wakeups", action="store_true", help="trace where woken threads go")
    args = parser.parse_args(argv)
    systems = dict(_system(s) for s in args.systems)
    cases = args.cases.split(",")
    results = run(
        systems, cases, args.rounds, args.seconds, args.out, args.where, args.retries, args.name,
        args.wakeups,
    )  # fmt: skip
    for case, by_name in results["summary"].items():
        for name, s in by_name.items():
            print(case, name, json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
