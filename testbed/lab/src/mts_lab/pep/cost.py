"""What one connection costs the PEP, in measures a shared machine does not distort.

    python -m mts_lab.pep.cost MEASURE [NAME=SRC ...] [--rounds N] [--seconds S]

The bench's connection case (``tcpload flows``: connect, 1-byte exchange, close, 16
clients) through a transparent PEP on the bench's topology, per connection:

- ``syscalls``: system calls of the PEP process by name (``strace -c -f``);
- ``cpu``: user and system CPU time of the PEP process (``/proc``), which the machine's
  load does distort (caches, frequency), so the load is recorded with each sample.

``NAME=SRC`` runs the PEP from the code tree ``SRC`` (a directory holding ``mec_pep``, put
first on ``PYTHONPATH``; e.g. ``git archive <commit> pep/src``), so that code versions are
compared in one run, interleaved; ``NAME`` alone is the installed code. JSON to ``--out``.
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
from pathlib import Path
from typing import Any

from mts_lab.line import Lab
from mts_lab.pep.bench import LOAD_PEP, TCPLOAD, Bench, cpu_split

MEASURES = ("syscalls", "cpu")
CLIENTS = 16


class CostBench(Bench):
    """The bench's topology with the tcpload servers only, and the PEP from a code tree."""

    def start_servers(self) -> None:
        lab = self.lab
        for port in LOAD_PEP:
            self._spawn_ready(lab.server_ns, [str(TCPLOAD), "serve", f"{lab.server_ip}:{port}"])

    def run_pep(self, src: str | None) -> int:
        """Start the PEP from the code tree ``src`` (None: the installed code); its pid."""
        self.stop_pep()
        self.pep = self._start_pep({"PYTHONPATH": src} if src else {})
        self.wait_pep_ready()
        return self.pep.pid  # ip netns exec execs: the PEP's own process


def connections(bench: CostBench, seconds: float) -> dict[str, Any]:
    targets = ",".join(bench.load_targets("pep"))
    cmd = (f"{TCPLOAD} flows -targets {targets} -clients {CLIENTS} -request 1 -response 1 "
           f"-seconds {seconds}")  # fmt: skip
    result: dict[str, Any] = json.loads(bench.lab.sh(bench.lab.client_ns, cmd))
    if result["errors"]:
        print(f"  {result['errors']} failed flows ({result['first_error']})", flush=True)
    return result


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
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    try:
        bench.start_servers()
        for r in range(rounds):
            for name, src in variants.items():
                x = sample(bench, measure, src, seconds, workdir)
                x["load"] = os.getloadavg()[0]
                samples[name].append(x)
                shown = {k: round(v, 2) for k, v in x.items() if isinstance(v, float | int)}
                print(f"round {r + 1}/{rounds} {name}: {shown}", flush=True)
    finally:
        bench.stop()
        lab.down()
    summary = {name: _medians(runs) for name, runs in samples.items()}
    results = {"measure": measure, "variants": variants, "summary": summary,
               "samples": samples, "clients": CLIENTS, "seconds": seconds,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "cpus": os.cpu_count()}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"cost-{measure}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    for name, medians in summary.items():
        print(name, json.dumps(medians))
    return results


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
    variants = {name: (src or None) for name, _, src in (v.partition("=") for v in args.variants)}
    run(args.measure, variants, args.rounds, args.seconds, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
