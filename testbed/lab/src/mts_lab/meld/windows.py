"""The RAN legs' windows around MELD's loss decisions, from saved discrimination runs.

``discrimination_experiment`` samples both RAN legs' sockets in each mode's first run
(``ran_legs``: cwnd, ssthresh, srtt every ~20 ms) and joins each loss decision with them
(``regrowth``: how soon the window was back at the loss's cwnd). This compares such runs
side by side (e.g. the code before and after a change): per saved JSON, CCA and mode, the
kept ssthresh as a share of the window, how many kept losses the window regrew from
before the next loss and how fast, and the RAN leg's srtt; and a plot of run 1's window
and srtt of one flow with its decisions marked.

    uv run python -m mts_lab.meld.windows LABEL=DIR [LABEL=DIR ...] --cca cubic --out PNG
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from mts_lab.meld.bed import percentile
from mts_lab.results import pyplot, save_figure


def window_summary(run: dict[str, Any]) -> dict[str, Any]:
    """What run 1's trace says of one mode: the kept losses' ssthresh / cwnd (median), how
    many regrew to the loss's cwnd before the flow's next loss and their median time, and
    the sampled srtt (median, p90) and cwnd (median) of both legs."""
    kept = [g for g in run.get("regrowth", []) if g["verdict"] == "suppress"]
    back = [g["regrowth_s"] for g in kept if g["regrowth_s"] is not None]
    samples = [s for leg in run.get("ran_legs", {}).values() for s in leg]
    srtts = [s["srtt_ms"] for s in samples if "srtt_ms" in s]
    return {
        "kept": len(kept),
        "kept_ssthresh_share_median": (
            statistics.median(g["ssthresh"] / g["cwnd"] for g in kept) if kept else None
        ),
        "regrown_before_next_loss": len(back),
        "regrowth_s_median": statistics.median(back) if back else None,
        "srtt_ms_median": statistics.median(srtts) if srtts else None,
        "srtt_ms_p90": percentile(srtts, 90) if srtts else None,
        "cwnd_median": statistics.median(s["cwnd"] for s in samples) if samples else None,
    }


def plot(runs: dict[str, dict[str, Any]], cca: str, path: Path) -> None:
    """Per labelled result and mode: run 1's window (cwnd, ssthresh) and srtt of the first
    RAN leg, the loss decisions marked (kept: green, cut: red)."""
    rows = [(label, mode, by_mode[mode][0]) for label, by_mode in runs.items()
            for mode in by_mode]  # fmt: skip
    fig, axes = pyplot().subplots(len(rows), 1, figsize=(12, 3.2 * len(rows)), squeeze=False)
    for ax, (label, mode, run) in zip(axes[:, 0], rows, strict=True):
        port = sorted(run["ran_legs"])[0]
        leg = run["ran_legs"][port]
        ax.plot([s["t"] for s in leg], [s["cwnd"] for s in leg], color="#1f77b4", label="cwnd")
        ax.plot([s["t"] for s in leg], [s.get("ssthresh", float("nan")) for s in leg],
                color="#1f77b4", ls=":", label="ssthresh")  # fmt: skip
        for g in run["regrowth"]:
            if str(g["port"]) == port:
                kept = g["verdict"] == "suppress"
                ax.axvline(g["t_s"], color="#2ca02c" if kept else "#d62728", lw=0.8, alpha=0.7)
        ax.set_ylabel("segments")
        ax.set_ylim(bottom=0)
        right = ax.twinx()
        right.plot([s["t"] for s in leg], [s.get("srtt_ms", float("nan")) for s in leg],
                   color="#ff7f0e", lw=0.8, label="srtt")  # fmt: skip
        right.set_ylabel("srtt, ms", color="#ff7f0e")
        ax.set_title(f"{label}: {cca} {mode}, run 1, RAN leg :{port} "
                     "(green: loss kept, red: loss cut)")  # fmt: skip
        ax.legend(loc="upper left")
    axes[-1, 0].set_xlabel("s since the first sample")
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="LABEL=DIR with a discrimination.json")
    parser.add_argument("--cca", default="cubic")
    parser.add_argument("--out", type=Path, required=True, help="PNG; the JSON beside it")
    args = parser.parse_args()
    runs: dict[str, dict[str, Any]] = {}
    for item in args.results:
        label, _, directory = item.partition("=")
        saved = json.loads((Path(directory) / "discrimination.json").read_text())
        runs[label] = saved["runs"][args.cca]
    summary = {label: {mode: window_summary(rs[0]) for mode, rs in by_mode.items()}
               for label, by_mode in runs.items()}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(runs, args.cca, args.out)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
