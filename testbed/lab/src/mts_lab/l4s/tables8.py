"""Research 001's Tables 8.1-8.5 rebuilt: throughput, delay and loss of one Prague and one
CUBIC flow sharing the emulator's 100 Mbit/s DualPI2 bottleneck (issue 14).

The bed and the run are ``make experiment-l4s``'s (``mts_lab.l4s.experiment.one_run``: base
RTT 60 ms, the delay bit marked at both ends, the observer at the MEC host); each table
changes one thing of the base scenario (Table 8.1), as the research did:

- 8.2: the WAN's reordering (0.001, 0.01, 0.1 % of each direction's packets skip the delay);
- 8.3: the base RTT (30, 15, 5 ms; the research's row labels are lost, its Prague RTTs say
  about 60/30/15/5 ms);
- 8.4: jitter on each WAN direction's delay (± 2, 5, 10 ms uniform, kept in order, as netem
  with ``rate``);
- 8.5: the senders' MSS (1024, 512, 88 B; the research's "application-layer size").

Per flow: MiB, Mbit/s, retransmissions (the research's loss figure), TCP_INFO's RTT and the
delay bit's raw (the research's) and filtered RTT, means over runs with 95 % CIs. Runs go
round-robin over the scenarios, so load drifts spread over all of them.

    uv run python -m mts_lab.l4s.tables8 --out docs/results/l4s [--runs 5 --seconds 40]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mec_l4s.efm import Technique
from mts_lab.l4s.bed import WanLine
from mts_lab.l4s.experiment import (
    MIB,
    earlier_runs,
    experiment_arguments,
    loaded_prague,
    mean_ci,
    one_run,
    utc_now,
)
from mts_lab.results import Results, pyplot, save_results

CCAS = ("prague", "cubic")


@dataclass(frozen=True)
class Scenario:
    table: str
    label: str
    delay_ms: float = 30.0  # one way: base RTT 60 ms
    reorder_pct: float = 0.0
    jitter_ms: float = 0.0
    mss: int = 0  # 0: the path's (1448 B with timestamps)


BASE = Scenario("8.1", "base")
SCENARIOS = (
    BASE,
    *(Scenario("8.2", f"{p} %", reorder_pct=p) for p in (0.001, 0.01, 0.1)),
    *(Scenario("8.3", f"{2 * d:g} ms", delay_ms=d) for d in (15.0, 7.5, 2.5)),
    *(Scenario("8.4", f"{j:g} ms", jitter_ms=j) for j in (2.0, 5.0, 10.0)),
    *(Scenario("8.5", f"{m} B", mss=m) for m in (1024, 512, 88)),
)

# research 001 (one 60 s run each, delay bit): per CCA (MiB, delay-bit RTT mean ms, retx);
# the base row repeats in every table there. Table 8.4's Prague RTTs are a copy of 8.3's
# (the digest: a copy error), left out.
PUBLISHED: dict[str, dict[str, tuple[float, float | None, float]]] = {
    "8.1/base": {"prague": (375, 60.4, 0), "cubic": (331, 70.1, 15)},
    "8.2/0.001 %": {"prague": (361, 60.4, 0), "cubic": (347, 70.5, 14)},
    "8.2/0.01 %": {"prague": (256, 60.6, 276), "cubic": (405, 65.2, 17)},
    "8.2/0.1 %": {"prague": (111, 62.3, 511), "cubic": (419, 63.0, 436)},
    "8.3/30 ms": {"prague": (466, 31.0, 0), "cubic": (238, 42.4, 29)},
    "8.3/15 ms": {"prague": (466, 16.4, 0), "cubic": (243, 28.4, 35)},
    "8.3/5 ms": {"prague": (426, 6.4, 0), "cubic": (287, 19.7, 59)},
    "8.4/2 ms": {"prague": (430, None, 0), "cubic": (269, 67.8, 12)},
    "8.4/5 ms": {"prague": (298, None, 0), "cubic": (396, 70.4, 15)},
    "8.4/10 ms": {"prague": (239, None, 0), "cubic": (410, 71.6, 8)},
    "8.5/1024 B": {"prague": (377, 60.3, 0), "cubic": (333, 67.4, 28)},
    "8.5/512 B": {"prague": (288, 60.2, 8), "cubic": (405, 64.8, 29)},
    "8.5/88 B": {"prague": (65, 60.8, 1595), "cubic": (134, 60.7, 430)},
}
PUBLISHED_SECONDS = 60


def key(s: Scenario) -> str:
    return f"{s.table}/{s.label}"


def run_all(
    args: argparse.Namespace,
    scenarios: list[Scenario],
    after_round: Callable[[list[dict[str, Any]]], None],
    earlier: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Round-robin over the scenarios; ``after_round`` gets the runs so far (``earlier``
    ones first) after each round (the results are written then: a run stopped early keeps
    its complete rounds)."""
    runs: list[dict[str, Any]] = list(earlier or [])
    first = 1 + max((r["run"] for r in runs), default=-1)
    with loaded_prague() as prague:
        for run in range(first, first + args.runs):
            for s in scenarios:
                line = WanLine.create(
                    s.delay_ms, rate_mbps=args.rate_mbps, queue="dualpi2", prefix="l4t",
                    reorder_pct=s.reorder_pct, jitter_ms=s.jitter_ms,
                )  # fmt: skip
                try:
                    result = one_run(line, prague, Technique.DELAY, args.seconds, mss=s.mss)
                finally:
                    line.down()
                row = {cca: _flow(result[cca], args.seconds) for cca in CCAS}
                when = {"load": os.getloadavg()[0], "utc": utc_now()}
                runs.append({"scenario": key(s), "run": run} | when | row)
                print(f"run {run} {key(s)}: " + ", ".join(
                    f"{c} {row[c]['mbit_s']:.1f} Mbit/s {row[c]['retrans']} retx" for c in CCAS
                ), flush=True)  # fmt: skip
            after_round(runs)
    return runs


