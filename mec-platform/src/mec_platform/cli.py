"""``mec-platform``: run the MEC platform (Mp1, platform manager, OAuth2)."""

from __future__ import annotations

import argparse
import sys

from mec_common.api import serve
from mec_common.logging import configure_logging, get_logger
from mec_platform.app import build_platform
from mec_platform.config import PlatformSettings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="mec-platform",
        description="The MEC platform: ETSI MEC 011 Mp1, the platform manager and OAuth2. "
        "Configured with PLATFORM_* environment variables (docs/configuration.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="serve the APIs (default port 8100)")
    run.add_argument("--port", type=int, help="override PLATFORM_HTTP_PORT")
    run.add_argument("--host", help="override PLATFORM_HTTP_HOST")
    args = parser.parse_args(argv)

    settings = PlatformSettings()
    if args.port is not None:
        settings.http_port = args.port
    if args.host:
        settings.http_host = args.host
    configure_logging(settings.log_level, settings.log_format)
    platform = build_platform(settings)
    get_logger("mec_platform").info(
        "MEC platform starting",
        url=settings.base_url(),
        database=platform.db.engine.url.render_as_string(),  # password hidden
        backend=settings.backend,
        admin_client_id=settings.admin_client_id,
    )
    try:
        serve(platform.app, settings)  # returns after SIGTERM/SIGINT
    finally:
        platform.close()
        get_logger("mec_platform").info("MEC platform stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
