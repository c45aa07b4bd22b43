"""What one connection costs the PEP, in measures a shared machine does not distort.

    python -m mts_lab.pep.cost MEASURE [NAME=SRC ...] [--rounds N] [--seconds S]

The bench's connection case (``tcpload flows``: connect, 1-byte exchange, close, 16
clients) through a transparent PEP on the bench's topology, per connection:

- ``syscalls``: system calls of the PEP process by name (``strace -c -f``);
- ``cpu``: user and system CPU time of the PEP process (``/proc``), which the machine's
  load does distort (caches, frequency), so the load is recorded with each sample.
- ``profile``: where a proxy's CPU per connection goes, by the system call it was spent
  in (``perf record -g`` on the proxy's processes; each entry point's share of the
  samples including what it called, e.g. the peer namespace's TCP work that veth runs in
  the sender's context, times the proxy's CPU per connection). Variants here are systems:
  ``haproxy``, ``pep``, or ``floor`` with relay-floor's options (``floor:sockmap``,
  ``floor:uring,cpu-affinity``).
- ``bulk``: where the whole machine's CPU per Gbit goes in iperf3 downloads with 1 and 8
  streams (``perf record -a -g``: both CPUs, every process and the softirq work, by kernel
  entry point), through the same systems and ``direct`` (routed, no proxy): what a proxy
  adds per byte, and whether it is user-space work or the kernel's TCP work.

``NAME=SRC`` runs the PEP from the code tree ``SRC`` (a directory holding ``mec_pep``, put
first on ``PYTHONPATH``; e.g. ``git archive <commit> pep/src``), so that code versions are
compared in one run, interleaved; ``NAME`` alone is the installed code. JSON to ``--out``.
The PEP runs its Python relay (``PEP_RELAY_CORE=python``), whose code the trees hold: the
compiled core's system calls go through io_uring, which strace does not count per call.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mts_lab.line import Lab
from mts_lab.pep.bench import (
    LOAD_PEP,
    PEP_SETTINGS,
    TCPLOAD,
    Bench,
    cpu_split,
    cpu_split_all,
    iperf3,
    machine_busy_s,
)

T = TypeVar("T")
MEASURES = ("syscalls", "cpu", "profile", "bulk")
CLIENTS = 16
# Where a proxy's CPU goes, by what it does for a flow: the kernel's entry points for it
# through system calls (epoll relays) and through io_uring's operations (relay-floor-uring).
OPERATIONS = {
    "accept": ("__x64_sys_accept4", "__x64_sys_accept", "io_accept"),
    "connect": ("__x64_sys_connect", "io_connect"),
    "socket set-up": (
        "__x64_sys_socket",
        "__x64_sys_setsockopt",
        "__x64_sys_getsockname",
        "__x64_sys_getsockopt",
        "__x64_sys_ioctl",
        "__x64_sys_bpf",
    ),
    "data": (
        "__x64_sys_splice",
        "__x64_sys_recvfrom",
        "__x64_sys_sendto",
        "ksys_read",  # not __x64_sys_read/_write: see BULK
        "ksys_write",
        "__x64_sys_sendmsg",
        "__x64_sys_recvmsg",
        "io_send",
        "io_recv",
    ),
    "FIN": ("__x64_sys_shutdown", "io_shutdown"),
    "close": ("__x64_sys_close", "io_close"),
    "events": (
        "__x64_sys_epoll_wait",
        "__x64_sys_epoll_pwait",
        "__x64_sys_epoll_ctl",
        "io_cqring_wait",
    ),
    "pipes": ("__x64_sys_pipe2", "__x64_sys_fcntl"),
    "futex": ("__x64_sys_futex",),
}
# Across those (they overlap them): the TCP receive path of either namespace, run in softirq
# in the sender's context (veth); task switches; io_uring's worker threads; all system calls.
ACROSS = {
    "softirq receive path": ("net_rx_action",),
    "task switches": ("__schedule",),
    "io_uring workers": ("io_wq_worker",),
    "system calls": ("entry_SYSCALL_64_after_hwframe",),
}


# Where a Gbit's CPU goes on the whole machine (the bulk measure): kernel entry points and
# functions (shares with children, they overlap), and the samples in user space.
BULK = {
    "splice (the proxy's relaying)": ("__x64_sys_splice",),
    # ksys_write/ksys_read: this kernel's x64_sys_call inlines __x64_sys_write/_read, so
    # calls never show under those names (OPERATIONS' "data" row counts them the same way)
    "send from user space (iperf3, HAProxy)": ("__x64_sys_sendto", "ksys_write"),
    "receive into user space (iperf3, HAProxy)": ("__x64_sys_recvfrom", "ksys_read"),
    "events (epoll)": (
        "__x64_sys_epoll_wait",
        "__x64_sys_epoll_pwait",
        "__x64_sys_select",
        "__x64_sys_pselect6",
    ),
    "futex (GIL)": ("__x64_sys_futex",),
    "softirq receive path": ("net_rx_action",),
    "TCP transmit (tcp_write_xmit)": ("tcp_write_xmit",),
    "copies between user and kernel": (
        "_copy_to_iter",
        "_copy_from_iter",
        "rep_movs_alternative",
    ),
    "task switches": ("__schedule",),
}
IDLE = ("do_idle",)


class CostBench(Bench):
    """The bench's topology with the tcpload servers only, and the PEP from a code tree."""

    def start_servers(self) -> None:
        lab = self.lab
        for port in LOAD_PEP:
            server = [str(TCPLOAD), "serve", f"{lab.server_ip}:{port}"]
            self.servers.append(self._spawn_ready(lab.server_ns, server))

    def run_pep(self, src: str | None) -> int:
        """Start the PEP from the code tree ``src`` (None: the installed code); its pid."""
        self.stop_pep()
        python = PEP_SETTINGS["pep"]
        self.pep = self._start_pep({**python, "PYTHONPATH": src} if src else python)
        self.wait_pep_ready()
        return self.pep.pid  # ip netns exec execs: the PEP's own process


