"""``make experiment-pep-mmwave``: research 000's 5G-trace runs (§3.3) and its socket-buffer
sweep (§3.4), on the emulated RAN at 1/40 of the traces' rates.

**The trace.** Witestlab's 60 GHz "mobility + blockage" capacity trace (rows ``Mbit/s,
seconds``, replayed by the research with ``tc class change ... htb rate``), converted by
``convert`` into an emulator CQI/TBS trace (``time_s,cqi,capacity_mbps``: the capacity is
what the cell carries from that time on; the CQI the highest whose LTE TBS on 100 PRBs
fits in it, 0 in a blockage) at 1/``SCALE`` of the rate:
``../shared/fixtures/traces/witestlab-mobb-1of40.csv`` (a data file derived from another
project's repository: kept beside the repository, never committed to it; ``convert`` makes
it again from the published rows). The emulator replays it per TTI
(channel model ``trace``) and the experiment restarts it (``restart_trace``) when each
download starts, so every run sees the trace from its first row.

**Scaled, not shrunk in time.** The emulator forwards 1.3–2.2 Gbit/s on this host, below
the traces' 1–4 Gbit/s, so every rate and buffer is divided by ``SCALE`` and every delay
kept: the bottleneck trace (mean 2,961 → 74 Mbit/s), the sender's link (10 Gbit/s → 250
Mbit/s), the BDP BFIFO (37,875,000 → 946,875 B) and the PEP's socket buffers; the base RTT
stays 101 ms (100 ms WAN, 1 ms radio). Queueing times, windows in RTTs and the buffer's
reach in seconds of trace are those of the research.

**Arms** (Table 5.10, mobility): E2E through FQ-CoDel on the radio, E2E through a BFIFO of
one BDP, the PEP (transparent split, CUBIC on both legs) with FQ-CoDel and the research's
128 MB buffers. **The sweep** (Fig. 5.29): the PEP at a list of the research's buffer sizes.
A size is the kernel's effective buffer, as the research's "128 MB" is its module's forced
64 MiB doubled by the kernel: the PEP is given half of size/SCALE per socket (all four).
Throughput is measured at the receiver over the run (the research's mobility PEP figure
exceeded the trace's mean, likely counted at the sender: 000 §3.6 caveat 2) and compared
as a share of the trace's mean capacity over the same seconds, a figure the scale does not
change. The interactive ping (100 B at 20/s) runs beside each download.

    uv run python -m mts_lab.pep.mmwave arms  --out docs/results/pep-mmwave [--runs 5] [--seconds S]
    uv run python -m mts_lab.pep.mmwave sweep --out docs/results/pep-mmwave [--buffers-mb 15,30,...]
    uv run python -m mts_lab.pep.mmwave convert SRC.csv DST.csv [--scale 40]
"""

from __future__ import annotations

import argparse
import csv
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
from mts_lab.pep.experiment import (
    INTERACTIVE_PING,
    PORT_E2E,
    PORT_PEP,
    Setup,
    Testbed,
    parse_ping,
    scenario,
)
from mts_lab.results import pyplot, save_figure, save_results

SCALE = 40
REPO = Path(__file__).resolve().parents[5]
TRACE = REPO.parent / "shared" / "fixtures" / "traces" / "witestlab-mobb-1of40.csv"
WAN_ONE_WAY_MS, RAN_ONE_WAY_MS = 50.0, 0.5  # the research's 100 ms + 1 ms, split per direction
SENDER_LINK_MBPS = 10_000 / SCALE
BDP_BYTES = int(3e9 / SCALE * 0.101 / 8)  # the research's BFIFO: 3 Gbit/s x 101 ms
RESEARCH_PEP_MB = 128
ARMS = {
    "e2e-fq_codel": ("fq_codel", PORT_E2E),
    "e2e-bfifo": ("fifo", PORT_E2E),
    "pep-fq_codel": ("fq_codel", PORT_PEP),
}
SIZE = 1 << 40  # a download the time limit ends
PAUSE_S = 2.0  # between runs: the previous run's queues drain

