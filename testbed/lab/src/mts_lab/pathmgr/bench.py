"""``make bench-pathmgr``: prediction time per number of paths and the predictor's accuracy.

    python -m mts_lab.pathmgr.bench --out docs/results/pathmgr/predictor


Scenarios are random but reproducible (seeded): per-path LoS capacity 400–1000 Mbit/s, NLoS
50–150 Mbit/s, mean LoS/NLoS times 1–4 s, a random LoS vector, a queue of 0–800 packets and a
load of 0.4–1.2 times the mean capacity, so that the probabilities span (0, 1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from mts_lab import REPO
from mts_lab.pathmgr.montecarlo import simulate
from mts_lab.results import pyplot, save_figure
from path_manager.predictor import PathState, Scenario, Solver, Thresholds, predict

PACKET_BITS = 12_000
THRESHOLDS = Thresholds(high=500.0, low=250.0, horizon=0.200)
PUBLISHED_P90_MS = {1: (2.3, 1.8), 2: (5.2, 4.2), 3: (5.3, 4.4), 4: (9.0, 7.6)}  # CDF, FPT
# A reference for the full model: every phase change up to 4 within H on fine grids.
REFERENCE = Solver(
    full_max_paths=8,
    full_max_transitions=4,
    first_nodes=1024,
    prefix_nodes=(64, 24, 10),
    last_nodes=(64, 24, 10),
    budget=10**9,
)


def random_scenario(n: int, rng: np.random.Generator) -> Scenario:
    paths = tuple(
        PathState(
            capacity_los=rng.uniform(400, 1000) * 1e6 / PACKET_BITS,
            capacity_nlos=rng.uniform(50, 150) * 1e6 / PACKET_BITS,
            to_los=1 / rng.uniform(1, 4),
            to_nlos=1 / rng.uniform(1, 4),
            in_los=bool(rng.random() < 0.5),
        )
        for _ in range(n)
    )
    mean_capacity = sum(
        (p.capacity_los * p.to_los + p.capacity_nlos * p.to_nlos) / (p.to_los + p.to_nlos)
        for p in paths
    )
    return Scenario(paths, mean_capacity * rng.uniform(0.4, 1.2), rng.uniform(0, 800))


def timing(repeat: int, sizes: range, rng: np.random.Generator) -> dict[int, dict[str, Any]]:
    out = {}
    for n in sizes:
        scenarios = [random_scenario(n, rng) for _ in range(repeat)]
        predict(scenarios[0], THRESHOLDS)  # warm the caches
        wall, cpu = [], []
        for s in scenarios:
            started = time.thread_time()
            wall.append(predict(s, THRESHOLDS).seconds * 1e3)
            cpu.append((time.thread_time() - started) * 1e3)
        out[n] = {
            "p50_ms": float(np.percentile(wall, 50)),
            "p90_ms": float(np.percentile(wall, 90)),
            "p99_ms": float(np.percentile(wall, 99)),
            "cpu_p50_ms": float(np.percentile(cpu, 50)),
            "cpu_p90_ms": float(np.percentile(cpu, 90)),
            "model": predict(scenarios[0], THRESHOLDS).model,
        }
        print(
            f"  {n} paths: p90 {out[n]['p90_ms']:.3f} ms wall, {out[n]['cpu_p90_ms']:.3f} ms CPU",
            file=sys.stderr,
            flush=True,
        )
    return out


def accuracy(
    scenarios: int, mc_samples: int, sizes: tuple[int, ...], rng: np.random.Generator
) -> dict[int, dict[str, Any]]:
    """Max/p99 absolute error of the predictor vs the reference, and vs Monte Carlo."""
    out = {}
    for n in sizes:
        vs_reference, vs_mc, full_vs_mc = [], [], []  # full_vs_mc: |full - MC|
        for _ in range(scenarios):
            s = random_scenario(n, rng)
            ours = _four(predict(s, THRESHOLDS))
            reference = _four(predict(s, THRESHOLDS, REFERENCE, transitions=4))
            mc = simulate(s, THRESHOLDS, mc_samples, rng)
            mc4 = np.array([mc.cdf_high, mc.cdf_low, mc.fpt_high, mc.fpt_low])
            vs_reference.append(np.abs(ours - reference))
            vs_mc.append(np.abs(ours - mc4))
            full_vs_mc.append(np.abs(reference - mc4))
        ref_err, mc_err = np.array(vs_reference), np.array(vs_mc)
        out[n] = {
            "model": predict(random_scenario(n, rng), THRESHOLDS).model,
            "vs_full_max": ref_err.max(axis=0).tolist(),
            "vs_full_p99": np.percentile(ref_err, 99, axis=0).tolist(),
            "vs_monte_carlo_max": mc_err.max(axis=0).tolist(),
            "full_vs_monte_carlo_max": float(np.max(full_vs_mc)),
        }
        print(
            f"  {n} paths: max |error| vs full {ref_err.max():.4f}, vs MC {mc_err.max():.4f}",
            file=sys.stderr,
            flush=True,
        )
    return out


def _four(p: Any) -> np.ndarray:
    return np.array([p.cdf_high, p.cdf_low, p.fpt_high, p.fpt_low])


def run_bench(repeat: int, scenarios: int, mc_samples: int, out_dir: Path) -> dict[str, Any]:
    """Timing always; accuracy unless ``scenarios`` is 0 (then the last accuracy is kept)."""
    rng = np.random.default_rng(2022)
    load = os.getloadavg()
    print("prediction time (CDF and FPT together):", file=sys.stderr)
    times = timing(repeat, range(1, 9), rng)
    previous = out_dir / "predictor.json"
    if scenarios > 0 or not previous.exists():
        print("accuracy (P_H, P_L for CDF and FPT):", file=sys.stderr)
        acc = accuracy(max(scenarios, 1), mc_samples, (1, 2, 3, 4), rng)
    else:
        acc = {int(k): v for k, v in json.loads(previous.read_text())["accuracy"].items()}
    result = {
        "command": f"python -m mts_lab.pathmgr.bench --repeat {repeat} --scenarios {scenarios}"
        f" --mc-samples {mc_samples}",
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
        "cpus": os.cpu_count(),
        "timing": times,
        "published_p90_ms_cdf_fpt": PUBLISHED_P90_MS,
        "accuracy": acc,
        "error_columns": ["cdf P_H", "cdf P_L", "fpt P_H", "fpt P_L"],
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "predictor.json").write_text(json.dumps(result, indent=1) + "\n")
    _plot(times, out_dir / "prediction_time.png")
    print(
        f"{'paths':>5} {'model':>8} {'p50 ms':>8} {'p90 ms':>8} {'CPU p90':>8}"
        f" {'published p90 CDF/FPT':>22}"
    )
    for n, t in times.items():
        pub = PUBLISHED_P90_MS.get(n)
        published = f"{pub[0]} / {pub[1]}" if pub else "-"
        print(
            f"{n:>5} {t['model']:>8} {t['p50_ms']:>8.3f} {t['p90_ms']:>8.3f}"
            f" {t['cpu_p90_ms']:>8.3f} {published:>22}"
        )
    print(f"\n{'paths':>5} {'max |err| vs full':>18} {'max |err| vs MC':>16} {'full vs MC':>11}")
    for n, a in acc.items():
        print(
            f"{n:>5} {max(a['vs_full_max']):>18.4f} {max(a['vs_monte_carlo_max']):>16.4f}"
            f" {a['full_vs_monte_carlo_max']:>11.4f}"
        )
    started = time.strftime("%Y-%m-%d %H:%M")
    print(f"\nwritten: {out_dir}/predictor.json, prediction_time.png ({started})", file=sys.stderr)
    return result


def _plot(times: dict[int, dict[str, Any]], path: Path) -> None:
    plt = pyplot()

    n = list(times)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(n, [times[k]["p90_ms"] for k in n], "o-", label="ours, wall p90 (CDF+FPT together)")
    ax.plot(n, [times[k]["cpu_p90_ms"] for k in n], ".--", label="ours, CPU p90")
    pub = sorted(PUBLISHED_P90_MS)
    ax.plot(pub, [PUBLISHED_P90_MS[k][0] for k in pub], "s:", label="published p90, CDF")
    ax.plot(pub, [PUBLISHED_P90_MS[k][1] for k in pub], "^:", label="published p90, FPT")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set(
        xlabel="active paths", ylabel="prediction time (ms)", yscale="log", title="Prediction time"
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pathmgr.bench",
        description="Measure the predictor: wall time p90 over random scenarios per number "
        "of paths (CDF and FPT are computed together), the reduced model's error against the "
        "full model on 3-4 paths, and both against Monte Carlo.",
    )
    parser.add_argument("--repeat", type=int, default=1000, help="predictions per size (1000)")
    parser.add_argument(
        "--scenarios",
        type=int,
        default=100,
        help="accuracy scenarios (100); 0 = timing only, keep the last accuracy results",
    )
    parser.add_argument("--mc-samples", type=int, default=200_000, help="Monte Carlo samples")
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs/results/pathmgr/predictor", help="output dir"
    )
    args = parser.parse_args(argv)
    run_bench(args.repeat, args.scenarios, args.mc_samples, args.out)


if __name__ == "__main__":
    main()