def _flow(r: dict[str, Any], seconds: float) -> dict[str, Any]:
    """What Tables 8.x report of one flow in one run."""
    return {
        "mib": r["mib"],
        "mbit_s": r["mib"] * MIB * 8 / seconds / 1e6,
        "retrans": r["retrans"],
        "tcp_info_mean_ms": r["truth"].get("mean_ms"),
        "tcp_info_std_ms": r["truth"].get("std_ms"),
        "delay_raw_mean_ms": r["raw"].get("mean_ms"),
        "delay_filtered_mean_ms": r["filtered"].get("mean_ms"),
        # for Tables 7.2/7.3 (mts_lab.l4s.reorder): these runs are their delay-bit rows
        "delay_raw_std_ms": r["raw"].get("std_ms"),
        "delay_filtered_std_ms": r["filtered"].get("std_ms"),
        "delay_raw_vs_tcp_p90_ms": r["raw"].get("vs_tcp_p90_ms"),
        "delay_filtered_vs_tcp_p90_ms": r["filtered"].get("vs_tcp_p90_ms"),
        "delay_filtered_abs_error_p90_ms": r["filtered"].get("abs_error_p90_ms"),
    }


def aggregate(runs: list[dict[str, Any]], scenarios: list[Scenario]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in scenarios:
        rows = [r for r in runs if r["scenario"] == key(s)]
        entry: dict[str, Any] = {"scenario": asdict(s), "runs": len(rows)}
        for cca in CCAS:
            fields = rows[-1][cca].keys() if rows else ()  # the newest runs' (a field added)
            entry[cca] = {
                f: list(mean_ci([v for r in rows if (v := r[cca].get(f)) is not None]))
                for f in fields
            }
            pub = PUBLISHED.get(key(s), {}).get(cca)
            if pub is not None:
                mib, rtt, retx = pub
                entry[cca]["published"] = {
                    "mib": mib,
                    "mbit_s": mib * MIB * 8 / PUBLISHED_SECONDS / 1e6,
                    "delay_rtt_mean_ms": rtt,
                    "retrans": retx,
                }
        out[key(s)] = entry
    return out


def table(results: Results) -> str:
    lines = [
        f"L4S Tables 8.1-8.5 rebuilt: {results['runs']} run(s) x {results['seconds']} s per "
        f"scenario (published: one {PUBLISHED_SECONDS} s run), load before "
        f"{results['load_before']}, after {results['load_after']}",
        f"{'table/level':16} {'cca':7} {'Mbit/s':>12} {'retx':>14} {'TCP_INFO ms':>12} "
        f"{'delay raw ms':>13} {'filtered':>9}  published (Mbit/s, delay RTT, retx)",
    ]

    def f(v: list[float], digits: int = 1) -> str:
        return f"{v[0]:.{digits}f}±{v[1]:.{digits}f}" if v[1] == v[1] else f"{v[0]:.{digits}f}"

    for name, entry in results["tables"].items():
        for cca in CCAS:
            row = entry[cca]
            pub = row.get("published")
            published = "-"
            if pub is not None:
                rtt = "-" if pub["delay_rtt_mean_ms"] is None else f"{pub['delay_rtt_mean_ms']}"
                published = f"{pub['mbit_s']:.1f}, {rtt}, {pub['retrans']}"
            lines.append(
                f"{name:16} {cca:7} {f(row['mbit_s']):>12} {f(row['retrans'], 0):>14} "
                f"{f(row['tcp_info_mean_ms']):>12} {f(row['delay_raw_mean_ms']):>13} "
                f"{row['delay_filtered_mean_ms'][0]:>9.1f}  {published}"
            )
    lines.append("(mean ± 95 % CI half-width over runs; Mbit/s = bytes received / run length)")
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()
    tables = sorted({n.split("/")[0] for n in results["tables"]})
    fig, axes = plt.subplots(2, len(tables), figsize=(3.6 * len(tables), 7), sharey="row",
                             squeeze=False)  # fmt: skip
    for col, t in enumerate(tables):
        # the base first when it was run (not with --no-base)
        base = [n for n in results["tables"] if n == "8.1/base"]
        names = base + [n for n in results["tables"] if n.startswith(f"{t}/")] * (t != "8.1")
        xs = range(len(names))
        for cca, style, colour in (("prague", "-o", "C0"), ("cubic", "--s", "C1")):
            for ax, field_, pub_field in (
                (axes[0][col], "mbit_s", "mbit_s"),
                (axes[1][col], "delay_raw_mean_ms", "delay_rtt_mean_ms"),
            ):
                vals = [results["tables"][n][cca][field_] for n in names]
                ax.errorbar(xs, [v[0] for v in vals],
                            yerr=[v[1] if v[1] == v[1] else 0 for v in vals],
                            fmt=style, color=colour, label=cca, capsize=3)  # fmt: skip
                pubs = [results["tables"][n][cca].get("published", {}).get(pub_field)
                        for n in names]  # fmt: skip
                ax.scatter([x for x, p in zip(xs, pubs, strict=True) if p is not None],
                           [p for p in pubs if p is not None], marker="x", color=colour,
                           s=60, zorder=3)  # fmt: skip
        for ax in (axes[0][col], axes[1][col]):
            ax.set_xticks(list(xs), [n.split("/")[1] for n in names], fontsize=8)
        axes[0][col].set_title(f"Table {t}")
    axes[0][0].set_ylabel("throughput (Mbit/s)")
    axes[1][0].set_ylabel("delay-bit RTT, raw (ms)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle("Prague + CUBIC through the emulator's DualPI2 (x: published, one 60 s run)")
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = experiment_arguments(__doc__.split("\n\n")[0], 40.0)
    parser.add_argument(
        "--only", help="comma-separated tables (e.g. 8.1,8.3); default all", default=""
    )
    parser.add_argument(
        "--no-base", action="store_true", help="without the base scenario (unless in --only)"
    )
    parser.add_argument(
        "--resume", action="store_true",
        help="add to the runs in --out's tables-8.json (same run length and rate), so a "
        "sweep can be split across measurement-lock holds",
    )  # fmt: skip
    args = parser.parse_args()
    wanted = {t for t in args.only.split(",") if t}
    # the base scenario is every table's first row
    with_base = not args.no_base or "8.1" in wanted
    scenarios = [
        s for s in SCENARIOS if (not wanted or s.table in wanted or s is BASE) and
        (s is not BASE or with_base)
    ]  # fmt: skip
    earlier, holds = earlier_runs(args, "tables-8") if args.resume else ([], [])
    hold = {"load_before": [round(x, 1) for x in os.getloadavg()],
            "utc_start": utc_now()}  # fmt: skip

    def save(runs: list[dict[str, Any]]) -> None:
        hold["load_after"] = [round(x, 1) for x in os.getloadavg()]
        all_holds = [*holds, hold]
        done = {r["scenario"] for r in runs}
        results: Results = {
            "runs": max(sum(r["scenario"] == n for r in runs) for n in done),
            "seconds": args.seconds,
            "rate_mbps": args.rate_mbps,
            "queue": "dualpi2",
            "technique": "delay",
            "load_before": all_holds[0]["load_before"],
            "load_after": hold["load_after"],
            "holds": all_holds,
            "per_run": runs,
            "tables": aggregate(runs, [s for s in SCENARIOS if key(s) in done]),
        }
        save_results(results, args.out, "tables-8", plot, table)

    run_all(args, scenarios, save, earlier)


if __name__ == "__main__":
    main()