# Table 5.10 (mobility + blockage, 10 runs x 120 s, mean ± std, Mbit/s); trace mean 2962.61
PUBLISHED_TRACE_MEAN_MBPS = 2962.61
PUBLISHED_ARMS = {
    "e2e-fq_codel": (1074.42, 96.78),
    "e2e-bfifo": (2287.75, 283.13),
    "pep-fq_codel": (2992.35, 10.07),
}
# Fig. 5.29, the PEP's throughput per buffer size (Mbit/s, mean of 10 runs), read off the
# figure (about ±25 Mbit/s; no table in the thesis): the plateau from 89 MB (step 7)
PUBLISHED_SWEEP_MBPS = {
    15: 800,
    30: 1365,
    44: 1925,
    64: 2405,
    74: 2755,
    89: 2995,
    104: 2995,
    119: 3005,
    128: 3000,
}


# ---- the trace ---------------------------------------------------------------------------------


def cqi_for(capacity_mbps: float, prb: int = 100) -> int:
    """The highest CQI whose LTE TBS on ``prb`` PRBs (1 ms TTI) is within the capacity; 0 in
    a blockage (nothing carried), 1 when even CQI 1 is above it."""
    from mec_common.tables import CQI_MAX, lte_tbs_bytes_for_cqi

    if capacity_mbps <= 0:
        return 0
    fits = [
        c for c in range(1, CQI_MAX + 1) if lte_tbs_bytes_for_cqi(c, prb) * 8 / 1e3 <= capacity_mbps
    ]
    return max(fits, default=1)


def convert(rows: list[tuple[float, float]], scale: float) -> list[tuple[float, int, float]]:
    """Witestlab rows (Mbit/s, seconds it lasts) -> emulator rows (start s, CQI, Mbit/s)."""
    out, t = [], 0.0
    for mbps, lasts_s in rows:
        capacity = round(mbps / scale, 3)
        out.append((round(t, 3), cqi_for(capacity), capacity))
        t += lasts_s
    out.append((round(t, 3), out[-1][1], out[-1][2]))  # the end of the last row
    return out


def read_witestlab(path: Path) -> list[tuple[float, float]]:
    with path.open() as f:
        return [(float(r[0]), float(r[1])) for r in csv.reader(f) if r]


def write_trace(
    rows: list[tuple[float, int, float]], path: Path, source: str, scale: float
) -> None:
    with path.open("w") as f:
        f.write(
            f"# {source}, rates / {scale:g}: time_s,cqi,capacity_mbps "
            "(python -m mts_lab.pep.mmwave convert)\n"
        )
        f.writelines(f"{t},{c},{m}\n" for t, c, m in rows)


def read_trace(path: Path = TRACE) -> list[tuple[float, int, float]]:
    from mts_testbed.scenario import read_trace as read

    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no trace; make it with `python -m mts_lab.pep.mmwave convert "
            "mobb-tput.csv <it>` from Witestlab's mobility trace (rows Mbit/s,seconds)"
        )
    rows = read(path)
    if any(len(r) != 3 for r in rows):
        raise ValueError(f"{path}: want time_s,cqi,capacity_mbps rows")
    return [(r[0], r[1], r[2]) for r in rows]  # type: ignore[misc]


def trace_mean_mbps(rows: list[tuple[float, int, float]], seconds: float) -> float:
    """The trace's time-weighted mean capacity over its first ``seconds``."""
    total = 0.0
    for (t, _, mbps), (t_next, _, _) in zip(rows, [*rows[1:], (float("inf"), 0, 0.0)], strict=True):
        total += mbps * max(0.0, min(t_next, seconds) - min(t, seconds))
    return total / seconds


# ---- the runs ----------------------------------------------------------------------------------


