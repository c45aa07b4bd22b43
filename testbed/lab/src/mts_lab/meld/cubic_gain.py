"""Why MELD-overflow gains no goodput over CUBIC, measured (issue 12).

Two discrimination runs of the same cell (``discrimination_experiment``, modes
interleaved within each): WITH its residual radio loss (``off`` and ``meld-overflow``) and
WITHOUT it (``lte-25prb-meld-discrimination-no-radio-loss.yaml``: the same CQI-3 bursts,
HARQ and shared 120 kB RLC buffer, ``loss`` 0; mode ``off``). Per CCA:

- **what radio losses cost the CCA without MELD**: goodput and RTT p90 of ``off`` without
  the loss minus ``off`` with it (a perfect discriminator that kept every radio loss and
  nothing more could gain at most this at the CCA's own queue), Welch 95 % CI;
- **what MELD-overflow gains**: its paired goodput and RTT p90 over ``off`` (same runs);
- **why**, from run 1's decision log and RAN-leg samples (``ss``): the window a radio loss
  leaves (ssthresh / cwnd at the loss) under ``off`` and under MELD-overflow's drain (cwnd ·
  RTT_min / srtt), srtt / RTT_min at the loss, the time to the flow's next loss, and for
  CUBIC where its growth lies: the cubic curve's slope at the start of an epoch, 3·C·K²
  (K = ∛(W_max·(1−β)/C), C = 0.4, β = 717/1024, the kernel's), against the Reno-friendly
  estimate's 1 segment per 1.89 windows acked (0.53 per RTT), and the growth measured
  between a loss and the next.

    uv run python -m mts_lab.meld.cubic_gain --with-loss DIR --without-loss DIR --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from mts_lab.meld.bed import mean_ci95
from mts_lab.results import pyplot, save_figure, save_results

CUBIC_C = 0.4  # segments / s^3 (the kernel's bic_scale 41 / 1024 * 10)
CUBIC_BETA = 717 / 1024
# the Reno-friendly estimate: +1 segment per cwnd * beta_scale / 8 ACKed segments, with the
# kernel's integer beta_scale = 8 * (1024 + 717) / 3 / (1024 - 717) = 15 (tcp_cubic.c)
RENO_FRIENDLY_PER_RTT = 8 / (8 * (1024 + 717) // 3 // (1024 - 717))


def welch_diff(a: list[float], b: list[float]) -> tuple[float, float]:
    """mean(a) - mean(b) and the half-width of its 95 % CI (Welch's t)."""
    from scipy import stats

    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return statistics.fmean(a) - statistics.fmean(b), float(stats.t.ppf(0.975, dof)) * (
        va + vb
    ) ** 0.5


def _ci(values: list[float], digits: int = 3) -> dict[str, float]:
    mean, ci = mean_ci95(values)
    return {"mean": round(mean, digits), "ci95": round(ci, digits)}


def arm_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "goodput_mbps": _ci([d["goodput_mbps"] for d in runs]),
        "rtt_ms_p90": _ci([d["rtt_ms_p90"] for d in runs]),
        "radio_drops_per_run": _ci([d["drops"].get("radio", 0) for d in runs], 1),
        "overflow_drops_per_run": _ci([d["drops"].get("overflow", 0) for d in runs], 1),
        "runs": len(runs),
        "loadavg_1min": [
            min(d["loadavg_1min"] for d in runs),
            max(d["loadavg_1min"] for d in runs),
        ],
    }


def _minrtt_at(samples: list[dict[str, float]], t: float) -> float | None:
    before = [s["minrtt_ms"] for s in samples if s["t"] <= t and "minrtt_ms" in s]
    return before[-1] if before else None


def _growth_per_rtt(samples: list[dict[str, float]], loss: dict[str, Any]) -> float | None:
    """Segments per RTT the window grew from the loss's recovery to the flow's next loss
    (first to last sample after 2 srtt, the recovery, and before the next loss)."""
    srtt_s = float(loss["srtt_ms"]) / 1e3
    end = float(loss["t_s"]) + float(loss["next_loss_s"] or 0.0)
    window = [s for s in samples if loss["t_s"] + 2 * srtt_s <= s["t"] < end]
    if len(window) < 3 or window[-1]["t"] - window[0]["t"] < 3 * srtt_s:
        return None
    rtts = (window[-1]["t"] - window[0]["t"]) / srtt_s
    return (window[-1]["cwnd"] - window[0]["cwnd"]) / rtts


