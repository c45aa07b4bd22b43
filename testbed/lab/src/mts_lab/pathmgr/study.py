"""The simulation study (``make experiment-pathmgr-sim``): T_R sweep, Table 4.1, delay CDFs, plots.

python -m mts_lab.pathmgr.study --runs 100 --workers 2 --out docs/results/pathmgr/simulation
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from mts_lab import REPO
from mts_lab.pathmgr.simulate import DELAY_BINS, RunResult, SimSetup, run_once, settings_for
from mts_lab.results import pyplot
from path_manager.control import ControlMode, ControlSettings

# Published reactive-triggered path changes per run, by setup (SimSetup.published):
# Table 4.1, the simulation study (mean of 100 runs); Table 7.2, the emulation (one run each).
PUBLISHED_REACTIVE = {
    "table-4.1": {
        "cdf+r": {0.025: 9.14, 0.050: 6.72, 0.100: 5.43},
        "fpt+r": {0.025: 8.86, 0.050: 6.59, 0.100: 5.26},
    },
    "table-7.2": {"cdf+r": {0.050: 17.0}, "fpt+r": {0.050: 8.0}},
}


@dataclass(frozen=True)
class Task:
    mode: ControlMode
    reactive_guard: float
    seed: int
    keep_series: bool

    @property
    def key(self) -> str:
        return config_key(self.mode, self.reactive_guard)


def config_key(mode: ControlMode, guard: float) -> str:
    return f"{mode.value}@{guard * 1e3:.0f}ms" if mode.reactive_backup else mode.value


def tasks(runs: int, guards: list[float], first_seed: int = 1) -> list[Task]:
    out = []
    for seed in range(first_seed, first_seed + runs):
        keep = seed == first_seed
        for mode in (ControlMode.REACTIVE, ControlMode.CDF, ControlMode.FPT):
            out.append(Task(mode, guards[0], seed, keep))
        for guard in guards:
            for mode in (ControlMode.CDF_R, ControlMode.FPT_R):
                out.append(Task(mode, guard, seed, keep and guard == guards[0]))
    return out


def _run(task: Task, setup: SimSetup, base: ControlSettings) -> tuple[Task, RunResult]:
    settings = settings_for(task.mode, task.reactive_guard, base)
    return task, run_once(setup, settings, task.seed, keep_series=task.keep_series)


def run_study(
    setup: SimSetup,
    base: ControlSettings,
    runs: int,
    guards: list[float],
    out_dir: Path,
    *,
    workers: int = 1,
    checkpoint_every: int = 90,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, Any]:
    todo = tasks(runs, guards)
    results: dict[str, list[RunResult]] = {}
    started = time.monotonic()
    done = 0

    def collect(task: Task, result: RunResult) -> None:
        nonlocal done
        done += 1
        results.setdefault(task.key, []).append(result)
        elapsed = time.monotonic() - started
        eta = elapsed / done * (len(todo) - done)
        if checkpoint_every and done % checkpoint_every == 0 and done < len(todo):
            _write(summarize(setup, base, runs, guards, results), out_dir, plots=False)
        progress(
            f"[{done}/{len(todo)}] {task.key:<14} seed {task.seed:<3} reactive changes"
            f" {result.reactive_changes:<3} loss {result.loss_fraction:.4f}"
            f"  elapsed {elapsed:5.0f} s, eta {eta:5.0f} s"
        )

    if workers <= 1:
        for task in todo:
            collect(*_run(task, setup, base))
    else:
        with ProcessPoolExecutor(workers) as pool:
            futures = [pool.submit(_run, task, setup, base) for task in todo]
            for future in as_completed(futures):
                collect(*future.result())

    summary = summarize(setup, base, runs, guards, results)
    _write(summary, out_dir, plots=True)
    return summary


def _write(summary: dict[str, Any], out_dir: Path, *, plots: bool) -> None:
    """The JSON (also as a checkpoint while the study runs) and, at the end, the plots."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary["complete"] = plots
    (out_dir / "simulation.json").write_text(json.dumps(summary, indent=1) + "\n")
    if plots:
        plot_study(summary, out_dir)