def scenario_setup() -> Setup:
    return Setup(
        size=SIZE,
        step_after_s=0.0,
        low_mbps=0.0,
        high_mbps=0.0,
        wan_delay_ms=WAN_ONE_WAY_MS,
        wan_rate_mbps=SENDER_LINK_MBPS,
        ran_delay_ms=RAN_ONE_WAY_MS,
        runs=1,
    )


class TraceBed(Testbed):
    """The step test's bed (server, PEP, one UE) with the radio replaying a trace."""

    def __init__(self, queue: str, workdir: Path, trace: Path = TRACE) -> None:
        setup = scenario_setup()
        channel = f"{{model: trace, trace_file: {trace}}}"
        super().__init__(setup, queue, workdir, scenario(setup, queue, BDP_BYTES, channel))

    def set_pep_buffer(self, effective_bytes: int) -> None:
        """Every PEP socket buffer of new flows: the kernel doubles what it is given."""
        half = effective_bytes // 2
        body = json.dumps(
            {k: half for k in ("ran_rcvbuf", "ran_sndbuf", "wan_rcvbuf", "wan_sndbuf")}
        )
        patch = (
            "curl",
            "-sf",
            "-X",
            "PATCH",
            "-H",
            "Authorization: Bearer experiment",
            "-H",
            "Content-Type: application/json",
            "-d",
            body,
            "http://127.0.0.1:8102/pep/v1/config",
        )
        deadline = time.monotonic() + 120  # the API comes up after the data path
        while (out := self.topo.exec(self.topo.mec.ns, *patch, check=False)).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the PEP's API did not answer: {out.stderr}")
            time.sleep(0.5)
        if json.loads(out.stdout)["wan_rcvbuf"] != half:
            raise RuntimeError(f"the PEP did not take the buffers: {out.stdout}")

    def timed_download(self, port: int, seconds: float) -> dict[str, Any]:
        """One download of ``seconds`` with the trace restarted at its start: bytes at the
        receiver, the timeline, the interactive pings."""
        ue, server = self.topo.ue(1), self.topo.server.addresses["wan0"]
        time.sleep(PAUSE_S)
        with tempfile.TemporaryFile("w+") as ping_out:
            pinger = self.topo.popen(ue.ns, *INTERACTIVE_PING, server, stdout=ping_out, text=True)
            client = self.topo.popen(
                ue.ns,
                *traffic.command("fetch", server, str(port), str(SIZE), "--for", str(seconds)),
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert client.stdout is not None
                started = json.loads(client.stdout.readline())["started"]
                self.change_channel({"restart_trace": True})  # the trace starts with it
                out, _ = client.communicate(timeout=seconds + 120)
            finally:
                pinger.send_signal(signal.SIGINT)
                pinger.wait(10)
                if client.poll() is None:
                    client.kill()
            ping_out.seek(0)
            pings = [
                (t - started, rtt)
                for t, rtt in parse_ping(ping_out.read())
                if started <= t <= started + seconds
            ]
        if client.returncode != 0:
            raise RuntimeError(f"download failed on port {port}")
        result = json.loads(out)
        rtts = [rtt for _, rtt in pings]
        return {
            "mbps": result["bytes"] * 8 / seconds / 1e6,
            "bytes": result["bytes"],
            "timeline": result["timeline"],
            "ping_mean_ms": statistics.fmean(rtts) if rtts else float("nan"),
            "ping_p99_ms": _percentile(rtts, 99),
            "ping_max_ms": max(rtts, default=float("nan")),
            "pings": len(rtts),
            "loadavg_1min": os.getloadavg()[0],
        }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q / 100))]


def effective_buffer(research_mb: float) -> int:
    """The research's buffer size (MB, the kernel's effective size) at our scale, bytes."""
    return int(research_mb * 1e6 / SCALE)


