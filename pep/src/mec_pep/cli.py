"""``pep``: run the split-TCP PEP, or clean up after one."""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

from pydantic import ValidationError

from mec_common.api import serve
from mec_common.auth import TokenVerifier
from mec_common.logging import configure_logging, get_logger
from mec_common.tproxy import Runner, TproxyError
from mec_pep.api import TERMINATION_PATH, build_app, register_metrics
from mec_pep.config import PepSettings
from mec_pep.core import CoreSettingsError
from mec_pep.service import PepService
from mec_pep.transparent import TransparentRules

log = get_logger("mec_pep")

EPILOG = """Every setting is an environment variable with the PEP_ prefix (PEP_ALLOWED_CLIENTS,
PEP_RAN_RCVBUF, ...; docs/configuration.md lists them all). Options given here override
the environment. Nothing is relayed unless PEP_ALLOWED_CLIENTS and PEP_ALLOWED_DESTINATIONS
allow it. The relay: PEP_RELAY_CORE=auto (the default) runs the compiled io_uring core where
it can (the settings, its library, io_uring and pidfd_getfd allow it), else the Python
relay; the log at start and /pep/v1/stats say which and why. python or uring choose one
(uring: or refuse to start)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pep",
        description="Split-connection TCP PEP (transparent TPROXY, SOCKS5, TFO opt-in TLV) "
        "with a REST API at /pep/v1.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "serve",
        help="run the PEP and its REST API (default port 8102)",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--http-host", help="REST API address (PEP_HTTP_HOST)")
    run.add_argument("--http-port", type=int, help="REST API port (PEP_HTTP_PORT, 8102)")
    run.add_argument("--socks5-port", type=int, help="enable SOCKS5 on this port (PEP_SOCKS5_PORT)")
    run.add_argument("--tlv-port", type=int, help="enable the TLV opt-in mode (PEP_TLV_PORT)")
    run.add_argument(
        "--transparent-port", type=int, help="enable transparent TPROXY mode (PEP_TRANSPARENT_PORT)"
    )
    run.add_argument("--log-level", help="DEBUG, INFO, WARNING or ERROR (PEP_LOG_LEVEL)")
    sub.add_parser(
        "cleanup",
        help="remove TPROXY rules a crashed PEP left in this network namespace "
        "(serve does this at start too)",
    )
    args = parser.parse_args(argv)
    try:
        settings = PepSettings(**_overrides(args))
    except ValidationError as exc:
        print(f"pep: invalid setting: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "cleanup":
        TransparentRules(settings, Runner()).remove_leftovers()
        return 0
    return _serve(settings)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    names = ("http_host", "http_port", "socks5_port", "tlv_port", "transparent_port", "log_level")
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


def _serve(settings: PepSettings) -> int:
    verifier = TokenVerifier.for_service(
        settings.api_tokens, settings.platform_url, settings.state_dir, "pep"
    )
    service = PepService(settings)
    try:
        service.start()
    except (OSError, TproxyError, CoreSettingsError) as exc:
        log.error("PEP failed to start", error=str(exc))
        service.stop()
        return 1
    if settings.platform_url:
        public = settings.public_url or f"http://{socket.getfqdn()}:{settings.http_port}"
        service.register_with_platform(public, public.rstrip("/") + TERMINATION_PATH)
    app = build_app(service, verifier)
    register_metrics(service)
    log.info(
        "PEP running",
        api=f"http://{settings.http_host}:{settings.http_port}/pep/v1",
        listeners={str(m): f"{a[0]}:{a[1]}" for m, a in service.dataplane.addresses.items()},
        relay=service.relay,
        relay_threads=settings.relay_threads,
    )
    try:
        serve(app, settings)  # returns after SIGTERM/SIGINT: the clean-up below always runs
    finally:
        service.stop()
        log.info("PEP stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