def connections(bench: CostBench, seconds: float) -> dict[str, Any]:
    return _flows(bench, "pep", seconds)


def profile(bench: Bench, system: str, seconds: float, workdir: Path) -> dict[str, Any]:
    """The connections case through ``system`` under ``perf record -g``: the proxy's CPU
    per connection, split by kernel entry point (shares of its samples, with children)."""
    procs = bench.processes(system)
    pids = ",".join(str(p.pid) for p in procs)

    def work() -> tuple[dict[str, Any], tuple[float, float], tuple[float, float]]:
        before = cpu_split_all(procs)
        x = _flows(bench, system, seconds)
        return x, before, cpu_split_all(procs)

    (x, (u0, s0), (u1, s1)), report = _recorded(["-F", "1999", "-p", pids], workdir, work)
    shares = _children_shares(report)
    flows = max(x["flows"], 1)
    cpu_us = (u1 - u0 + s1 - s0) / flows * 1e6
    user_share = shares.pop("[user]", 0.0)
    split = {name: sum(shares.get(sym, 0.0) for sym in syms) / 100 * cpu_us
             for name, syms in (OPERATIONS | ACROSS).items()}  # fmt: skip
    return {"flows": flows, "flows_per_s": x["flows_per_s"], "cpu_us_per_connection": cpu_us,
            "user_us_per_connection": (u1 - u0) / flows * 1e6,
            "user_samples_us_per_connection": user_share / 100 * cpu_us,
            "us_per_connection_by_entry": split}  # fmt: skip


def bulk(bench: Bench, system: str, streams: int, seconds: float, workdir: Path) -> dict[str, Any]:
    """An iperf3 download through ``system`` under ``perf record -a -g``: the machine's busy
    CPU-seconds per Gbit, split by entry point (shares of the busy samples)."""

    def work() -> tuple[dict[str, Any], float]:
        busy_before = machine_busy_s()
        x = iperf3(bench, system, streams, True, seconds)
        return x, machine_busy_s() - busy_before

    (x, busy), report = _recorded(["-a", "-F", "999"], workdir, work)
    shares = _children_shares(report)
    idle = sum(shares.get(sym, 0.0) for sym in IDLE)
    busy_share = max(100.0 - idle, 1e-9)  # shares of the busy samples, not of idle time
    gbit = x["gbps"] * seconds
    per_gbit = busy / gbit
    split = {name: sum(shares.get(sym, 0.0) for sym in syms) / busy_share * per_gbit
             for name, syms in BULK.items()}  # fmt: skip
    return {"gbps": x["gbps"], "machine_cpu_s_per_gbit": per_gbit,
            "proxy_cpu_s_per_gbit": x["cpu_s_per_gbit"] or 0.0,
            "user_cpu_s_per_gbit": shares["[user]"] / busy_share * per_gbit,
            "cpu_s_per_gbit_by_entry": split, "per_cpu_pct": x["per_cpu_pct"]}  # fmt: skip