def run_arms(runs: int, seconds: float, out: Path, trace: Path = TRACE) -> dict[str, Any]:
    """Table 5.10's arms, ``runs`` each, alternating within each radio queue's bed."""
    workdir = Path(tempfile.mkdtemp(prefix="pep-mmwave-"))
    raw: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    load_at_start = os.getloadavg()
    for queue in ("fifo", "fq_codel"):
        arms = [a for a, (q, _) in ARMS.items() if q == queue]
        bed = TraceBed(queue, workdir, trace)
        try:
            bed.set_pep_buffer(effective_buffer(RESEARCH_PEP_MB))
            for r, arm in alternating(runs, arms):
                raw[arm].append(d := bed.timed_download(ARMS[arm][1], seconds))
                _print_run(arm, r, runs, d)
        finally:
            bed.close()
    results = _results(raw, seconds, trace, load_at_start)
    results["published"] = {
        arm: {"mbps": m, "std": sd, "share": m / PUBLISHED_TRACE_MEAN_MBPS}
        for arm, (m, sd) in PUBLISHED_ARMS.items()
    }
    save_results(results, out, "mmwave", plot_arms, table)
    return results


def run_sweep(
    runs: int, seconds: float, buffers_mb: list[float], out: Path, trace: Path = TRACE
) -> dict[str, Any]:
    """Fig. 5.29: the PEP at each buffer size, the sizes alternating run by run."""
    workdir = Path(tempfile.mkdtemp(prefix="pep-mmwave-sweep-"))
    arms = [f"pep-{mb:g}MB" for mb in buffers_mb]
    raw: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    load_at_start = os.getloadavg()
    bed = TraceBed("fq_codel", workdir, trace)
    try:
        for r, arm in alternating(runs, arms):
            mb = buffers_mb[arms.index(arm)]
            bed.set_pep_buffer(effective_buffer(mb))
            raw[arm].append(d := bed.timed_download(PORT_PEP, seconds))
            _print_run(arm, r, runs, d)
    finally:
        bed.close()
    results = _results(raw, seconds, trace, load_at_start)
    results["buffers"] = {
        arm: {
            "research_mb": mb,
            "effective_bytes": effective_buffer(mb),
            "published_mbps": PUBLISHED_SWEEP_MBPS.get(int(mb)),
        }
        for arm, mb in zip(arms, buffers_mb, strict=True)
    }
    arms_file = out / "mmwave.json"  # the E2E arms' shares, the figure's lines
    if arms_file.is_file():
        results["arms"] = json.loads(arms_file.read_text())["summary"]
    save_results(results, out, "sweep", plot_sweep, table)
    return results


def _print_run(arm: str, r: int, runs: int, d: dict[str, Any]) -> None:
    print(
        f"{arm:<13} run {r + 1}/{runs} {d['mbps']:7.2f} Mbit/s ping {d['ping_mean_ms']:6.1f} "
        f"ms (p99 {d['ping_p99_ms']:6.1f}) load {d['loadavg_1min']:.1f}",
        flush=True,
    )


def _results(
    raw: dict[str, list[dict[str, Any]]],
    seconds: float,
    trace: Path,
    load_at_start: tuple[float, float, float],
) -> dict[str, Any]:
    mean = trace_mean_mbps(read_trace(trace), seconds)
    return {
        "setup": {
            "trace": str(trace.relative_to(REPO) if trace.is_relative_to(REPO) else trace),
            "scale": SCALE,
            "seconds": seconds,
            "trace_mean_mbps": mean,
            "base_rtt_ms": 2 * (WAN_ONE_WAY_MS + RAN_ONE_WAY_MS),
            "sender_link_mbps": SENDER_LINK_MBPS,
            "bfifo_bytes": BDP_BYTES,
            "pep_buffer_bytes": effective_buffer(RESEARCH_PEP_MB),
            "congestion_control": "cubic (server and both PEP legs)",
        },
        "summary": {arm: summarize(ds, mean) for arm, ds in raw.items()},
        "environment": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "loadavg_at_start": load_at_start,
            "loadavg_at_end": os.getloadavg(),
        },
        "runs": raw,
    }