def summarize(
    setup: SimSetup,
    base: ControlSettings,
    runs: int,
    guards: list[float],
    results: dict[str, list[RunResult]],
) -> dict[str, Any]:
    configs: dict[str, Any] = {}
    for key, rs in sorted(results.items()):
        rs.sort(key=lambda r: r.seed)
        reactive = np.array([r.reactive_changes for r in rs], dtype=float)
        histogram = np.sum([r.delay_histogram for r in rs], axis=0)
        loss = float(np.mean([r.loss_fraction for r in rs]))
        # Share of all virtual packets (delivered, lost or still queued) delivered within x.
        samples = math.ceil(setup.duration / setup.delay_sample_step)
        cdf = np.cumsum(histogram) / (len(rs) * samples)
        configs[key] = {
            "mode": rs[0].mode,
            "reactive_guard_s": rs[0].reactive_guard,
            "runs": len(rs),
            "reactive_changes_mean": float(reactive.mean()),
            "reactive_changes_std": float(reactive.std(ddof=1)) if len(rs) > 1 else 0.0,
            "predictive_changes_mean": float(np.mean([r.predictive_changes for r in rs])),
            "predictive_controls_mean": float(np.mean([r.predictive_controls for r in rs])),
            "discarded_predictions_mean": float(np.mean([r.discarded_predictions for r in rs])),
            "mean_active_paths": float(np.mean([r.mean_active_paths for r in rs])),
            "loss_fraction": loss,
            "delay_quantiles_s": {
                q: _quantile(cdf, float(q)) for q in ("0.5", "0.99", "0.995", "0.999")
            },
            "share_delayed_over": {
                f"{ms}ms": float(1 - cdf[np.searchsorted(DELAY_BINS[1:], ms / 1e3)] - loss)
                for ms in (1, 10, 100)
            },
            "delay_cdf": cdf.tolist(),
            "published_reactive_changes": PUBLISHED_REACTIVE[setup.published]
            .get(rs[0].mode, {})
            .get(round(rs[0].reactive_guard, 3)),
            "example_run": next((r.series for r in rs if r.series is not None), None),
        }
    return {
        "setup": asdict(setup),
        "control": {k: str(v) for k, v in asdict(base).items()},
        "runs": runs,
        "reactive_guards_s": guards,
        "delay_bin_edges_s": DELAY_BINS.tolist(),
        "configs": configs,
        "published_reactive_changes": {setup.published: PUBLISHED_REACTIVE[setup.published]},
        "cpu": os.cpu_count(),
    }


def _quantile(cdf: np.ndarray, q: float) -> float | None:
    """Smallest bin edge where the CDF (loss counted as never delivered) reaches q."""
    index = int(np.searchsorted(cdf, q))
    return None if index >= len(cdf) else float(DELAY_BINS[index + 1])


def table_lines(summary: dict[str, Any]) -> list[str]:
    """Table 4.1 beside ours, and per-scheme delay and loss."""
    configs = summary["configs"]
    source = summary["setup"]["published"].replace("table-", "Table ")
    lines = [f"reactive-triggered path changes per run (mean ± std; published {source})"]
    lines.append(
        f"{'scheme':<8}"
        + "".join(f"{f'T_R={g * 1e3:.0f} ms':>24}" for g in summary["reactive_guards_s"])
    )
    for mode in (ControlMode.CDF_R, ControlMode.FPT_R):
        row = f"{mode.value:<8}"
        for g in summary["reactive_guards_s"]:
            c = configs.get(config_key(mode, g))
            if c is None:
                row += f"{'-':>24}"
                continue
            pub = c["published_reactive_changes"]
            cell = f"{c['reactive_changes_mean']:.2f} ± {c['reactive_changes_std']:.2f}"
            cell += f" ({pub})" if pub is not None else ""
            row += f"{cell:>24}"
        lines.append(row)
    lines.append("")
    lines.append(
        f"{'config':<14}{'paths':>7}{'changes':>9}{'reactive':>9}{'loss':>9}"
        f"{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}"
    )
    for key, c in configs.items():
        q = c["delay_quantiles_s"]
        lines.append(
            f"{key:<14}{c['mean_active_paths']:>7.2f}"
            f"{c['predictive_changes_mean'] + c['reactive_changes_mean']:>9.1f}"
            f"{c['reactive_changes_mean']:>9.2f}{c['loss_fraction']:>9.4f}"
            + "".join(_ms(q[k]) for k in ("0.5", "0.99"))
            + f"{_ms(q['0.999']):>10}"
        )
    return lines


