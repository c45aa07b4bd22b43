"""``make experiment-meld``: MELD on the emulated RAN, the thesis's Table 4.1 setup.

LTE FDD 5 MHz / 25 PRB, one UE, RLC UM 1 MB, 8 HARQ processes with up to 4
retransmissions, ~15 Mbit/s, end-to-end RTT ~55 ms, ~0.8 % residual random loss
(``testbed/configs/lte-25prb-meld.yaml``). The UE downloads SIZE bytes from the server
through the PEP (transparent split); the PEP's RAN leg runs ``meld_reno`` or ``meld_cubic``
in mode off (plain Reno/CUBIC), MELD-DE or MELD-ME, switched through the PEP's API. The
radio state reaches the kernel through the real chain: emulator → rnis-adapter (8 ms polls)
→ RabbitMQ → the PEP's consumer → BPF map. Modes alternate within each run so that load
drift on the machine hits all of them alike.

Measured per download: goodput at the UE, ping RTT UE↔server meanwhile (10 Hz), the
kernel's loss verdicts (counter deltas), the age of the radio state the PEP holds (5 Hz).
Output: ``meld.json``, ``meld.png``, and a table. Published (thesis, picoquic on OAI):
MELD-ME +80 % (NewReno) / +8 % (Cubic); MELD-DE +131 % / +9 % with higher RTT.

    uv run python -m mts_lab.meld.experiment --out docs/results/meld [--runs 10]
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any

from mts_lab import REPO
from mts_lab.meld.bed import (
    BedConfig,
    RanAwareBed,
    alternating,
    environment,
    figure_per_cca,
    mean_ci95,
    modes_main,
    percentile,
    running_bed,
)
from mts_lab.results import save_figure, save_results

SCENARIO = REPO / "testbed/configs/lte-25prb-meld.yaml"
PORT = 5001
MODES = ("off", "meld-de", "meld-me")
MODE_COLORS = {"off": "#888888", "meld-de": "#d62728", "meld-me": "#1f77b4",
               "meld-overflow": "#2ca02c", "ignore-loss": "#9467bd"}  # fmt: skip
PUBLISHED_GAIN = {  # % goodput over the legacy CCA (digest §3.4)
    ("reno", "meld-de"): 131, ("reno", "meld-me"): 80,
    ("cubic", "meld-de"): 9, ("cubic", "meld-me"): 8,
}  # fmt: skip


def one_download(bed: RanAwareBed, mode: str, size: int) -> dict[str, Any]:
    bed.set_mode(mode)
    time.sleep(1.0)  # the previous run's queue drains
    before = bed.ue_state()["counters"]
    with bed.ping() as pings, bed.radio_ages() as ages:
        result = bed.result(bed.fetch(PORT, size))
    after = bed.ue_state()["counters"]
    if result["bytes"] != size:
        raise RuntimeError(f"got {result['bytes']} of {size} bytes")
    return {
        "mode": mode,
        "fct_s": result["fct_s"],
        "goodput_mbps": size * 8 / result["fct_s"] / 1e6,
        "ping": pings,
        "verdicts": {k: after[k] - before[k] for k in after},
        "radio_age_ms": ages,
    }


def run(ccas: list[str], modes: list[str], runs: int, size: int, out: Path,
        scenario: Path = SCENARIO,
        pep_env: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """``pep_env``: PEP settings of the run (e.g. its relay, PEP_RELAY_CORE)."""
    workdir = Path(tempfile.mkdtemp(prefix="meld-"))
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for cca in ccas:
        config = BedConfig(scenario, servers={PORT: cca}, intercepted=[PORT], ran_cca=cca,
                           pep_env=pep_env or {})  # fmt: skip
        raw[cca] = {m: [] for m in modes}
        with running_bed(config, workdir) as bed:
            for r, mode in alternating(runs, modes):
                d = one_download(bed, mode, size)
                raw[cca][mode].append(d)
                print(f"{cca:<6} run {r + 1}/{runs} {mode:<8} {d['goodput_mbps']:6.2f} Mbit/s "
                      f"RTT p90 {percentile([p[1] for p in d['ping']], 90):6.1f} ms "
                      f"{d['verdicts']}", flush=True)  # fmt: skip
    results = {
        "setup": {"scenario": str(scenario.relative_to(REPO)), "size_bytes": size, "runs": runs,
                  "ccas": ccas, "modes": modes, "rnis_poll": "8ms",
                  "stale_ms": 50, "rtt": "ping UE->server, 10 Hz, during each download"},
        "summary": {cca: summarize(raw[cca]) for cca in ccas},
        "published_gain_percent": {f"{c}/{m}": g for (c, m), g in PUBLISHED_GAIN.items()},
        "environment": environment(),
        "runs": raw,
    }  # fmt: skip
    save_results(results, out, "meld", plot, table)
    return results


def summarize(by_mode: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for mode, ds in by_mode.items():
        mean, ci = mean_ci95([d["goodput_mbps"] for d in ds])
        rtts = [p[1] for d in ds for p in d["ping"]]
        ages = [a for d in ds for a in d["radio_age_ms"]]
        verdicts = {k: sum(d["verdicts"][k] for d in ds) for k in ds[0]["verdicts"]}
        summary[mode] = {
            "goodput_mbps_mean": round(mean, 3), "goodput_mbps_ci95": round(ci, 3),
            "goodput_mbps": [round(d["goodput_mbps"], 3) for d in ds],
            "rtt_ms_p50": percentile(rtts, 50), "rtt_ms_p90": percentile(rtts, 90),
            "verdicts": verdicts,
            "radio_age_ms_p50": percentile(ages, 50), "radio_age_ms_p99": percentile(ages, 99),
        }  # fmt: skip
        p90 = mean_ci95([percentile([p[1] for p in d["ping"]], 90) for d in ds])
        summary[mode]["rtt_ms_p90_per_run"] = {"mean": round(p90[0], 1), "ci95": round(p90[1], 1)}
    if "off" in summary:
        base = summary["off"]["goodput_mbps_mean"]
        for mode in summary:
            summary[mode]["gain_percent"] = round(
                (summary[mode]["goodput_mbps_mean"] - base) / base * 100, 1
            )
            # Paired per run: the modes alternate within each run, so run i of a mode and
            # run i of "off" shared the machine's load.
            gains = [(d["goodput_mbps"] / o["goodput_mbps"] - 1) * 100
                     for d, o in zip(by_mode[mode], by_mode["off"], strict=True)]  # fmt: skip
            mean, ci = mean_ci95(gains)
            summary[mode]["gain_percent_per_run"] = {"mean": round(mean, 1), "ci95": round(ci, 1)}
    return summary


def table(results: dict[str, Any]) -> str:
    lines = ["CCA    mode      goodput Mbit/s (95% CI)  gain    per-run gain    published  "
             "RTT p50/p90 ms  p90 per run    losses notified/suppressed/stale"]  # fmt: skip
    for cca, summary in results["summary"].items():
        for mode, s in summary.items():
            pub = PUBLISHED_GAIN.get((cca, mode))
            v = s["verdicts"]
            published = "" if pub is None else f"+{pub} %"
            goodput = f"{s['goodput_mbps_mean']:>7.2f} ± {s['goodput_mbps_ci95']:<5.2f}"
            paired = s.get("gain_percent_per_run", {"mean": 0.0, "ci95": 0.0})
            p90 = s["rtt_ms_p90_per_run"]
            lines.append(
                f"{cca:<6} {mode:<8} {goodput}        {s.get('gain_percent', 0):>+6.1f} % "
                f"{paired['mean']:>+6.1f} ± {paired['ci95']:<5.1f}  "
                f"{published:>9}  {s['rtt_ms_p50']:>6.1f} / {s['rtt_ms_p90']:<6.1f}  "
                f"{p90['mean']:>5.1f} ± {p90['ci95']:<5.1f}  "
                f"{v['losses']:>5} {v['notified']}/{v['suppressed']}/{v['stale']}"
            )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    modes = results["setup"]["modes"]
    colors = MODE_COLORS
    fig, rows = figure_per_cca(results, 3, (16, 4.2))
    for row, cca, s in rows:
        ax = row[0]
        ax.bar(modes, [s[m]["goodput_mbps_mean"] for m in modes],
               yerr=[s[m]["goodput_mbps_ci95"] for m in modes], capsize=6,
               color=[colors[m] for m in modes])  # fmt: skip
        ax.set_ylabel("goodput, Mbit/s (mean, 95 % CI)")
        ax.set_title(f"{cca}: {results['setup']['size_bytes'] / 1e6:.0f} MB download via the PEP")
        ax = row[1]
        for m in modes:
            first = results["runs"][cca][m][0]["ping"]
            if first:
                t, rtt = zip(*first, strict=True)
                ax.plot(t, rtt, color=colors[m], label=m, lw=0.8)
        ax.set_xlabel("s since the download started (run 1)")
        ax.set_ylabel("ping RTT UE↔server, ms")
        ax.set_title(f"{cca}: RTT over time")
        ax.legend()
        ax = row[2]
        for m in modes:
            rtts = sorted(p[1] for d in results["runs"][cca][m] for p in d["ping"])
            if rtts:
                ax.plot(rtts, [i / len(rtts) for i in range(len(rtts))], color=colors[m], label=m)
        ax.set_xlabel("ping RTT, ms (all runs)")
        ax.set_ylabel("CDF")
        ax.set_title(f"{cca}: RTT distribution")
        ax.legend()
    save_figure(fig, path)


def main() -> None:
    modes_main(__doc__, run, out=REPO / "docs/results/meld", runs=10, size=20_000_000,
               modes=MODES, resummarize=resummarize)  # fmt: skip


def resummarize(out: Path) -> None:
    """The summary of saved runs again (after the summary gained a figure), runs unchanged."""
    results = json.loads((out / "meld.json").read_text())
    results["summary"] = {cca: summarize(by_mode) for cca, by_mode in results["runs"].items()}
    save_results(results, out, "meld", plot, table)


if __name__ == "__main__":
    main()