def run_bulk(systems: list[str], rounds: int, seconds: float, out: Path) -> dict[str, Any]:
    """``bulk`` for systems (``direct``, ``haproxy``, ``pep``, ``floor[:OPTION,...]``) with
    1 and 8 streams, interleaved."""
    lab = Lab.create("pk")
    workdir = Path(tempfile.mkdtemp(prefix="pep-bulk-"))
    bench = Bench(lab, workdir)
    names = [f"{system}/{streams}" for system in systems for streams in (1, 8)]

    def take(name: str) -> dict[str, Any]:
        system, _, streams = name.rpartition("/")
        kind, _, options = system.partition(":")
        if kind == "floor":
            bench.start_floor(tuple(o for o in options.split(",") if o))
        x = bulk(bench, kind, int(streams), seconds, workdir)
        if kind == "floor":
            bench.stop_floor()
            bench.restart_pep(PEP_SETTINGS["pep"])
        return x

    samples = _interleaved(lab, bench, bench.start, names, rounds, take)
    summary = {name: {**_medians(runs), "cpu_s_per_gbit_by_entry": _split_medians(
        runs, "cpu_s_per_gbit_by_entry")} for name, runs in samples.items()}  # fmt: skip
    return _save("bulk", summary, samples, seconds, out)


def _recorded(options: list[str], workdir: Path, work: Callable[[], T]) -> tuple[T, str]:
    """``work()`` under ``perf record -g <options>``; its result and the report (symbols by
    their share of the samples with children; also kept in ``workdir`` for reading)."""
    data = workdir / f"perf-{time.monotonic_ns()}.data"
    recorder = subprocess.Popen(["perf", "record", "-g", *options, "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(1.0)  # attached
    result = work()
    recorder.send_signal(signal.SIGINT)
    recorder.wait(120)
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--children", "--sort", "sym", "--stdio", "-g",
         "none", "--percent-limit", "0.1"], capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    data.unlink()
    data.with_suffix(".txt").write_text(report)
    return result, report


def _children_shares(report: str) -> dict[str, float]:
    """perf report --children --stdio: symbol -> share of samples with children (%);
    ``[user]``: the samples' share in user space (self time of ``[.]`` symbols)."""
    shares: dict[str, float] = {"[user]": 0.0}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) < 4 or not parts[0].endswith("%") or not parts[1].endswith("%"):
            continue
        children, self_, kind, symbol = (
            float(parts[0][:-1]),
            float(parts[1][:-1]),
            parts[2],
            parts[3],
        )
        if kind == "[.]":
            shares["[user]"] += self_
        else:
            shares[symbol] = max(shares.get(symbol, 0.0), children)
    return shares


def _flows(bench: Bench, system: str, seconds: float) -> dict[str, Any]:
    """The connections case through ``system``."""
    targets = ",".join(bench.load_targets(system))
    cmd = (f"{TCPLOAD} flows -targets {targets} -clients {CLIENTS} -request 1 -response 1 "
           f"-seconds {seconds}")  # fmt: skip
    result: dict[str, Any] = json.loads(bench.lab.sh(bench.lab.client_ns, cmd))
    if result["errors"]:
        print(f"  {result['errors']} failed flows ({result['first_error']})", flush=True)
    return result


def run_profiles(systems: list[str], rounds: int, seconds: float, out: Path) -> dict[str, Any]:
    """``profile`` for systems (``haproxy``, ``pep``: the Python relay, ``floor[:OPTION,...]``),
    interleaved."""
    lab = Lab.create("pp")
    workdir = Path(tempfile.mkdtemp(prefix="pep-profile-"))
    bench = Bench(lab, workdir)

    def take(name: str) -> dict[str, Any]:
        kind, _, options = name.partition(":")
        if kind == "floor":
            bench.start_floor(tuple(o for o in options.split(",") if o))
        _flows(bench, kind, 1.0)  # warm-up
        x = profile(bench, kind, seconds, workdir)
        if kind == "floor":
            bench.stop_floor()
            bench.restart_pep({})
        return x

    samples = _interleaved(lab, bench, bench.start, systems, rounds, take)
    summary = {name: {**_medians(runs), "us_per_connection_by_entry": _split_medians(runs)}
               for name, runs in samples.items()}  # fmt: skip
    return _save("profile", summary, samples, seconds, out)


