"""``make experiment-pep-fairness``: research 000's ten parallel flows (§3.5, Table 5.11).

Ten downloads from the server to the UE at once, per arm: end to end through a radio FIFO
of one BDP (the research's BFIFO), end to end through FQ-CoDel, and through the PEP with
FQ-CoDel. Per run: each flow's mean goodput over its own transfer (all start together), their mean,
standard deviation and Jain's index (Σx)² / (n Σx²), and the interactive flow beside them
(the step test's ping, 100 B at 20/s: mean and standard deviation of its RTT). Mean ± 95 %
CI over the runs; the published figures beside ours.

**Not the research's channel:** it ran the Witestlab mmWave mobility trace (1–4 Gbit/s,
blockages to 0) at a 101 ms base RTT; this runs the step test's testbed (WAN 100 Mbit/s,
100 ms RTT, radio 10 ms each way) at a fixed radio capacity (default 70 Mbit/s), so it
shows the arms' fairness and delay on a steady bottleneck, not under the trace.

    uv run python -m mts_lab.pep.fairness --out docs/results/pep-fairness [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from mts_lab import traffic
from mts_lab.meld.bed import alternating, mean_ci95
from mts_lab.pep.experiment import INTERACTIVE_PING, PORT_E2E, PORT_PEP, Setup, Testbed, parse_ping
from mts_lab.results import pyplot, save_figure, save_results

START_AFTER_S = 8.0  # ten Python processes come up within this on a loaded host
ARMS = {"e2e-fifo": ("fifo", PORT_E2E), "e2e-fq_codel": ("fq_codel", PORT_E2E),
        "pep-fq_codel": ("fq_codel", PORT_PEP)}  # fmt: skip
# Table 5.11 / 5.12 (mobility trace, 10 flows): per-flow Mbit/s mean ± std, Jain; ping ms
PUBLISHED = {
    "e2e-fifo": {"per_flow_mbps": 90.89, "std_mbps": 33.13, "jain": 0.8827,
                 "ping_mean_ms": 102.37, "ping_std_ms": 6.35},
    "e2e-fq_codel": {"per_flow_mbps": 44.12, "std_mbps": 7.84, "jain": 0.9694,
                     "ping_mean_ms": 101.18, "ping_std_ms": 0.04},
    "pep-fq_codel": {"per_flow_mbps": 289.10, "std_mbps": 1.89, "jain": 1.0000,
                     "ping_mean_ms": 101.18, "ping_std_ms": 0.05},
}  # fmt: skip


def jain(rates: list[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/n when one takes everything."""
    return sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates))


def parallel(bed: Testbed, port: int, flows: int, size: int) -> dict[str, Any]:
    """``flows`` downloads of ``size`` bytes at once, the interactive ping beside them."""
    ue, server = bed.topo.ue(1), bed.topo.server.addresses["wan0"]
    with tempfile.TemporaryFile("w+") as ping_out:
        pinger = bed.topo.popen(ue.ns, *INTERACTIVE_PING, server, stdout=ping_out, text=True)
        # every download starts at the same moment, however slowly the processes come up
        at = time.time() + START_AFTER_S
        fetch = traffic.command("fetch", server, str(port), str(size), "--at", f"{at:.3f}")
        clients = [bed.topo.popen(ue.ns, *fetch, stdout=subprocess.PIPE, text=True)
                   for _ in range(flows)]  # fmt: skip
        try:
            results = []
            for c in clients:
                out, _ = c.communicate(timeout=600)
                first, last = out.splitlines()[0], out.splitlines()[-1]
                results.append({**json.loads(last), **json.loads(first)})
        finally:
            for c in clients:
                with contextlib.suppress(ProcessLookupError):
                    c.kill()
            pinger.send_signal(signal.SIGINT)
            pinger.wait(10)
        ping_out.seek(0)
        pings = parse_ping(ping_out.read())
    if any(r["bytes"] != size for r in results):
        raise RuntimeError(f"a download fell short: {[r['bytes'] for r in results]}")
    # every flow's mean rate over its own transfer (they all start at `at`), as the
    # research's per-flow means; the interactive pings from the start to the last one's end
    rates = [size * 8 / r["fct_s"] / 1e6 for r in results]
    start = min(r["started"] for r in results)
    end = max(r["started"] + r["fct_s"] for r in results)
    rtts = [rtt for t, rtt in pings if start <= t <= end]
    return {
        "flows_mbps": rates,
        "per_flow_mbps": statistics.fmean(rates),
        "std_mbps": statistics.pstdev(rates),
        "jain": jain(rates),
        "aggregate_mbps": sum(rates),
        "span_s": end - start,
        "ping_mean_ms": statistics.fmean(rtts) if rtts else float("nan"),
        "ping_std_ms": statistics.pstdev(rtts) if len(rtts) > 1 else float("nan"),
        "ping_max_ms": max(rtts) if rtts else float("nan"),
        "pings": len(rtts),
    }