def _ms(value: float | None) -> str:
    return f"{'loss':>9}" if value is None else f"{value * 1e3:>9.2f}"


def plot_study(summary: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()

    edges = np.array(summary["delay_bin_edges_s"])[1:]
    configs = summary["configs"]
    guards = summary["reactive_guards_s"]
    source = summary["setup"]["published"]
    published = PUBLISHED_REACTIVE[source]
    written = []

    fig, (full, top) = plt.subplots(1, 2, figsize=(12, 4.5))
    first = guards[0]
    for mode in ControlMode:
        c = configs.get(config_key(mode, first))
        if c is None:
            continue
        for ax in (full, top):
            ax.step(edges * 1e3, c["delay_cdf"], where="post", label=config_key(mode, first))
    full.set(
        xscale="log",
        xlabel="queueing delay (ms)",
        ylabel="CDF (loss never arrives)",
        title=f"Delay CDF, {summary['runs']} runs",
    )
    top.set(xscale="log", ylim=(0.97, 1.0), xlabel="queueing delay (ms)", title="Top 3 %")
    full.legend(fontsize=8)
    full.grid(alpha=0.3)
    top.grid(alpha=0.3)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "delay_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in (ControlMode.CDF_R, ControlMode.FPT_R):
        for g in guards:
            c = configs.get(config_key(mode, g))
            if c is not None:
                ax.step(edges * 1e3, c["delay_cdf"], where="post", label=config_key(mode, g))
        c = configs.get(config_key(mode.pure, first))
        if c is not None:
            ax.step(edges * 1e3, c["delay_cdf"], where="post", linestyle="--", label=mode.pure)
    ax.set(
        xscale="log",
        ylim=(0.97, 1.0),
        xlabel="queueing delay (ms)",
        ylabel="CDF",
        title="T_R sweep: top of the delay CDF",
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "tr_sweep_cdf.png"))

    fig, ax = plt.subplots(figsize=(7, 4.5))
    width = 0.2
    x = np.arange(len(guards))
    for i, mode in enumerate((ControlMode.CDF_R, ControlMode.FPT_R)):
        ours = [
            configs.get(config_key(mode, g), {}).get("reactive_changes_mean", 0) for g in guards
        ]
        pub = [published.get(mode.value, {}).get(round(g, 3), 0) for g in guards]
        ax.bar(x + (2 * i - 1.5) * width, ours, width, label=f"{mode.value} (ours)")
        ax.bar(x + (2 * i - 0.5) * width, pub, width, label=f"{mode.value} (published)", alpha=0.5)
    ax.set_xticks(x, [f"{g * 1e3:.0f} ms" for g in guards])
    ax.set(
        xlabel="T_R",
        ylabel="reactive path changes per run",
        title=source.replace("table-", "Table "),
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "reactive_triggers.png"))

    bits = 8 * summary["setup"]["packet_bytes"]
    written.append(plot_example_runs(configs, first, bits, out_dir / "single_run.png"))
    return written


