"""``make experiment-meld-discrimination``: MELD's loss decisions against the ground truth.

The scenario (``testbed/configs/lte-25prb-meld-discrimination.yaml``) makes MELD decide:
bursty radio loss whose bursts drop the CQI so that D_TBS falls below S_TB, residual radio
loss at high CQI, and RLC-overflow drops from two downloads sharing a 120 kB RLC buffer,
all in the same run. Per CCA (Reno, CUBIC) and mode (off, MELD-DE, MELD-ME, our
MELD-overflow, and ignore-loss as the upper bound on goodput), the UE
downloads SIZE bytes on each of two ports at once through the PEP (both RAN legs use the
mode). Each loss decision comes from the kernel's decision log (one record per
``ssthresh`` call, with its flow and [snd_una, snd_nxt)); each drop from the emulator's
labelled drop log; ``discrimination.discrimination`` joins them. "Radio" is the positive
class of the issue's goal (MELD keeps cwnd); "congestion" is scored too.

Output: ``discrimination.json`` (per CCA and mode: confusion counts and precision/recall
of both classes over all runs, goodput and per-run RTT p50/p90 as mean ± 95 % CI, drops
by cause, verdicts, each verdict per episode truth, the load average per run),
``discrimination.png`` (goodput vs RTT p90, precision/recall).

    uv run python -m mts_lab.meld.discrimination_experiment --out docs/results/meld [--runs 10]
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import httpx
import yaml

from mec_pep.ran_aware.kernel import DecisionLog
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
from mts_lab.meld.discrimination import (
    Decision,
    Discrimination,
    Scores,
    discrimination,
    episode_truths,
    read_drops,
)
from mts_lab.meld.experiment import MODE_COLORS
from mts_lab.results import save_figure, save_results

SCENARIO = REPO / "testbed/configs/lte-25prb-meld-discrimination.yaml"
MODES = ("off", "meld-de", "meld-me", "meld-overflow", "ignore-loss")
PORTS = (5001, 5002)
PIN_ROOT = "sys/fs/bpf/mts-pep"  # the PEP's default PEP_MELD_PIN_ROOT, without the "/"
# How far back from a decision its drops may lie: the loss is detected about one RTT
# (55 ms, more with a full RLC queue) after the drop; the flow's sequence range does
# the real matching.
WINDOW_NS = 3_000_000_000
Get = Callable[[str], dict[str, Any]]


def emulator_api(bed: RanAwareBed) -> Get:
    emu = bed.topo.emulator

    def get(path: str) -> dict[str, Any]:
        r = httpx.get(emu.url + path, headers={"Authorization": f"Bearer {emu.token}"}, timeout=10)
        r.raise_for_status()
        return dict(r.json())

    return get


def rlc_buffer_bytes(scenario: Path) -> int:
    """The UE's RLC buffer in the scenario: what PEP_MELD_RLC_BUFFER_BYTES is set to in a
    deployment (no RAN reports it)."""
    ue = yaml.safe_load(scenario.read_text())["ues"][0]
    return int(ue["cells"][0]["queue"]["limit_bytes"])


def pep_pin_dir(bed: RanAwareBed) -> Path:
    """The PEP's pins as this process can reach them: ``ip netns exec`` gave the PEP its
    own mount of /sys, hence its own bpffs, which its root (/proc/<pid>/root) shows."""
    return Path(f"/proc/{bed.pep_pid}/root") / PIN_ROOT / bed.name


def span_s(results: list[dict[str, Any]]) -> float:
    """From the first download's start to the last one's end (UE clock), seconds."""
    end = max(float(r["started"]) + float(r["fct_s"]) for r in results)
    return end - min(float(r["started"]) for r in results)


def one_run(bed: RanAwareBed, log: DecisionLog, get: Get, mode: str, size: int,
            trace: bool = False) -> dict[str, Any]:  # fmt: skip
    """One round of a mode; with ``trace``, the RAN legs' windows are sampled too."""
    bed.set_mode(mode)
    time.sleep(1.0)  # the previous run's queue drains
    log.drain()  # decisions of the previous run's last moments
    cursor = int(get("/emulator/v1/drops/counters")["last_seq"])
    unlogged_before = bed.ue_state()["counters"]["unlogged"]
    adapter_before = bed.adapter_metrics()
    legs_trace: contextlib.AbstractContextManager[dict[int, list[dict[str, float]]]] = (
        bed.ran_legs() if trace else contextlib.nullcontext({})
    )
    with bed.ping() as pings, legs_trace as legs:
        downloads = [bed.fetch(port, size) for port in PORTS]
        results = [bed.result(d) for d in downloads]
    adapter = feed_hops(adapter_before, bed.adapter_metrics(), span_s(results))
    time.sleep(0.5)  # the last losses are detected about an RTT after their drops
    if bed.ue_state()["counters"]["unlogged"] != unlogged_before:
        raise RuntimeError("the kernel's decision log overflowed: the join would be partial")
    ue = bed.topo.ues[0].name
    records = [r.as_dict() for r in log.drain()]
    records = [r for r in records if r["ue"] == bed.ue_ip]
    decisions = [Decision.from_log(r, ue) for r in records]
    drops = [d for d in read_drops(get, cursor) if d.ue == ue]
    joined = discrimination(decisions, drops, WINDOW_NS)
    truths = {id(d): t.value for d, t in episode_truths(decisions, drops, WINDOW_NS)}
    for record, decision in zip(records, decisions, strict=True):
        record["truth"] = truths[id(decision)]  # the episode's cause, for the analysis
    rtts = [p[1] for p in pings]
    ages = [cast(float, r["radio_age_ms"]) for r in records if r["radio_age_ms"]]
    return {
        "mode": mode,
        "loadavg_1min": os.getloadavg()[0],
        "fct_s": [r["fct_s"] for r in results],
        # both downloads' bytes over the time from the first start to the last end
        "goodput_mbps": len(PORTS) * size * 8 / span_s(results) / 1e6,
        "rtt_ms_p50": percentile(rtts, 50),
        "rtt_ms_p90": percentile(rtts, 90),
        "drops": dict(collections.Counter(d.cause for d in drops)),
        "verdicts": dict(collections.Counter(r["verdict"] for r in records)),
        # what each verdict was given, per truth: where a mode's misses come from
        "verdicts_by_truth": verdicts_by_truth(records),
        # how old the radio state was at the decisions (the feed's delay on this host), and
        # where it was too old to decide on
        "radio_age_ms_p50_p90": [percentile(ages, 50), percentile(ages, 90)] if ages else None,
        # the feed's first hops over the run (RAN polls, broker confirms): where it is late
        "adapter": adapter,
        "stale_radio_age_ms": sorted(
            round(cast(float, r["radio_age_ms"]), 1) for r in records if r["verdict"] == "stale"
        ),
        "discrimination": joined.as_dict(),
        "decisions": records,
        **(window_trace(records, legs) if trace else {}),
    }