def loss_anatomy(run: dict[str, Any], cca: str) -> dict[str, Any]:
    """From a traced run: per radio / congestion episode, what the loss did to the window."""
    out: dict[str, Any] = {}
    for truth in ("radio", "congestion"):
        losses = [g for g in run.get("regrowth", []) if g.get("truth") == truth and g["cwnd"]]
        if not losses:
            continue
        legs = run["ran_legs"]
        queue = [
            g["srtt_ms"] / m for g in losses if (m := _minrtt_at(legs[str(g["port"])], g["t_s"]))
        ]
        nexts = [g["next_loss_s"] for g in losses if g["next_loss_s"] is not None]
        growth = [x for g in losses if (x := _growth_per_rtt(legs[str(g["port"])], g)) is not None]
        row: dict[str, Any] = {
            "episodes": len(losses),
            "verdicts": sorted({g["verdict"] for g in losses}),
            "ssthresh_over_cwnd_median": round(
                statistics.median(g["ssthresh"] / g["cwnd"] for g in losses), 3
            ),
            "cwnd_median": statistics.median(g["cwnd"] for g in losses),
            "srtt_over_minrtt_median": round(statistics.median(queue), 3) if queue else None,
            "next_loss_s_median": round(statistics.median(nexts), 3) if nexts else None,
            "growth_segments_per_rtt_median": round(statistics.median(growth), 3)
            if growth
            else None,
        }
        if cca == "cubic":
            ks = [(g["cwnd"] * (1 - CUBIC_BETA) / CUBIC_C) ** (1 / 3) for g in losses]
            slopes = [
                3 * CUBIC_C * k * k * g["srtt_ms"] / 1e3 for k, g in zip(ks, losses, strict=True)
            ]
            row["cubic_K_s_median"] = round(statistics.median(ks), 3)
            row["next_loss_before_K_share"] = (
                round(sum(1 for n, k in zip(nexts, ks, strict=False) if n < k) / len(nexts), 3)
                if nexts
                else None
            )
            row["cubic_slope_segments_per_rtt_median"] = round(statistics.median(slopes), 3)
            row["reno_friendly_segments_per_rtt"] = round(RENO_FRIENDLY_PER_RTT, 3)
        out[truth] = row
    return out