def summarize(ds: list[dict[str, Any]], trace_mean: float) -> dict[str, Any]:
    """Mean ± 95 % CI over the runs; ``share``: of the trace's mean capacity."""
    out: dict[str, Any] = {}
    for key in ("mbps", "ping_mean_ms", "ping_p99_ms"):
        m, ci = mean_ci95([d[key] for d in ds])
        out[key] = {"mean": round(m, 3), "ci95": round(ci, 3)}
    m, ci = mean_ci95([d["mbps"] / trace_mean for d in ds])
    out["share"] = {"mean": round(m, 4), "ci95": round(ci, 4)}
    out["runs"] = len(ds)
    loads = [d["loadavg_1min"] for d in ds]
    out["loadavg_1min"] = {"min": min(loads), "max": max(loads)}
    return out


def table(results: dict[str, Any]) -> str:
    lines = [
        f"trace mean over {results['setup']['seconds']:g} s: "
        f"{results['setup']['trace_mean_mbps']:.2f} Mbit/s",
        "arm             Mbit/s             share of trace     ping mean ms      ping p99 ms",
    ]
    for arm, s in results["summary"].items():
        lines.append(
            f"{arm:<15} "
            + "  ".join(
                f"{s[k]['mean']:7.3f} ± {s[k]['ci95']:<7.3f}"
                for k in ("mbps", "share", "ping_mean_ms", "ping_p99_ms")
            )
        )
    return "\n".join(lines)


def _timeline_mbps(
    timeline: list[list[float]], bin_s: float = 1.0
) -> tuple[list[float], list[float]]:
    """A receiver's (s, bytes) samples -> its rate per ``bin_s`` bin."""
    ts, rates, edge, last = [], [], bin_s, (0.0, 0.0)
    for t, n in timeline:
        if t >= edge:
            ts.append(edge - bin_s / 2)
            rates.append((n - last[1]) * 8 / (t - last[0]) / 1e6)
            last, edge = (t, n), edge + bin_s
    return ts, rates


def _trace_steps(results: dict[str, Any]) -> tuple[list[float], list[float]]:
    rows = read_trace(REPO / results["setup"]["trace"])
    return [r[0] for r in rows], [r[2] for r in rows]


def plot_arms(results: dict[str, Any], path: Path) -> None:
    fig, (ax, bars) = pyplot().subplots(1, 2, figsize=(15, 4.8), width_ratios=(2, 1))
    t, mbps = _trace_steps(results)
    ax.step(t, mbps, where="post", color="0.6", label=f"trace / {SCALE}")
    for arm, runs in results["runs"].items():
        ax.plot(*_timeline_mbps(runs[0]["timeline"]), label=f"{arm}, run 1 (receiver)")
    ax.set_xlim(0, results["setup"]["seconds"])
    ax.set(xlabel="s", ylabel="Mbit/s", title="mobility + blockage trace, run 1")
    ax.legend(fontsize=8)
    arms = list(results["summary"])
    s, p = results["summary"], results["published"]
    bars.bar(
        [i - 0.2 for i in range(len(arms))],
        [100 * s[a]["share"]["mean"] for a in arms],
        0.4,
        yerr=[100 * s[a]["share"]["ci95"] for a in arms],
        capsize=4,
        label="ours (95 % CI)",
    )
    bars.bar(
        [i + 0.2 for i in range(len(arms))],
        [100 * p[a]["share"] for a in arms],
        0.4,
        color="#d62728",
        label="published (Table 5.10, 120 s)",
    )
    bars.set_xticks(range(len(arms)), arms)
    bars.set(ylabel="% of the trace's mean capacity", title="throughput at the receiver")
    bars.legend(fontsize=8)
    save_figure(fig, path)