def plot_example_runs(
    configs: dict[str, Any], guard: float, bits_per_packet: float, path: Path
) -> Path:
    import matplotlib.pyplot as plt

    modes = [m for m in ControlMode if configs.get(config_key(m, guard), {}).get("example_run")]
    fig, axes = plt.subplots(4, len(modes), figsize=(4 * len(modes), 9), sharex=True, squeeze=False)
    for col, mode in enumerate(modes):
        run = configs[config_key(mode, guard)]["example_run"]
        t = np.array(run["t"])
        ax_paths, ax_cap, ax_queue, ax_delay = axes[:, col]
        ax_paths.fill_between(t, run["paths_min"], run["paths_max"], step="post", alpha=0.6)
        for rt in run["reactive_times"]:
            ax_paths.plot(rt, 0.5, "r.", markersize=4)
        ax_paths.set(title=config_key(mode, guard), ylabel="paths used" if col == 0 else None)
        gbps = bits_per_packet / 1e9
        ax_cap.fill_between(
            t,
            np.array(run["capacity_pps_min"]) * gbps,
            np.array(run["capacity_pps_max"]) * gbps,
            step="post",
        )
        ax_queue.fill_between(t, run["queue_min"], run["queue_max"], step="post")
        ax_delay.fill_between(
            t,
            np.maximum(np.array(run["delay_min"]) * 1e3, 1e-3),
            np.maximum(np.array(run["delay_max"]) * 1e3, 1e-3),
            step="post",
        )
        ax_delay.set(yscale="log", xlabel="time (s)")
        if col == 0:
            ax_cap.set_ylabel("capacity used (Gbit/s)")
            ax_queue.set_ylabel("queue (packets)")
            ax_delay.set_ylabel("delay (ms)")
    fig.suptitle("One run (seed 1): min-max over 200 ms; red dots: reactive changes")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pathmgr.study",
        description="Run every scheme on the same random channels (8 paths, 2 Gbit/s by "
        "default) and write simulation.json and PNG plots.",
    )
    parser.add_argument("--runs", type=int, default=100, help="runs per scheme (default 100)")
    parser.add_argument("--duration", type=float, default=70.0, help="seconds per run (70)")
    parser.add_argument(
        "--reactive-guards",
        default="25,50,100",
        help="T_R values in ms, comma-separated (default 25,50,100)",
    )
    parser.add_argument("--paths", type=int, default=8, help="paths per UE (8)")
    parser.add_argument("--rate", type=float, default=2e9, help="arrival rate in bit/s (2e9)")
    parser.add_argument(
        "--compute-penalty",
        choices=["published", "none"],
        default="published",
        help="virtual time per prediction: Table 7.1 p90 times, or none",
    )
    parser.add_argument("--workers", type=int, default=1, help="parallel processes (1)")
    parser.add_argument(
        "--setup",
        choices=["study", "table-7.2"],
        default="study",
        help="study: the options above; table-7.2: the emulation's network instead (4 paths,"
        " 900/100 Mbit/s, no fading, 1 Gbit/s offered, T_R 50 ms): what the fluid model"
        " itself gives where the emulation's published counts come from",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs/results/pathmgr/simulation", help="output dir"
    )
    args = parser.parse_args(argv)
    guards = [float(g) / 1e3 for g in args.reactive_guards.split(",") if g.strip()]
    setup = SimSetup(
        paths=args.paths,
        arrival_bps=args.rate,
        duration=args.duration,
        compute_penalty=args.compute_penalty,
    )
    if args.setup == "table-7.2":  # reference/004 §3.2
        setup = replace(setup, paths=4, arrival_bps=1e9, los_bps=900e6, nlos_bps=100e6,
                        fading_sigma=0.0, published="table-7.2")  # fmt: skip
        guards = [0.050]
    summary = run_study(setup, ControlSettings(), args.runs, guards, args.out, workers=args.workers)
    print("\n".join(table_lines(summary)))
    print(f"\nwritten: {args.out}/simulation.json and PNG plots", file=sys.stderr)


if __name__ == "__main__":
    main()