def analyse(with_loss: dict[str, Any], without_loss: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cca, modes in with_loss["runs"].items():
        off, overflow = modes["off"], modes.get("meld-overflow", [])
        clean = without_loss["runs"][cca]["off"]
        cost_g = welch_diff([d["goodput_mbps"] for d in clean], [d["goodput_mbps"] for d in off])
        cost_r = welch_diff([d["rtt_ms_p90"] for d in clean], [d["rtt_ms_p90"] for d in off])
        base = statistics.fmean(d["goodput_mbps"] for d in off)
        row: dict[str, Any] = {
            "arms": {"off, no radio loss": arm_summary(clean), "off": arm_summary(off)},
            "radio_loss_cost_to_off": {
                "goodput_mbps": {
                    "diff": round(cost_g[0], 3),
                    "ci95": round(cost_g[1], 3),
                    "percent_of_off": round(100 * cost_g[0] / base, 1),
                },
                "rtt_ms_p90": {"diff": round(cost_r[0], 2), "ci95": round(cost_r[1], 2)},
            },
            "anatomy": {"off": loss_anatomy(off[0], cca)},
        }
        if overflow:
            row["arms"]["meld-overflow"] = arm_summary(overflow)
            paired = [
                b["goodput_mbps"] - a["goodput_mbps"] for a, b in zip(off, overflow, strict=True)
            ]
            paired_rtt = [
                b["rtt_ms_p90"] - a["rtt_ms_p90"] for a, b in zip(off, overflow, strict=True)
            ]
            row["meld_overflow_gain"] = {
                "goodput_mbps": _ci(paired),
                "percent_of_off": round(100 * statistics.fmean(paired) / base, 1),
                "rtt_ms_p90": _ci(paired_rtt, 2),
            }
            row["anatomy"]["meld-overflow"] = loss_anatomy(overflow[0], cca)
        out[cca] = row
    return out


def table(results: dict[str, Any]) -> str:
    lines = []
    for cca, row in results["ccas"].items():
        for arm, s in row["arms"].items():
            g, r = s["goodput_mbps"], s["rtt_ms_p90"]
            lines.append(
                f"{cca:<6} {arm:<19} goodput {g['mean']:6.2f} ± {g['ci95']:<5.2f} "
                f"RTT p90 {r['mean']:6.1f} ± {r['ci95']:<5.1f} radio drops/run "
                f"{s['radio_drops_per_run']['mean']:6.1f} overflow/run "
                f"{s['overflow_drops_per_run']['mean']:6.1f}"
            )
        c = row["radio_loss_cost_to_off"]
        lines.append(
            f"{cca:<6} radio losses cost off {c['goodput_mbps']['diff']:+.2f} ± "
            f"{c['goodput_mbps']['ci95']:.2f} Mbit/s "
            f"({c['goodput_mbps']['percent_of_off']:+.1f} %),"
            f" RTT p90 {c['rtt_ms_p90']['diff']:+.1f} ± {c['rtt_ms_p90']['ci95']:.1f} ms"
        )
        if g := row.get("meld_overflow_gain"):
            lines.append(
                f"{cca:<6} MELD-overflow over off (paired): {g['goodput_mbps']['mean']:+.2f} ± "
                f"{g['goodput_mbps']['ci95']:.2f} Mbit/s ({g['percent_of_off']:+.1f} %), RTT p90 "
                f"{g['rtt_ms_p90']['mean']:+.1f} ± {g['rtt_ms_p90']['ci95']:.1f} ms"
            )
        for mode, by_truth in row["anatomy"].items():
            for truth, a in by_truth.items():
                lines.append(f"{cca:<6} {mode:<13} {truth:<10} " + json.dumps(a))
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    ccas = list(results["ccas"])
    fig, axes = pyplot().subplots(len(ccas), 2, figsize=(13, 4.2 * len(ccas)), squeeze=False)
    for (left, right), cca in zip(axes, ccas, strict=True):
        row = results["ccas"][cca]
        for arm, s in row["arms"].items():
            g, r = s["goodput_mbps"], s["rtt_ms_p90"]
            left.errorbar(
                r["mean"], g["mean"], xerr=r["ci95"], yerr=g["ci95"], fmt="o", capsize=5, label=arm
            )
        left.set(
            xlabel="ping RTT p90, ms (mean of runs, 95 % CI)",
            ylabel="goodput, Mbit/s",
            title=f"{cca}: with and without residual radio loss",
        )
        left.legend(fontsize=8)
        labels, depth = [], []
        for mode, by_truth in row["anatomy"].items():
            for truth, a in by_truth.items():
                labels.append(f"{mode}\n{truth} ({a['episodes']})")
                depth.append(a["ssthresh_over_cwnd_median"])
        right.bar(range(len(depth)), depth, color="#1f77b4")
        right.axhline(
            CUBIC_BETA if cca == "cubic" else 0.5,
            color="k",
            ls="--",
            lw=0.8,
            label=f"{cca}'s own β",
        )
        right.set_xticks(range(len(labels)), labels, fontsize=8)
        right.set(
            ylim=(0, 1),
            ylabel="ssthresh / cwnd at the loss (median, run 1)",
            title=f"{cca}: the window a loss leaves",
        )
        right.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--with-loss", type=Path, required=True, help="a discrimination.json's dir")
    parser.add_argument("--without-loss", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with_loss = json.loads((args.with_loss / "discrimination.json").read_text())
    without = json.loads((args.without_loss / "discrimination.json").read_text())
    results = {
        "with_loss": str(args.with_loss),
        "without_loss": str(args.without_loss),
        "ccas": analyse(with_loss, without),
    }
    save_results(results, args.out, "gain", plot, table)


if __name__ == "__main__":
    main()
