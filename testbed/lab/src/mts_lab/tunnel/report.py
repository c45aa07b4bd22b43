"""The tunnel experiment's figures beside research 003's (``mts_lab.tunnel.experiment``):
means over runs with 95 % CIs, the comparison table, the PNG."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from mts_lab.meld.bed import mean_ci95
from mts_lab.results import Results, pyplot

FIFO1, FQ1 = "1 hom fifo rr", "1 hom fq_codel rr"
FIFO2, FQ2 = "2 hom fifo rr", "2 hom fq_codel rr"
RR3A, LOW3A, FIFO3A = "3a hom fq_codel rr", "3a hom fq_codel lowrtt", "3a hom fifo rr"
RR3B, LOW3B = "3b het fq_codel rr", "3b het fq_codel lowrtt"
RR4, LOW4, FIFO4 = "4 het fq_codel rr", "4 het fq_codel lowrtt", "4 het fifo lowrtt"
CBR_ALONE, FIFO5, FQ5 = "5 hom fq_codel rr cbr16", "5 hom fifo rr cbr4", "5 hom fq_codel rr cbr4"
BOTTLENECK = "bottleneck hom fifo rr"

# (name, case a, case b, metric): % change of b's metric against a's, paired within a run
CHANGES = [
    ("t1_latency_fq_vs_fifo_pct", FIFO1, FQ1, "ping_mean_ms"),
    ("t3a_latency_fq_vs_fifo_pct", FIFO3A, RR3A, "ping_mean_ms"),
    ("t3b_latency_lowrtt_vs_rr_pct", RR3B, LOW3B, "ping_mean_ms"),
    ("t3b_throughput_lowrtt_vs_rr_pct", RR3B, LOW3B, "down_mbit"),
    ("t4_latency_lowrtt_vs_rr_pct", RR4, LOW4, "ping_mean_ms"),
    ("t4_latency_fq_vs_fifo_pct", FIFO4, LOW4, "ping_mean_ms"),
    ("t5_cbr_delay_fq_vs_fifo_pct", FIFO5, FQ5, "cbr_delay_p50_ms"),
]


def scalars(r: Results) -> dict[str, float]:
    """A case's figures that are averaged over runs."""
    out = {
        k: r[k]
        for k in (
            "down_mbit", "up_mbit", "ping_mean_ms", "ping_median_ms", "ping_p95_ms",
            "ping_early_ms", "ping_late_ms", "jain", "fair_share_after_s", "jain_shared",
            "sojourn_settle_s", "fair_share_reached", "path_timeouts",
        )
        if r.get(k) is not None
    }  # fmt: skip
    out["split_down_path1"] = r["split_down"][0]
    downs = [f["mbit"] for f in r["flows"] if f["dir"] == "down"]
    if downs:
        out["per_download_mbit"] = sum(downs) / len(downs)
    if "cbr" in r:
        cbr = r["cbr"]
        out |= {
            "cbr_delivered_mbit": cbr["delivered_mbit"],
            "cbr_loss": cbr["loss"],
            "cbr_delay_p50_ms": cbr["delay_ms"]["p50"],
            "cbr_delay_p95_ms": cbr["delay_ms"]["p95"],
        }
    return {k: float(v) for k, v in out.items()}