def window_trace(records: list[dict[str, Any]],
                 legs: dict[int, list[dict[str, float]]]) -> dict[str, Any]:  # fmt: skip
    """The RAN legs' windows over the run (``ran_legs``, time from the first sample) and,
    per loss decision, how the window came back: ``regrowth``, per flow and decision, the
    cwnd and ssthresh at the loss (segments), and the seconds until the sampled cwnd was
    again at the loss's cwnd (None: not before the flow's next loss decision). The
    decisions' CLOCK_MONOTONIC times are put on the samples' Unix clock."""
    offset = time.time() - time.monotonic()  # CLOCK_MONOTONIC -> Unix time, s
    start = min((s["t"] for samples in legs.values() for s in samples), default=0.0)
    regrowth = []
    for port, samples in legs.items():
        mine = [r for r in records if r["flow"]["sport"] == port]
        times = [r["time_ns"] / 1e9 + offset for r in mine]
        for i, (r, t) in enumerate(zip(mine, times, strict=True)):
            until = times[i + 1] if i + 1 < len(times) else float("inf")
            regrown = (
                s["t"] for s in samples if t < s["t"] < until and s["cwnd"] >= r["cwnd_segments"]
            )
            back = next(regrown, None)
            regrowth.append({
                "port": port, "t_s": round(t - start, 3), "verdict": r["verdict"],
                "truth": r.get("truth"), "cwnd": r["cwnd_segments"],
                "ssthresh": r["ssthresh_segments"], "srtt_ms": r["lookback_ms"],
                "regrowth_s": None if back is None else round(back - t, 3),
                "next_loss_s": None if until == float("inf") else round(until - t, 3),
            })  # fmt: skip
    timeline = {str(port): [{**s, "t": round(s["t"] - start, 3)} for s in samples]
                for port, samples in legs.items()}  # fmt: skip
    return {"ran_legs": timeline, "regrowth": sorted(regrowth, key=lambda g: g["t_s"])}


