"""SIGMA against Reno, CUBIC and BBR on the emulated uplink (research 002 §2.4, scaled).

    python -m mts_lab.sigma.experiment --out docs/results/sigma [--runs 5]

The research ran ns-3 (900 Mbit/s uplink, 10 ms RTT, BDP 1.2 MB, a 10 MB RLC buffer);
this runs real TCP from UE namespaces through the emulator's uplink MAC at the scale the
shared 2-core machine carries (``Scale``: NR 106 PRB, MCS 28, 77.9 Mbit/s, 40 ms RTT,
BDP ~390 kB, a modem buffer of 8.3 BDP as the research's ratio). Scenarios: one flow of
2, 4, 10 and 40 BDP; four flows of 10 BDP from one UE; two UEs with 10 and 4 BDP. Per run:
duration (first connect to the sink's last byte; with ``--warm``, from the upload's
first byte on connections already open), the uplink RTT (TCP_INFO sRTT of every
flow each 10 ms) and each UE's modem buffer (the grant map's ``buffer_bytes`` each
10 ms). Writes sigma.json and sigma.png, prints a table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from mec_pep.sockets import tcp_info
from mts_lab.meld.bed import environment, mean_ci95, percentile
from mts_lab.results import Results, pyplot, save_results
from mts_lab.sigma.bed import Scale, UplinkBed
from mts_ue.sigma import Sigma

PIN_ROOT = Path("/run/mts-ue-lab-bpf")  # a bpffs the emulator sees (docs/sigma.md)
CCS = ("sigma", "reno", "cubic", "bbr")
SAMPLE_S = 0.01
MSS = 1448  # bytes: the payload of a 1500 B packet with timestamps
WARM_IDLE_S = 1.0  # a warm connection's idle time before its upload: > the RTO (≥ 200 ms + RTT)

# (name, UEs, [(ue, size in BDP), ...])
SCENARIOS: list[tuple[str, int, list[tuple[int, float]]]] = [
    ("single_2bdp", 1, [(0, 2)]),
    ("single_4bdp", 1, [(0, 4)]),
    ("single_10bdp", 1, [(0, 10)]),
    ("single_40bdp", 1, [(0, 40)]),
    ("four_flows_10bdp", 1, [(0, 10)] * 4),
    ("two_ues_10_4bdp", 2, [(0, 10), (1, 4)]),
]

# research 002 §2.4 / §7, text values (SIGMA's reduction of the upload duration)
PUBLISHED = {
    "single_flow": {"vs_reno_pct": -80, "vs_cubic_pct": -80, "vs_bbr_pct": -60,
                    "note": "'up to', largest for small and medium files"},
    "four_flows": {"vs_reno_pct": -18, "vs_cubic_pct": -10, "vs_bbr_pct": -10},
    "two_ues": {"vs_cubic_pct": -33, "vs_bbr_pct": -30},
    "rtt": "5x (CUBIC) and 10x (Reno) lower average RTT at p90; -55 % vs BBR",
}  # fmt: skip


def one_run(
    bed: UplinkBed, cc: str, flows_spec: list[tuple[int, float]], warm: bool = False
) -> dict[str, Any]:
    """One run of a scenario with every flow on congestion control cc. warm: each flow on
    a persistent connection that went idle (warmed up, then idle longer than its RTO, so
    the kernel restarts its window as after any idle period, RFC 5681 §4.1); durations
    then start at the upload, without the handshake."""
    bed.wait_drained()
    name = bed.sigma.cubic if cc == "sigma" else cc
    sizes = [int(bdp * bed.scale.bdp_bytes) for _, bdp in flows_spec]
    flows = [bed.flow(ue, name) for ue, _ in flows_spec]
    if warm:
        for f in flows:
            f.warm_up()
        time.sleep(max(WARM_IDLE_S, 4 * bed.scale.rtt_s))
        start = time.monotonic()
        for f in flows:
            f.start = start
    senders = [
        threading.Thread(target=f.send, args=(n,), daemon=True)
        for f, n in zip(flows, sizes, strict=True)
    ]
    for s in senders:
        s.start()
    n_ues = len(bed.topo.ues)
    rtt_ms: list[float] = []
    buffer: list[list[float]] = [[] for _ in range(n_ues)]
    t0 = min(f.start for f in flows)
    times: list[float] = []
    deadline = time.monotonic() + 30 + 20 * sum(sizes) / bed.scale.rate_Bps
    try:
        while any(f.end is None for f in flows):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{cc}: flows did not finish")
            for f in flows:
                if f.end is None:
                    rtt_ms.append(tcp_info(f.sock)["rtt_us"] / 1000)
            times.append(round(time.monotonic() - t0, 4))
            for ue in range(n_ues):
                grant = bed.sigma.read_grant(bed.ue_ip(ue))
                buffer[ue].append(grant.buffer_bytes if grant is not None else float("nan"))
            time.sleep(SAMPLE_S)
    finally:
        for f in flows:
            f.close()
    ends = [f.end or 0.0 for f in flows]
    return {
        "duration_s": max(ends) - t0,
        "flow_durations_s": [e - f.start for e, f in zip(ends, flows, strict=True)],
        "received_ok": all(f.received == f.sent for f in flows),
        "rtt_p50_ms": percentile(rtt_ms, 50),
        "rtt_p90_ms": percentile(rtt_ms, 90),
        "buffer_max_bytes": max(max(b) for b in buffer if b),
        "buffer_mean_bytes": sum(sum(b) for b in buffer) / max(1, sum(len(b) for b in buffer)),
        "buffer_series": buffer,
        "sample_times_s": times,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"runs": len(runs)}
    for key in ("duration_s", "rtt_p50_ms", "rtt_p90_ms", "buffer_max_bytes", "buffer_mean_bytes"):
        mean, half = mean_ci95([float(r[key]) for r in runs])
        out[key], out[f"{key}_ci95"] = round(mean, 4), round(half, 4)
    return out


def run(
    runs: int, scenarios: list[str], ccs: tuple[str, ...], scale: Scale,
    sink_window_bdp: float = 0, warm: bool = False, log: Any = print,
) -> Results:  # fmt: skip
    sigma = Sigma.load(PIN_ROOT, f"x{os.getpid() % 100000}")
    results: Results = {
        "scale": scale.as_dict(),
        "sink_window_bdp": sink_window_bdp,
        "warm_connections": warm,
        "published": PUBLISHED,
        "environment_start": {"loadavg": os.getloadavg()},
        "scenarios": {},
    }
    try:
        for n_ues in sorted({n for name, n, _ in SCENARIOS if name in scenarios}):
            bed = UplinkBed(sigma, scale, n_ues)
            if sink_window_bdp:
                bed.open_sink_window(int(sink_window_bdp * scale.bdp_bytes / MSS))
            try:
                bed.wait_for_feed()
                for name, n, spec in SCENARIOS:
                    if name not in scenarios or n != n_ues:
                        continue
                    results["scenarios"][name] = scenario_runs(
                        bed, spec, runs, ccs, log, name, warm
                    )
            finally:
                bed.close()
    finally:
        sigma.close()
    results["environment"] = environment()
    add_reductions(results)
    return results


def scenario_runs(
    bed: UplinkBed, spec: list[tuple[int, float]], runs: int, ccs: tuple[str, ...], log: Any,
    name: str, warm: bool = False,
) -> dict[str, Any]:  # fmt: skip
    by_cc: dict[str, Any] = {}
    raw: dict[str, list[dict[str, Any]]] = {cc: [] for cc in ccs}
    for i in range(runs):
        for cc in ccs:  # interleaved: a load change on the shared host hits every CC
            r = one_run(bed, cc, spec, warm)
            raw[cc].append(r)
            log(
                f"{name} run {i + 1}/{runs} {cc:>5}: {r['duration_s']:.3f} s, RTT p90 "
                f"{r['rtt_p90_ms']:.1f} ms, buffer max {r['buffer_max_bytes'] / 1e3:.0f} kB, "
                f"load {os.getloadavg()[0]:.1f}"
            )
    for cc in ccs:
        by_cc[cc] = summarize(raw[cc])
        by_cc[cc]["all_received"] = all(r["received_ok"] for r in raw[cc])
        by_cc[cc]["durations_s"] = [round(r["duration_s"], 4) for r in raw[cc]]
        by_cc[cc]["duration_median_s"] = round(statistics.median(by_cc[cc]["durations_s"]), 4)
        by_cc[cc]["buffer_series_run1"] = raw[cc][0]["buffer_series"]
        by_cc[cc]["sample_times_run1_s"] = raw[cc][0]["sample_times_s"]
    return {"flows": [{"ue": ue, "size_bdp": bdp} for ue, bdp in spec], "by_cc": by_cc}


def add_reductions(results: Results) -> None:
    """SIGMA's change of the mean duration and RTT p90 against each baseline, in %."""
    for s in results["scenarios"].values():
        by = s["by_cc"]
        if "sigma" not in by:
            continue
        s["sigma_vs"] = {
            cc: {
                "duration_pct": round(100 * (by["sigma"]["duration_s"] / v["duration_s"] - 1), 1),
                "duration_median_pct": round(
                    100 * (by["sigma"]["duration_median_s"] / v["duration_median_s"] - 1), 1
                ),
                "rtt_p90_pct": round(100 * (by["sigma"]["rtt_p90_ms"] / v["rtt_p90_ms"] - 1), 1),
            }
            for cc, v in by.items()
            if cc != "sigma"
        }