def _interleaved(
    lab: Lab, bench: Bench, start: Callable[[], None], names: list[str], rounds: int,
    take: Callable[[str], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """``take(name)`` for every name, round after round, each with the machine's load;
    then the lab goes down."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    try:
        start()
        for r in range(rounds):
            for name in names:
                x = take(name)
                x["load"] = os.getloadavg()[0]
                samples[name].append(x)
                print(f"round {r + 1}/{rounds} {name}: {_rounded(x)}", flush=True)
    finally:
        bench.stop()
        lab.down()
    return samples


def _rounded(x: dict[str, Any]) -> dict[str, Any]:
    return {k: _rounded(v) if isinstance(v, dict) else round(v, 2)
            for k, v in x.items() if isinstance(v, float | int | dict)}  # fmt: skip


def _save(measure: str, summary: dict[str, Any], samples: dict[str, Any], seconds: float,
          out: Path, **extra: Any) -> dict[str, Any]:  # fmt: skip
    results = {"measure": measure, **extra, "summary": summary, "samples": samples,
               "clients": CLIENTS, "seconds": seconds,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "cpus": os.cpu_count()}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / f"cost-{measure}.json").write_text(json.dumps(results, indent=2) + "\n")
    for name, medians in summary.items():
        print(name, json.dumps(medians))
    return results


def _split_medians(
    runs: list[dict[str, Any]], field: str = "us_per_connection_by_entry"
) -> dict[str, float]:
    return {k: statistics.median(x[field][k] for x in runs) for k in runs[0][field]}


def sample(bench: CostBench, measure: str, src: str | None, seconds: float,
           workdir: Path) -> dict[str, Any]:  # fmt: skip
    pid = bench.run_pep(src)
    connections(bench, 1.0)  # warm-up
    if measure == "cpu":
        (u0, s0), t0 = cpu_split(bench.pep), time.monotonic()
        x = connections(bench, seconds)
        (u1, s1) = cpu_split(bench.pep)
        flows = max(x["flows"], 1)
        bench.stop_pep()
        return {"flows": flows, "flows_per_s": x["flows_per_s"],
                "user_us_per_connection": (u1 - u0) / flows * 1e6,
                "sys_us_per_connection": (s1 - s0) / flows * 1e6,
                "wall_s": time.monotonic() - t0}  # fmt: skip
    out = workdir / f"strace-{time.monotonic_ns()}.txt"
    tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(out)],
                              stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(1.0)  # attached to every thread
    x = connections(bench, seconds)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(60)
    bench.stop_pep()
    flows = max(x["flows"], 1)
    calls = _strace_calls(out)
    return {"flows": flows, "syscalls_per_connection": sum(calls.values()) / flows,
            "by_call": {k: round(v / flows, 2) for k, v in calls.items()}}  # fmt: skip


def _strace_calls(path: Path) -> dict[str, int]:
    """strace -c: calls by system call, most first."""
    calls = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            calls[parts[-1]] = int(parts[3])
    return dict(sorted(calls.items(), key=lambda kv: -kv[1]))


def run(measure: str, variants: dict[str, str | None], rounds: int, seconds: float,
        out: Path) -> dict[str, Any]:  # fmt: skip
    lab = Lab.create("pc")
    workdir = Path(tempfile.mkdtemp(prefix="pep-cost-"))
    bench = CostBench(lab, workdir)

    def take(name: str) -> dict[str, Any]:
        return sample(bench, measure, variants[name], seconds, workdir)

    samples = _interleaved(lab, bench, bench.start_servers, list(variants), rounds, take)
    summary = {name: _medians(runs) for name, runs in samples.items()}
    return _save(measure, summary, samples, seconds, out, variants=variants)


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k, v in runs[0].items() if isinstance(v, float | int)]
    medians: dict[str, Any] = {k: statistics.median(x[k] for x in runs) for k in keys}
    if "by_call" in runs[0]:
        names = {n for x in runs for n in x["by_call"]}
        medians["by_call"] = dict(sorted(
            ((n, statistics.median(x["by_call"].get(n, 0.0) for x in runs)) for n in names),
            key=lambda kv: -kv[1]))  # fmt: skip
    return medians


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.cost",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("measure", choices=MEASURES)
    parser.add_argument("variants", nargs="*", default=["installed"], help="NAME or NAME=SRC")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep"))
    args = parser.parse_args(argv)
    if args.measure in ("profile", "bulk"):
        runner = run_profiles if args.measure == "profile" else run_bulk
        runner(args.variants, args.rounds, args.seconds, args.out)
        return 0
    variants = {name: (src or None) for name, _, src in (v.partition("=") for v in args.variants)}
    run(args.measure, variants, args.rounds, args.seconds, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