def run(setup: Setup, flows: int, out: Path) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pep-fairness-"))
    load_at_start = os.getloadavg()
    raw: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for queue in ("fifo", "fq_codel"):
        arms = [a for a, (q, _) in ARMS.items() if q == queue]
        bed = Testbed(setup, queue, workdir)
        try:
            bed.set_capacity(setup.low_mbps)
            for r, arm in alternating(setup.runs, arms):
                time.sleep(1.0)  # the previous run's queues drain
                d = parallel(bed, ARMS[arm][1], flows, setup.size)
                d["loadavg_1min"] = os.getloadavg()[0]
                raw[arm].append(d)
                print(f"{arm:<13} run {r + 1}/{setup.runs} per flow {d['per_flow_mbps']:6.2f} "
                      f"± {d['std_mbps']:5.2f} Mbit/s Jain {d['jain']:.4f} ping "
                      f"{d['ping_mean_ms']:6.1f} ± {d['ping_std_ms']:5.1f} ms "
                      f"load {d['loadavg_1min']:.1f}", flush=True)  # fmt: skip
        finally:
            bed.close()
    results = {
        "setup": {**setup.__dict__, "flows": flows, "capacity_mbps": setup.low_mbps,
                  "channel": "fixed capacity (not the research's mobility trace)"},
        "summary": {arm: summarize(ds) for arm, ds in raw.items()},
        "published": PUBLISHED,
        "environment": {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "loadavg_at_start": load_at_start, "loadavg_at_end": os.getloadavg()},
        "runs": raw,
    }  # fmt: skip
    save_results(results, out, "fairness", plot, table)
    return results


def summarize(ds: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean ± 95 % CI over the runs of each per-run figure."""
    out: dict[str, Any] = {}
    for key in ("per_flow_mbps", "std_mbps", "jain", "aggregate_mbps", "ping_mean_ms",
                "ping_std_ms", "ping_max_ms"):  # fmt: skip
        mean, ci = mean_ci95([d[key] for d in ds])
        out[key] = {"mean": round(mean, 4), "ci95": round(ci, 4)}
    loads = [d["loadavg_1min"] for d in ds]
    out["loadavg_1min"] = {"min": min(loads), "max": max(loads)}
    return out


def table(results: dict[str, Any]) -> str:
    lines = ["arm            per flow Mbit/s    std Mbit/s       Jain              "
             "ping mean ms       ping std ms    | published per flow, std, Jain, ping"]  # fmt: skip
    for arm, s in results["summary"].items():
        p = PUBLISHED[arm]
        cells = "  ".join(f"{s[k]['mean']:7.3f} ± {s[k]['ci95']:<6.3f}"
                          for k in ("per_flow_mbps", "std_mbps", "jain", "ping_mean_ms",
                                    "ping_std_ms"))  # fmt: skip
        lines.append(f"{arm:<13} {cells} | {p['per_flow_mbps']}, {p['std_mbps']}, {p['jain']}, "
                     f"{p['ping_mean_ms']} / {p['ping_std_ms']}")  # fmt: skip
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    arms = list(results["summary"])
    fig, axes = pyplot().subplots(1, 3, figsize=(15, 4.5))
    for ax, key, label in ((axes[0], "jain", "Jain's index"),
                           (axes[1], "per_flow_mbps", "per-flow goodput, Mbit/s"),
                           (axes[2], "ping_mean_ms", "interactive ping RTT, ms")):  # fmt: skip
        s = results["summary"]
        ours, ci = [s[a][key]["mean"] for a in arms], [s[a][key]["ci95"] for a in arms]
        ax.bar([i - 0.2 for i in range(len(arms))], ours, 0.4, yerr=ci, capsize=4,
               label="ours (95 % CI)")  # fmt: skip
        ax.bar([i + 0.2 for i in range(len(arms))], [PUBLISHED[a][key] for a in arms], 0.4,
               color="#d62728", label="published (mobility trace)")  # fmt: skip
        ax.set_xticks(range(len(arms)), arms)
        ax.set_title(f"{label}, {results['setup']['flows']} flows")
        ax.set_yscale("log" if key == "per_flow_mbps" else "linear")
        ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mts_lab.pep.fairness",
                                     description=__doc__.split("\n\n")[0])  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep-fairness"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--flows", type=int, default=10)
    parser.add_argument("--size-mb", type=float, default=8, help="per flow")
    parser.add_argument("--capacity", type=float, default=70, help="radio Mbit/s")
    args = parser.parse_args(argv)
    setup = Setup(size=int(args.size_mb * 1e6), step_after_s=0.0, low_mbps=args.capacity,
                  high_mbps=args.capacity, wan_delay_ms=50, wan_rate_mbps=100, ran_delay_ms=10,
                  runs=args.runs)  # fmt: skip
    run(setup, args.flows, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