def table(results: Results) -> str:
    sc = results["scale"]
    lines = [
        f"scale: NR {sc['prb']} PRB MCS {sc['ul_mcs']}, {sc['rate_mbps']} Mbit/s uplink, "
        f"{2 * sc['one_way_ms']:.0f} ms RTT, BDP {sc['bdp_bytes'] / 1e3:.0f} kB, "
        f"UE buffer {sc['ue_buffer_bytes'] / 1e6:.2f} MB; load at end "
        f"{results['environment']['loadavg_at_end'][0]:.1f} (shared 2-core machine)",
        f"{'scenario':<18} {'cc':>6} {'duration s':>16} {'RTT p90 ms':>16} {'buffer max kB':>16}",
    ]
    for name, s in results["scenarios"].items():
        for cc, v in s["by_cc"].items():
            lines.append(
                f"{name:<18} {cc:>6} {v['duration_s']:>8.3f} ± {v['duration_s_ci95']:<5.3f} "
                f"{v['rtt_p90_ms']:>8.1f} ± {v['rtt_p90_ms_ci95']:<5.1f} "
                f"{v['buffer_max_bytes'] / 1e3:>8.0f} ± {v['buffer_max_bytes_ci95'] / 1e3:<5.0f}"
            )
        for cc, red in s.get("sigma_vs", {}).items():
            lines.append(
                f"{'':<18} sigma vs {cc}: duration {red['duration_pct']:+.1f} % (median "
                f"{red['duration_median_pct']:+.1f} %), RTT p90 {red['rtt_p90_pct']:+.1f} %"
            )
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()

    names = list(results["scenarios"])
    ccs = list(next(iter(results["scenarios"].values()))["by_cc"]) if names else []
    fig, axes = plt.subplots(1, 3, figsize=(17, 5))
    width = 0.8 / max(1, len(ccs))
    for ax, key, label in (
        (axes[0], "duration_s", "flow duration (s)"),
        (axes[1], "rtt_p90_ms", "uplink RTT p90 (ms, sRTT samples)"),
    ):
        for i, cc in enumerate(ccs):
            vals = [results["scenarios"][n]["by_cc"][cc][key] for n in names]
            errs = [results["scenarios"][n]["by_cc"][cc][f"{key}_ci95"] for n in names]
            errs = [0 if e != e else e for e in errs]  # NaN (one run): no bar
            ax.bar([x + i * width for x in range(len(names))], vals, width, yerr=errs,
                   capsize=3, label=cc)  # fmt: skip
        ax.set_xticks([x + width * (len(ccs) - 1) / 2 for x in range(len(names))],
                      [n.replace("_", "\n") for n in names], fontsize=8)  # fmt: skip
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    big = "single_40bdp" if "single_40bdp" in results["scenarios"] else (names[0] if names else "")
    if big:
        for cc in ccs:
            v = results["scenarios"][big]["by_cc"][cc]
            axes[2].plot(v["sample_times_run1_s"], [b / 1e6 for b in v["buffer_series_run1"][0]],
                         label=cc)  # fmt: skip
        axes[2].axhline(results["scale"]["ue_buffer_bytes"] / 1e6, color="gray", ls="--", lw=1,
                        label="buffer limit")  # fmt: skip
        axes[2].set_title(f"UE modem buffer, {big.replace('_', ' ')}, run 1", fontsize=9)
        axes[2].set_xlabel("time since the first connect (s)")
        axes[2].set_ylabel("MB")
        axes[2].legend(fontsize=8)
    sc = results["scale"]
    fig.suptitle(
        f"SIGMA vs Reno/CUBIC/BBR, uplink NR {sc['prb']} PRB {sc['rate_mbps']} Mbit/s, "
        f"RTT {2 * sc['one_way_ms']:.0f} ms; mean ± 95 % CI over "
        f"{next(iter(next(iter(results['scenarios'].values()))['by_cc'].values()))['runs']} runs; "
        f"load {results['environment']['loadavg_at_end'][0]:.1f} (shared host)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.sigma.experiment", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/sigma"))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--scenarios", default=",".join(n for n, _, _ in SCENARIOS))
    parser.add_argument("--ccs", default=",".join(CCS))
    parser.add_argument(
        "--one-way-ms", type=float, default=Scale.one_way_ms,
        help="delay each way; 61.6 gives the research's BDP in segments (~833 MSS, 1.2 MB) "
        "at this uplink's 77.9 Mbit/s, which sets how many RTTs slow start costs",
    )  # fmt: skip
    parser.add_argument(
        "--sink-window-bdp", type=float, default=0,
        help="the sink advertises this many BDPs from its first ACK (route initrwnd): the "
        "window Max Start needs; 0: Linux's default, a window that grows with the data",
    )  # fmt: skip
    parser.add_argument(
        "--warm", action="store_true",
        help="upload on persistent connections that went idle (one byte exchanged, then "
        f"{WARM_IDLE_S:g} s or 4 RTTs of silence); durations start at the upload",
    )  # fmt: skip
    args = parser.parse_args(argv)
    scale = Scale(one_way_ms=args.one_way_ms)
    ccs = tuple(args.ccs.split(","))
    results = run(args.runs, args.scenarios.split(","), ccs, scale, args.sink_window_bdp, args.warm)
    save_results(results, args.out, "sigma", plot, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
