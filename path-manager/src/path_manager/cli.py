"""``path-manager``: the service (the simulation study and the bench are in ``mts_lab.pathmgr``)."""

from __future__ import annotations

import argparse


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

    args = parser.parse_args(argv)
    args.run(args)


def _serve(args: argparse.Namespace) -> None:
    from path_manager.app import serve

    serve()


if __name__ == "__main__":
    main()
