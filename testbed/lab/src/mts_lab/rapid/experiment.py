"""``make experiment-rapid``: RAPID on the emulated RAN, the thesis's OAI scenarios (Table 5.3).

LTE FDD 5 MHz / 25 PRB, one UE, RLC AM 1 MB, end-to-end RTT ~50 ms, ~16 Mbit/s
(``testbed/configs/lte-25prb-rapid.yaml``). Three scenarios, each under three variants:

- ``e2e``: no PEP (the servers' own Cubic/BBR reach the UE: the thesis's "without RAPID"),
- ``pep``: through the PEP, RAN legs plain CUBIC (mode off),
- ``rapid``: through the PEP in RAPID mode (WAN windows per flow, RAN cwnd = flow BDP).

1. ``cubic_bbr``: a Cubic server and a BBR server, one download each, together: each
   flow's goodput while both run, ping RTT p80/p90. Published: 8.0 vs 7.8 Mbit/s with
   RAPID, RTT p90 < 100 ms (> 400 ms without).
2. ``short``: two long Cubic downloads, then a 500 kB transfer: its completion time.
   Published: 7 s → 1 s.
3. ``udp``: 8 Mbit/s CBR UDP (not split) beside one TCP download (Cubic, then BBR): TCP
   goodput, UDP loss/delay/jitter, ping RTT. Published: with RAPID, Cubic > 5x lower delay,
   BBR > 35 % more goodput.

The radio state reaches the PEP through the real chain (emulator → rnis-adapter → RabbitMQ
→ PEP → BPF maps). Output: ``rapid.json``, ``rapid.png`` and a table.

    uv run python -m mts_lab.rapid.experiment --out docs/results/rapid [--runs 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
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
    mean_ci95,
    percentile,
    running_bed,
)
from mts_lab.results import pyplot, save_figure, save_results

SCENARIO = REPO / "testbed/configs/lte-25prb-rapid.yaml"
# Server ports: the PEP splits the first two only.
PORTS = {"pep": {"cubic": 5001, "bbr": 5002}, "e2e": {"cubic": 5011, "bbr": 5012}}
VARIANTS = ("e2e", "pep", "rapid")
UDP_PORT = 6001


def port(variant: str, cca: str) -> int:
    return PORTS["e2e" if variant == "e2e" else "pep"][cca]


def overlap_goodput(results: list[dict[str, Any]]) -> list[float]:
    """Each download's goodput (Mbit/s) over the time all of them were running."""
    start = max(r["started"] for r in results)
    end = min(r["started"] + r["fct_s"] for r in results)
    rates = []
    for r in results:
        t0, t1 = start - r["started"], end - r["started"]
        rates.append((_bytes_at(r["timeline"], t1) - _bytes_at(r["timeline"], t0)) * 8
                     / max(end - start, 1e-3) / 1e6)  # fmt: skip
    return rates


def _bytes_at(timeline: list[list[float]], t: float) -> float:
    """Bytes received by time t (linear between the 0.1 s samples)."""
    prev_t, prev_b = 0.0, 0.0
    for ti, bi in timeline:
        if ti >= t:
            if ti == prev_t:
                return bi
            return prev_b + (bi - prev_b) * (t - prev_t) / (ti - prev_t)
        prev_t, prev_b = ti, bi
    return prev_b


def cubic_bbr(bed: RanAwareBed, variant: str, size: int) -> dict[str, Any]:
    with bed.ping() as pings, bed.radio_ages() as ages:
        downloads = {cca: bed.fetch(port(variant, cca), size) for cca in ("cubic", "bbr")}
        results = {cca: bed.result(d) for cca, d in downloads.items()}
    cubic, bbr = overlap_goodput([results["cubic"], results["bbr"]])
    rtts = [p[1] for p in pings]
    return {"cubic_mbps": cubic, "bbr_mbps": bbr, "ping": pings,
            "rtt_ms_p80": percentile(rtts, 80), "rtt_ms_p90": percentile(rtts, 90),
            # RAPID falls back to CUBIC while the radio state is stale (a loaded feed)
            "radio_age_ms_p50": percentile(ages, 50),
            "radio_age_ms_p90": percentile(ages, 90)}  # fmt: skip