def feed_hops(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, Any]:
    """Polls per second, and per hop (the RAN poll, the broker's publish confirm) the mean
    latency and the share above 50 ms, PEP_MELD_STALE_MS, from two scrapes of the adapter."""

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    out: dict[str, Any] = {"polls_per_s": round(delta("rnis_polls_total") / seconds, 1)}
    for hop, metric in (("poll", "rnis_poll_latency_seconds"),
                        ("confirm", "rnis_amqp_confirm_latency_seconds")):  # fmt: skip
        n = delta(f"{metric}_count")
        late = n - delta(f'{metric}_bucket{{le="0.05"}}')
        mean_ms = round(delta(f"{metric}_sum") / n * 1e3, 2) if n else None
        out[hop] = {"n": int(n), "mean_ms": mean_ms, "over_50ms": int(late)}
    return out


def verdicts_by_truth(records: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in records:
        out[r["truth"]][r["verdict"]] += 1
    return {truth: dict(c) for truth, c in out.items()}


def run(ccas: list[str], modes: list[str], runs: int, size: int, out: Path,
        scenario: Path = SCENARIO) -> dict[str, Any]:  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="meld-disc-"))
    load_at_start = os.getloadavg()
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    buffer = rlc_buffer_bytes(scenario)
    pep_env = {"PEP_MELD_RLC_BUFFER_BYTES": str(buffer)}
    for cca in ccas:
        config = BedConfig(scenario, servers=dict.fromkeys(PORTS, cca), intercepted=list(PORTS),
                           ran_cca=cca, pep_env=pep_env)  # fmt: skip
        raw[cca] = {m: [] for m in modes}
        with (
            running_bed(config, workdir) as bed,
            contextlib.closing(DecisionLog(pep_pin_dir(bed))) as log,
        ):
            get = emulator_api(bed)
            for r, mode in alternating(runs, modes):
                d = one_run(bed, log, get, mode, size, trace=r == 0)
                if r > 0:  # the JSON keeps the first run's decision log (and trace) only
                    del d["decisions"]
                raw[cca][mode].append(d)
                print(f"{cca:<6} run {r + 1}/{runs} {progress(d)}", flush=True)
    results = {
        "setup": {"scenario": str(scenario.relative_to(REPO)), "size_bytes_per_flow": size,
                  "flows": len(PORTS), "runs": runs, "ccas": ccas, "modes": modes,
                  "rnis_poll": "8ms", "join_window_ms": WINDOW_NS / 1e6,
                  "rlc_buffer_bytes": buffer,
                  "rtt": "ping UE->server, 10 Hz, during each run",
                  "positive_class": "radio (MELD keeps cwnd: verdict suppress)"},
        "summary": {cca: {m: summarize(ds) for m, ds in raw[cca].items()} for cca in ccas},
        "environment": {**environment(), "loadavg_at_start": load_at_start},
        "runs": raw,
    }  # fmt: skip
    save_results(results, out, "discrimination", plot, table)
    return results


def progress(d: dict[str, Any]) -> str:
    """One run's line on the console."""
    j = d["discrimination"]["radio"]
    return (f"{d['mode']:<13} {d['goodput_mbps']:6.2f} Mbit/s RTT p90 {d['rtt_ms_p90']:6.1f} ms "
            f"drops {d['drops']} radio tp/fp/fn {j['tp']}/{j['fp']}/{j['fn']} unknown "
            f"{d['discrimination']['unknown']} verdicts {d['verdicts']} "
            f"load {d['loadavg_1min']:.1f}")  # fmt: skip