def stat(values: list[float]) -> list[float]:
    """[mean, CI half-width, n] of the finite values (a case may have none: no reply, no
    datagram)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return [math.nan, math.nan, 0]
    mean, half = mean_ci95(finite)
    return [mean, half, len(finite)]


def summary(cases: list[Results]) -> Results:
    per_case: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    by_run: dict[tuple[int, str], dict[str, float]] = {}
    for r in cases:
        figures = scalars(r)
        by_run[(r["run"], r["case"])] = figures
        for k, v in figures.items():
            per_case[r["case"]][k].append(v)
    changes: Results = {}
    for name, a, b, metric in CHANGES:
        pcts = [
            100 * (by_run[(run, b)][metric] / base[metric] - 1)
            for (run, case), base in by_run.items()
            if case == a and metric in base and base[metric] and metric in by_run.get((run, b), {})
        ]
        if pcts:
            changes[name] = stat(pcts)
    return {
        "cases": {c: {k: stat(v) for k, v in m.items()} for c, m in per_case.items()},
        "changes": changes,
    }


def fmt(s: Results, case: str, metric: str, unit: str = "", digits: int = 1) -> str:
    value = s["cases"].get(case, {}).get(metric)
    return ci(value, unit, digits)


def ci(value: list[float] | None, unit: str = "", digits: int = 1) -> str:
    if value is None or not value[2]:
        return "–"
    mean, half, n = value
    spread = "" if math.isnan(half) else f" ± {half:.{digits}f}"
    return f"{mean:.{digits}f}{spread}{unit} (n={int(n)})"


def pct(s: Results, case: str, metric: str) -> str:
    value = s["cases"].get(case, {}).get(metric)
    return ci([100 * value[0], 100 * value[1], value[2]], " %") if value else "–"


def several(s: Results, cases: list[str], metric: str, unit: str = "", digits: int = 1) -> str:
    """One figure of several cases, "a / b / c unit"."""
    values = [fmt(s, c, metric, "", digits) for c in cases]
    return " / ".join(values) + unit


def rows(s: Results) -> list[tuple[str, str, str, str]]:
    ch = s["changes"]

    def change(name: str) -> str:
        return ci(ch.get(name), " %")

    b = BOTTLENECK
    return [
        ("bottleneck: 1 path 20 Mbit/s, FIFO", "TCP throughput",
         fmt(s, b, "down_mbit", " Mbit/s"), "flat at 20 Mbit/s"),
        ("", "ICMP RTT early → late in the run",
         f"{fmt(s, b, 'ping_early_ms', ' ms')} → {fmt(s, b, 'ping_late_ms', ' ms')}",
         "rising (bufferbloat in the VPN)"),
        ("1: 1 TCP + ICMP, homogeneous, RR", "aggregate (FQ-CoDel)",
         fmt(s, FQ1, "down_mbit", " Mbit/s"), "≈ 36 of 40 Mbit/s"),
        ("", "share on path 1", pct(s, FQ1, "split_down_path1"), "50.1 %"),
        ("", "ICMP mean, FQ-CoDel", fmt(s, FQ1, "ping_mean_ms", " ms"), "24 ms (floor 20)"),
        ("", "ICMP mean, FIFO", fmt(s, FIFO1, "ping_mean_ms", " ms"), "≈ 8× FQ-CoDel's"),
        ("", "latency, FQ-CoDel vs FIFO", change("t1_latency_fq_vs_fifo_pct"), "−88 %"),
        ("2: 2 TCP, 2nd at +5 s, homogeneous, RR",
         "2nd flow at its fair share (for good): share of runs, FIFO / FQ-CoDel",
         f"{pct(s, FIFO2, 'fair_share_reached')} / {pct(s, FQ2, 'fair_share_reached')}",
         "FIFO ~5 s, then oscillating; FQ-CoDel instant"),
        ("", "… after, in the runs that reached it, FIFO / FQ-CoDel",
         several(s, [FIFO2, FQ2], "fair_share_after_s", " s"), "~5 s / instant"),
        ("", "Jain's index once both run, FIFO / FQ-CoDel",
         several(s, [FIFO2, FQ2], "jain_shared", "", 3), "fair (FQ-CoDel)"),
        ("", "sojourn: slow-start peak → 5 ms, FQ-CoDel",
         fmt(s, FQ2, "sojourn_settle_s", " s", 2), "≈ 0.2 s (2 intervals)"),
        ("3a: 4 TCP + ICMP, homogeneous", "per flow / aggregate, FQ-CoDel RR",
         f"{fmt(s, RR3A, 'per_download_mbit')} / {fmt(s, RR3A, 'down_mbit', ' Mbit/s')}",
         "9 / 36 Mbit/s"),
        ("", "ICMP mean, FQ-CoDel RR / LowRTT",
         several(s, [RR3A, LOW3A], "ping_mean_ms", " ms"), "24 ms, RR = LowRTT"),
        ("", "share on path 1, RR / LowRTT",
         f"{pct(s, RR3A, 'split_down_path1')} / {pct(s, LOW3A, 'split_down_path1')}",
         "≈ 50 / 50 %"),
        ("", "Jain's index, FQ-CoDel RR / FIFO RR", several(s, [RR3A, FIFO3A], "jain", "", 3),
         "fair"),
        ("", "ICMP mean FIFO RR; FQ-CoDel vs FIFO",
         f"{fmt(s, FIFO3A, 'ping_mean_ms', ' ms')}; {change('t3a_latency_fq_vs_fifo_pct')}", "–"),
        ("3b: 4 TCP + ICMP, heterogeneous", "share on path A, RR / LowRTT",
         f"{pct(s, RR3B, 'split_down_path1')} / {pct(s, LOW3B, 'split_down_path1')}",
         "62 % / 68 %"),
        ("", "aggregate, RR / LowRTT", several(s, [RR3B, LOW3B], "down_mbit", " Mbit/s"),
         "24 of 30 / ≈ 25.8 Mbit/s"),
        ("", "ICMP mean, RR / LowRTT", several(s, [RR3B, LOW3B], "ping_mean_ms", " ms"),
         "28 / ≈ 13 ms"),
        ("", "latency, LowRTT vs RR", change("t3b_latency_lowrtt_vs_rr_pct"), "−54 %"),
        ("", "throughput, LowRTT vs RR", change("t3b_throughput_lowrtt_vs_rr_pct"), "+7.5 %"),
        ("4: RRUL (4 down, 4 up, ICMP), heterogeneous",
         "down, FQ-CoDel RR / FQ-CoDel LowRTT / FIFO LowRTT",
         several(s, [RR4, LOW4, FIFO4], "down_mbit", " Mbit/s"), "–"),
        ("", "up, same order", several(s, [RR4, LOW4, FIFO4], "up_mbit", " Mbit/s"), "–"),
        ("", "Jain's index (8 flows), same order", several(s, [RR4, LOW4, FIFO4], "jain", "", 3),
         "FQ-CoDel fair under stress; FIFO less"),
        ("", "ICMP mean, same order", several(s, [RR4, LOW4, FIFO4], "ping_mean_ms", " ms"),
         "LowRTT < RR; FQ-CoDel < FIFO"),
        ("", "latency, LowRTT vs RR; FQ-CoDel vs FIFO",
         f"{change('t4_latency_lowrtt_vs_rr_pct')}; {change('t4_latency_fq_vs_fifo_pct')}",
         "lower; lower"),
        ("5: constant-rate UDP (for SCReAM), homogeneous", "16 Mbit/s CBR alone: delivered",
         fmt(s, CBR_ALONE, "cbr_delivered_mbit", " Mbit/s"), "≤ ~2 Mbit/s (the VPN's defect)"),
        ("", "4 Mbit/s CBR beside 1 TCP: one-way delay p50, FIFO / FQ-CoDel",
         several(s, [FIFO5, FQ5], "cbr_delay_p50_ms", " ms"), "sojourn ≈ 5 ms (FQ-CoDel)"),
        ("", "… its loss, FIFO / FQ-CoDel",
         f"{pct(s, FIFO5, 'cbr_loss')} / {pct(s, FQ5, 'cbr_loss')}", "–"),
        ("", "delay, FQ-CoDel vs FIFO", change("t5_cbr_delay_fq_vs_fifo_pct"), "–"),
    ]  # fmt: skip


def load_text(r: Results) -> str:
    return (
        "/".join(f"{x:.1f}" for x in r["load_before"])
        + " before, "
        + "/".join(f"{x:.1f}" for x in r["load_after"])
        + " after"
    )


def table(r: Results) -> str:
    loads = [c["load"][0] for c in r["cases"]]
    stalled = [f"{c['case']} run {c['run']}" for c in r["cases"] if c["path_timeouts"]]
    lines = [
        "| test | figure | ours (mean ± 95 % CI) | published (research 003) |",
        "|---|---|---|---|",
        *(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows(r["summary"])),
        "",
        f"{r['runs']} runs x {r['seconds']:g} s per case; load (1/5/15 min) {load_text(r)}; "
        f"1-min load during the cases {min(loads):.1f}-{max(loads):.1f}; path timeouts (a path "
        f"silent >= 200 ms: stalls) in {len(stalled)} of {len(r['cases'])} cases"
        + (f" ({', '.join(stalled)})" if stalled else ""),
    ]
    return "\n".join(lines)


def first_run(r: Results, case: str) -> Results | None:
    return next((c for c in r["cases"] if c["case"] == case), None)


def cdf(ax: Any, values: list[float], label: str) -> None:
    ordered = sorted(values)
    if ordered:
        ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)


def ping_cdfs(ax: Any, r: Results, labels: dict[str, str], title: str) -> None:
    """CDFs of the ping RTTs of each case, all runs pooled."""
    for case, label in labels.items():
        cdf(
            ax,
            [rtt for c in r["cases"] if c["case"] == case for _, rtt in c.get("ping", [])],
            label,
        )
    ax.set_xscale("log")
    ax.set_title(f"{title}, all runs")
    ax.set_xlabel("RTT (ms)")
    ax.legend(fontsize=8)


def plot(r: Results, out: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    (a, b, c, d), (e, f, g, h) = axes
    bottleneck = first_run(r, BOTTLENECK)
    if bottleneck:
        t = [x for x, _ in bottleneck["ping"]]
        a.plot(t, [y for _, y in bottleneck["ping"]], ".", ms=2, label="ICMP RTT (ms)")
        rate = bottleneck["flows"][0]["timeline_mbit"]
        a.plot([(i + 0.5) * 0.5 for i in range(len(rate))], rate, label="TCP (Mbit/s)")
        a.legend(fontsize=8)
    a.set_title("bottleneck: 1 path 20 Mbit/s, FIFO (run 1)")
    a.set_xlabel("s")
    b.axvline(24, color="grey", ls="--", lw=0.8, label="research FQ-CoDel mean 24 ms")
    ping_cdfs(b, r, {FIFO1: "FIFO", FQ1: "FQ-CoDel"}, "test 1: ICMP RTT beside 1 TCP")
    for case, style in ((FIFO2, "--"), (FQ2, "-")):
        run = first_run(r, case)
        if run:
            for i, flow in enumerate(run["flows"]):
                x = [(k + 0.5) * 0.5 for k in range(len(flow["timeline_mbit"]))]
                c.plot(x, flow["timeline_mbit"], style, label=f"{run['queue']} flow {i + 1}")
    c.set_title("test 2: 2nd TCP at +5 s (run 1)")
    c.set_xlabel("s")
    c.set_ylabel("Mbit/s")
    c.legend(fontsize=8)
    for case, label in ((FIFO2, "FIFO"), (FQ2, "FQ-CoDel")):
        run = first_run(r, case)
        if run:
            d.plot(
                [q[0] for q in run["queue_trace"]], [q[1] for q in run["queue_trace"]], label=label
            )
    d.axhline(5, color="grey", ls="--", lw=0.8, label="CoDel target 5 ms")
    d.set_yscale("log")
    d.set_title("test 2: ingress queue, oldest sojourn (run 1)")
    d.set_xlabel("s")
    d.set_ylabel("ms")
    d.legend(fontsize=8)
    bars(
        e, r, [RR3A, LOW3A, FIFO3A, RR3B, LOW3B], "down_mbit", "test 3: aggregate download (Mbit/s)"
    )
    bars(
        f,
        r,
        [RR3A, LOW3A, FIFO3A, RR3B, LOW3B, RR4, LOW4, FIFO4],
        "ping_mean_ms",
        "tests 3-4: ICMP mean (ms)",
    )
    labels = {RR4: "FQ-CoDel RR", LOW4: "FQ-CoDel LowRTT", FIFO4: "FIFO LowRTT"}
    ping_cdfs(g, r, labels, "test 4: RRUL ICMP RTT, heterogeneous")
    bars(h, r, [FIFO5, FQ5], "cbr_delay_p50_ms", "test 5: 4 Mbit/s CBR beside TCP, delay p50 (ms)")
    fig.suptitle(
        f"multipath tunnel, research 003's tests ({r['runs']} runs x {r['seconds']:g} s; "
        f"shared machine, load {load_text(r)})"
    )
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def bars(ax: Any, r: Results, cases: list[str], metric: str, title: str) -> None:
    values = [r["summary"]["cases"].get(c, {}).get(metric, [math.nan, math.nan, 0]) for c in cases]
    ax.bar(
        range(len(cases)),
        [v[0] for v in values],
        yerr=[0 if math.isnan(v[1]) else v[1] for v in values],
        capsize=3,
    )
    ax.set_xticks(range(len(cases)), [c.replace(" ", "\n", 2) for c in cases], fontsize=7)
    ax.set_title(title)