def short_transfer(bed: RanAwareBed, variant: str, size: int) -> dict[str, Any]:
    with bed.ping() as pings:
        long = [bed.fetch(port(variant, "cubic"), size) for _ in range(2)]
        time.sleep(5.0)  # both long flows in steady state
        short = bed.result(bed.fetch(port(variant, "cubic"), 500_000))
        for d in long:
            bed.result(d)
    rtts = [p[1] for p in pings]
    return {"short_fct_s": short["fct_s"], "ping": pings, "rtt_ms_p90": percentile(rtts, 90)}


def udp_beside_tcp(bed: RanAwareBed, variant: str, cca: str, seconds: float) -> dict[str, Any]:
    """A TCP download sized to last about ``seconds`` at 5 Mbit/s, inside a longer UDP stream."""
    size = int(5e6 / 8 * seconds)
    sink, sender = bed.udp(UDP_PORT, 8e6, 4 * seconds)  # outlasts the download
    # the socket that sends toward the UE: the server's end to end, else the PEP's RAN leg
    ns = bed.topo.server.ns if variant == "e2e" else bed.topo.mec.ns
    with bed.ping() as pings, bed.senders(ns, period=0.1) as sockets:
        tcp = bed.result(bed.fetch(port(variant, cca), size))
        sender.kill()  # the UDP figures cover the download (and the second before it)
        sender.wait()
        out, _ = sink.communicate(timeout=60)
    udp = json.loads(out)
    sent = max(udp["seqs"]) + 1 if udp["seqs"] else 1
    delays = udp["delays_ms"]
    jitter = statistics.fmean(abs(a - b) for a, b in itertools.pairwise(delays)) if delays else 0
    rtts = [p[1] for p in pings]
    return {
        "tcp_mbps": size * 8 / tcp["fct_s"] / 1e6,
        "udp_loss_percent": 100 * (1 - udp["unique"] / sent),
        "udp_delay_ms_p50": percentile(delays, 50), "udp_delay_ms_p90": percentile(delays, 90),
        "udp_jitter_ms": jitter, "rtt_ms_p90": percentile(rtts, 90), "ping": pings,
        **sender_medians(sockets.get(port(variant, cca), [])),
    }  # fmt: skip


def sender_medians(samples: list[dict[str, float]]) -> dict[str, float]:
    """The medians over the download of what ``ss`` showed of the sender's socket: its
    srtt and min RTT, cwnd, and for BBR its bandwidth and min RTT estimates (``sender_*``;
    fields the socket never showed are left out)."""
    keys = sorted({k for x in samples for k in x} - {"t", "ssthresh"})
    return {f"sender_{k}": statistics.median(x[k] for x in samples if k in x) for k in keys}