def sweep_points(results: dict[str, Any]) -> list[tuple[str, dict[str, Any], float | None]]:
    """(x label, our share summary, published share) per buffer size; the arms run's PEP
    (the research's 128 MB, same bed and setup) closes the row when the sweep left it out."""
    points = []
    for arm, b in results["buffers"].items():
        published = b["published_mbps"]
        points.append(
            (
                f"{b['research_mb']:g} MB\n({b['effective_bytes'] / 1e6:.2f} MB here)",
                results["summary"][arm]["share"],
                published / PUBLISHED_TRACE_MEAN_MBPS if published else None,
            )
        )
    sizes = [b["research_mb"] for b in results["buffers"].values()]
    if RESEARCH_PEP_MB not in sizes and "pep-fq_codel" in results.get("arms", {}):
        points.append(
            (
                f"{RESEARCH_PEP_MB} MB\n(arms run)",
                results["arms"]["pep-fq_codel"]["share"],
                PUBLISHED_SWEEP_MBPS[RESEARCH_PEP_MB] / PUBLISHED_TRACE_MEAN_MBPS,
            )
        )
    return points


def plot_sweep(results: dict[str, Any], path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(10, 5))
    points = sweep_points(results)
    x = range(len(points))
    ax.bar(
        [i - 0.2 for i in x],
        [100 * p[1]["mean"] for p in points],
        0.4,
        yerr=[100 * p[1]["ci95"] for p in points],
        capsize=4,
        label="ours (95 % CI)",
    )
    ax.bar(
        [i + 0.2 for i, p in zip(x, points, strict=True) if p[2]],
        [100 * p[2] for p in points if p[2]],
        0.4,
        color="#d62728",
        label="published (Fig. 5.29, read off the figure)",
    )
    for arm, color in (("e2e-fq_codel", "#2ca02c"), ("e2e-bfifo", "#9467bd")):
        if arm in results.get("arms", {}):
            ax.axhline(
                100 * results["arms"][arm]["share"]["mean"],
                color=color,
                ls="--",
                label=f"ours {arm}",
            )
        ax.axhline(
            100 * PUBLISHED_ARMS[arm][0] / PUBLISHED_TRACE_MEAN_MBPS,
            color=color,
            ls=":",
            label=f"published {arm}",
        )
    ax.set_xticks(list(x), [p[0] for p in points])
    ax.set(
        ylabel="% of the trace's mean capacity",
        title=f"PEP throughput vs socket buffer (research size; ours at 1/{SCALE}), "
        f"{results['setup']['seconds']:g} s runs",
    )
    ax.legend(fontsize=8, loc="lower right")
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.mmwave", description=__doc__.split("\n\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("arms", "sweep"):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, default=Path("docs/results/pep-mmwave"))
        p.add_argument("--runs", type=int, default=5)
        p.add_argument(
            "--seconds",
            type=float,
            default=30.0,
            help="per run, from the trace's start (the whole trace: 110.6)",
        )
        p.add_argument("--trace", type=Path, default=TRACE)
        if name == "sweep":
            p.add_argument(
                "--buffers-mb",
                default="15,30,64,89,128",
                help="the research's sizes (MB, effective), comma-separated",
            )
    c = sub.add_parser("convert", help="a Witestlab trace (Mbit/s,seconds) -> an emulator trace")
    c.add_argument("src", type=Path)
    c.add_argument("dst", type=Path)
    c.add_argument("--scale", type=float, default=SCALE)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        write_trace(
            convert(read_witestlab(args.src), args.scale),
            args.dst,
            f"Witestlab 60 GHz trace {args.src.name}",
            args.scale,
        )
    elif args.cmd == "arms":
        run_arms(args.runs, args.seconds, args.out, args.trace)
    else:
        sizes = [float(x) for x in args.buffers_mb.split(",")]
        run_sweep(args.runs, args.seconds, sizes, args.out, args.trace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