def summarize(ds: list[dict[str, Any]]) -> dict[str, Any]:
    """Confusion counts summed over the runs; goodput and RTT as mean ± 95 % CI of runs."""
    total = Discrimination()
    for d in ds:
        for cls in ("radio", "congestion"):
            s: Scores = getattr(total, cls)
            for k in ("tp", "fp", "fn", "tn"):
                setattr(s, k, getattr(s, k) + d["discrimination"][cls][k])
        total.unknown += d["discrimination"]["unknown"]
    out: dict[str, Any] = total.as_dict()
    for cls in ("radio", "congestion"):  # the spread over runs of what the pooled counts give
        for k in ("precision", "recall"):
            values = [d["discrimination"][cls][k] for d in ds]
            defined = [float(v) for v in values if v is not None]
            mean, ci = mean_ci95(defined) if len(defined) > 1 else (float("nan"), float("nan"))
            out[cls][f"{k}_per_run"] = {"mean": round(mean, 3), "ci95": round(ci, 3),
                                        "runs": len(defined)}  # fmt: skip
    for key in ("goodput_mbps", "rtt_ms_p50", "rtt_ms_p90"):
        mean, ci = mean_ci95([d[key] for d in ds])
        out[key] = {"mean": round(mean, 3), "ci95": round(ci, 3)}
    out["drops"] = dict(sum((collections.Counter(d["drops"]) for d in ds), collections.Counter()))
    out["verdicts"] = dict(
        sum((collections.Counter(d["verdicts"]) for d in ds), collections.Counter())
    )
    by_truth: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for d in ds:
        for truth, verdicts in d["verdicts_by_truth"].items():
            by_truth[truth].update(verdicts)
    out["verdicts_by_truth"] = {truth: dict(c) for truth, c in by_truth.items()}
    loads = [d["loadavg_1min"] for d in ds]
    out["loadavg_1min"] = {"min": min(loads), "max": max(loads)}
    return out


def _fmt(v: float | None) -> str:
    return "  -  " if v is None else f"{v:5.3f}"


def table(results: dict[str, Any]) -> str:
    lines = ["CCA    mode           radio P / R      congestion P / R  unknown  stale  "
             "goodput Mbit/s  RTT p90 ms      drops"]  # fmt: skip
    for cca, summary in results["summary"].items():
        for mode, s in summary.items():
            r, c = s["radio"], s["congestion"]
            g, p90 = s["goodput_mbps"], s["rtt_ms_p90"]
            lines.append(
                f"{cca:<6} {mode:<13}  {_fmt(r['precision'])} / {_fmt(r['recall'])}  "
                f"{_fmt(c['precision'])} / {_fmt(c['recall'])}   {s['unknown']:>6}  "
                f"{s['verdicts'].get('stale', 0):>5}  {g['mean']:6.2f} ± {g['ci95']:<5.2f}  "
                f"{p90['mean']:6.1f} ± {p90['ci95']:<5.1f}  "
                f"{s['drops']}"
            )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    modes = results["setup"]["modes"]
    colors = MODE_COLORS
    fig, rows = figure_per_cca(results, 2, (13, 4.5))
    for row, cca, s in rows:
        ax = row[0]
        for m in modes:
            g, p90 = s[m]["goodput_mbps"], s[m]["rtt_ms_p90"]
            ax.errorbar(p90["mean"], g["mean"], xerr=p90["ci95"], yerr=g["ci95"], fmt="o",
                        capsize=5, color=colors[m], label=m)  # fmt: skip
        ax.set_xlabel("ping RTT p90, ms (mean of runs, 95 % CI)")
        ax.set_ylabel("goodput of both downloads, Mbit/s")
        ax.set_title(f"{cca}: goodput vs RTT per mode")
        ax.legend()
        ax = row[1]
        bars = [("radio", "precision"), ("radio", "recall"),
                ("congestion", "precision"), ("congestion", "recall")]  # fmt: skip
        width = 0.8 / len(modes)
        for i, m in enumerate(modes):
            values = [s[m][cls][k] or 0.0 for cls, k in bars]
            ax.bar([j + i * width for j in range(len(bars))], values, width, color=colors[m],
                   label=m)  # fmt: skip
        ax.axhline(0.95, color="k", lw=0.8, ls="--")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(bars))])
        ax.set_xticklabels([f"{cls}\n{k}" for cls, k in bars])
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{cca}: decisions vs the emulator's drop labels (goal 0.95 dashed)")
        ax.legend()
    save_figure(fig, path)


def resummarize(out: Path) -> None:
    """The summary of saved runs again (after the summary gained a figure), runs unchanged."""
    results = json.loads((out / "discrimination.json").read_text())
    results["summary"] = {
        cca: {m: summarize(ds) for m, ds in by_mode.items()}
        for cca, by_mode in results["runs"].items()
    }
    save_results(results, out, "discrimination", plot, table)


def main() -> None:
    modes_main(__doc__, run, out=REPO / "docs/results/meld", runs=10, size=5_000_000, modes=MODES,
               resummarize=resummarize, scenario=SCENARIO)  # fmt: skip


if __name__ == "__main__":
    main()