def run(runs: int, size: int, udp_seconds: float, scenarios: list[str], out: Path,
        scenario: Path = SCENARIO, variants: tuple[str, ...] = VARIANTS,
        pep_env: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    servers = {p: cca for by_cca in PORTS.values() for cca, p in by_cca.items()}
    config = BedConfig(scenario, servers=servers, intercepted=list(PORTS["pep"].values()),
                       pep_env=pep_env or {})  # fmt: skip
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {s: {v: [] for v in variants}
                                                       for s in scenarios}  # fmt: skip
    with running_bed(config, Path(tempfile.mkdtemp(prefix="rapid-"))) as bed:
        for r, variant in alternating(runs, variants):
            bed.set_mode("rapid" if variant == "rapid" else "off")
            for name in scenarios:
                time.sleep(2.0)  # queues drain between measurements
                d = measure(bed, name, variant, size, udp_seconds)
                raw[name][variant].append(d)
                shown = {k: round(v, 2) for k, v in d.items() if isinstance(v, float)}
                print(f"run {r + 1}/{runs} {name:<9} {variant:<5} {shown}", flush=True)
    results = {
        "setup": {"scenario": str(scenario.relative_to(REPO)), "runs": runs,
                  "long_download_bytes": size, "udp_seconds": udp_seconds,
                  "rtt": "ping UE->server, 10 Hz", "variants": list(variants),
                  "pep_env": pep_env or {}},
        "summary": {name: summarize(name, raw[name]) for name in scenarios},
        "published": {"cubic_bbr": "RAPID 8.0 vs 7.8 Mbit/s, RTT p90 < 100 ms (> 400 ms e2e)",
                      "short": "500 kB beside two Cubic downloads: 7 s -> 1 s",
                      "udp": "Cubic > 5x lower delay, BBR > 35 % more goodput with RAPID"},
        "environment": environment(),
        "runs": raw,
    }  # fmt: skip
    save_results(results, out, "rapid", plot, table)
    return results


def measure(bed: RanAwareBed, name: str, variant: str, size: int, udp_s: float) -> dict[str, Any]:
    if name == "cubic_bbr":
        return cubic_bbr(bed, variant, size)
    if name == "short":
        return short_transfer(bed, variant, size)
    cubic = udp_beside_tcp(bed, variant, "cubic", udp_s)
    time.sleep(2.0)
    bbr = udp_beside_tcp(bed, variant, "bbr", udp_s)
    return {**{f"cubic_{k}": v for k, v in cubic.items()},
            **{f"bbr_{k}": v for k, v in bbr.items()}}  # fmt: skip


def summarize(name: str, by_variant: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for variant, ds in by_variant.items():
        if not ds:
            continue
        keys = {k for d in ds for k, v in d.items() if isinstance(v, float | int)}
        s: dict[str, Any] = {}
        for k in sorted(keys):
            # a run without a value (no UDP packet arrived: no delay) is left out, and counted
            values = [float(d[k]) for d in ds if k in d and math.isfinite(d[k])]
            if not values:
                continue
            mean, ci = mean_ci95(values)
            s[k] = round(mean, 3)
            s[f"{k}_ci95"] = round(ci, 3)
            if len(values) < len(ds):
                s[f"{k}_runs"] = len(values)
        for prefix in ("", "cubic_", "bbr_"):
            pings = [p[1] for d in ds for p in d.get(f"{prefix}ping", [])]
            if pings:
                s[f"{prefix}all_rtt_ms_p80"] = percentile(pings, 80)
                s[f"{prefix}all_rtt_ms_p90"] = percentile(pings, 90)
        summary[variant] = s
    return summary


def table(results: dict[str, Any]) -> str:
    s, pad = results["summary"], " " * 10
    lines = []
    if "cubic_bbr" in s:
        lines.append("cubic_bbr  variant  Cubic Mbit/s  BBR Mbit/s  RTT p80 / p90 ms (all pings)")
        for v, x in s["cubic_bbr"].items():
            rtt = f"{x['all_rtt_ms_p80']:>6.0f} / {x['all_rtt_ms_p90']:<6.0f}"
            lines.append(
                f"{pad} {v:<7} {x['cubic_mbps']:>8.2f}     {x['bbr_mbps']:>8.2f}     {rtt}"
            )
    if "short" in s:
        lines.append("short      variant  500 kB completion s (95% CI)  RTT p90 ms")
        for v, x in s["short"].items():
            fct = f"{x['short_fct_s']:>8.2f} ± {x['short_fct_s_ci95']:<6.2f}"
            lines.append(f"{pad} {v:<7} {fct}              {x['all_rtt_ms_p90']:>6.0f}")
    if "udp" in s:
        lines.append("udp        variant  TCP   TCP Mbit/s  UDP loss %  UDP delay p90 ms  jitter ms"
                     "  RTT p90 ms")  # fmt: skip
        for v, x in s["udp"].items():
            for c in ("cubic", "bbr"):
                lines.append(
                    f"{pad} {v:<7} {c:<5} {x[f'{c}_tcp_mbps']:>8.2f}"
                    f"   {x[f'{c}_udp_loss_percent']:>8.2f}   {x[f'{c}_udp_delay_ms_p90']:>10.1f}"
                    f"     {x[f'{c}_udp_jitter_ms']:>7.2f}   {x[f'{c}_all_rtt_ms_p90']:>7.0f}"
                )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    variants = results["setup"]["variants"]
    colors = {"e2e": "#888888", "pep": "#ff7f0e", "rapid": "#1f77b4"}
    s, raw = results["summary"], results["runs"]
    fig, axes = plt.subplots(1, 4, figsize=(21, 4.3))
    ax = axes[0]
    if "cubic_bbr" in s:
        width = 0.38
        for i, cca in enumerate(("cubic", "bbr")):
            xs = [j + (i - 0.5) * width for j in range(len(variants))]
            ax.bar(xs, [s["cubic_bbr"][v][f"{cca}_mbps"] for v in variants], width,
                   yerr=[s["cubic_bbr"][v][f"{cca}_mbps_ci95"] for v in variants], capsize=4,
                   label=cca, color=["#2ca02c", "#9467bd"][i])  # fmt: skip
        ax.set_xticks(range(len(variants)), variants)
        ax.set_ylabel("goodput while both run, Mbit/s")
        ax.set_title("Cubic + BBR downloads")
        ax.legend()
        ax = axes[1]
        for v in variants:
            rtts = sorted(p[1] for d in raw["cubic_bbr"][v] for p in d["ping"])
            if rtts:
                ax.plot(rtts, [k / len(rtts) for k in range(len(rtts))], color=colors[v], label=v)
        ax.set_xscale("log")
        ax.set_xlabel("ping RTT, ms (Cubic + BBR, all runs)")
        ax.set_ylabel("CDF")
        ax.set_title("RTT with Cubic + BBR")
        ax.legend()
    if "short" in s:
        ax = axes[2]
        ax.bar(variants, [s["short"][v]["short_fct_s"] for v in variants],
               yerr=[s["short"][v]["short_fct_s_ci95"] for v in variants], capsize=6,
               color=[colors[v] for v in variants])  # fmt: skip
        ax.set_ylabel("completion time, s (mean, 95 % CI)")
        ax.set_title("500 kB beside two Cubic downloads")
    if "udp" in s:
        ax = axes[3]
        width = 0.38
        for i, cca in enumerate(("cubic", "bbr")):
            xs = [j + (i - 0.5) * width for j in range(len(variants))]
            ax.bar(xs, [s["udp"][v][f"{cca}_all_rtt_ms_p90"] for v in variants], width,
                   label=f"{cca} + 8 Mbit/s UDP", color=["#2ca02c", "#9467bd"][i])  # fmt: skip
        ax.set_xticks(range(len(variants)), variants)
        ax.set_ylabel("ping RTT p90, ms")
        ax.set_title("TCP beside CBR UDP: delay")
        ax.legend()
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/rapid")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=30_000_000, help="bytes of a long download")
    parser.add_argument(
        "--udp-seconds",
        type=float,
        default=15.0,
        help="length of the TCP download beside the UDP stream, at 5 Mbit/s",
    )
    parser.add_argument("--scenarios", default="cubic_bbr,short,udp")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="of e2e,pep,rapid")
    parser.add_argument(
        "--pep-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="PEP setting for this run, e.g. PEP_RAPID_GAIN_PCT=150 (repeatable)",
    )
    args = parser.parse_args()
    variants = tuple(args.variants.split(","))
    if unknown := set(variants) - set(VARIANTS):
        parser.error(f"unknown variants {sorted(unknown)} (of {', '.join(VARIANTS)})")
    pep_env = dict(item.split("=", 1) for item in args.pep_env)
    run(args.runs, args.size, args.udp_seconds, args.scenarios.split(","), args.out,
        variants=variants, pep_env=pep_env)  # fmt: skip


if __name__ == "__main__":
    main()
