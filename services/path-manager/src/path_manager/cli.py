"""``path-manager``: the service, the simulation study, and the predictor's benchmark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

RESULTS = Path("docs/results/pathmgr")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="path-manager",
        description="Predictive multipath path manager (reactive, CDF, FPT, CDF+R, FPT+R) "
        "over Linux MPTCP, fed by RNIS.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the service (REST /pm/v1 on PM_HTTP_PORT, RNIS feed, control, MPTCP)",
        description="Run the path manager service. Configuration comes from PM_* environment "
        "variables (docs/configuration.md).",
    )
    serve.set_defaults(run=_serve)

    sim = commands.add_parser(
        "simulate",
        help="discrete-event simulation of the research study (Table 4.1, delay CDFs)",
        description="Run every scheme on the same random channels (8 paths, 2 Gbit/s by "
        "default) and write simulation.json and PNG plots.",
    )
    sim.add_argument("--runs", type=int, default=100, help="runs per scheme (default 100)")
    sim.add_argument("--duration", type=float, default=70.0, help="seconds per run (70)")
    sim.add_argument(
        "--reactive-guards",
        default="25,50,100",
        help="T_R values in ms, comma-separated (default 25,50,100)",
    )
    sim.add_argument("--paths", type=int, default=8, help="paths per UE (8)")
    sim.add_argument("--rate", type=float, default=2e9, help="arrival rate in bit/s (2e9)")
    sim.add_argument(
        "--compute-penalty",
        choices=["published", "none"],
        default="published",
        help="virtual time per prediction: Table 7.1 p90 times, or none",
    )
    sim.add_argument("--workers", type=int, default=1, help="parallel processes (1)")
    sim.add_argument("--out", type=Path, default=RESULTS / "simulation", help="output dir")
    sim.set_defaults(run=_simulate)

    bench = commands.add_parser(
        "bench",
        help="prediction time per number of paths, and accuracy (vs full model, Monte Carlo)",
        description="Measure the predictor: wall time p90 over random scenarios per number "
        "of paths (CDF and FPT are computed together), the reduced model's error against the "
        "full model on 3-4 paths, and both against Monte Carlo.",
    )
    bench.add_argument("--repeat", type=int, default=1000, help="predictions per size (1000)")
    bench.add_argument(
        "--scenarios",
        type=int,
        default=100,
        help="accuracy scenarios (100); 0 = timing only, keep the last accuracy results",
    )
    bench.add_argument("--mc-samples", type=int, default=200_000, help="Monte Carlo samples")
    bench.add_argument("--out", type=Path, default=RESULTS / "predictor", help="output dir")
    bench.set_defaults(run=_bench)

    args = parser.parse_args(argv)
    args.run(args)


def _serve(args: argparse.Namespace) -> None:
    from path_manager.service import run_service

    run_service()


def _simulate(args: argparse.Namespace) -> None:
    from path_manager.control import ControlSettings
    from path_manager.simulate import SimSetup
    from path_manager.study import run_study, table_lines

    guards = [float(g) / 1e3 for g in args.reactive_guards.split(",") if g.strip()]
    setup = SimSetup(
        paths=args.paths,
        arrival_bps=args.rate,
        duration=args.duration,
        compute_penalty=args.compute_penalty,
    )
    summary = run_study(setup, ControlSettings(), args.runs, guards, args.out, workers=args.workers)
    print("\n".join(table_lines(summary)))
    print(f"\nwritten: {args.out}/simulation.json and PNG plots", file=sys.stderr)


def _bench(args: argparse.Namespace) -> None:
    from path_manager.bench import run_bench

    run_bench(args.repeat, args.scenarios, args.mc_samples, args.out)


if __name__ == "__main__":
    main()
