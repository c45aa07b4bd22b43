"""The fixture of the security suite: the whole system up for real (trust_support)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib

from trust_support import (
    APPDS,
    CONSUMER_APPD,
    HEADER_TIMEOUT_S,
    ROGUE_APPD,
    STATIC,
    Adapter,
    FlexranSource,
    Service,
    System,
    exchange_name,
    free_port,
    python_service,
    ready,
    registered,
    wait_for,
)

from mec_platform.testing import Running, make_settings, onboard


@pytest.fixture(scope="package")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    if os.geteuid() != 0:
        pytest.fail("the security suite starts the PEP, which needs root")
    tmp = tmp_path_factory.mktemp("security")
    exchanges = exchange_name()
    exchange = next(exchanges)
    platform = Running(make_settings(tmp / "platform", header_timeout_s=HEADER_TIMEOUT_S,
                                     login_rate_per_s=50.0, login_burst=200))  # fmt: skip
    started: list[Service] = []
    source = None
    try:
        for appd in ("pep.yaml", "path-manager.yaml", "rnis-adapter.yaml"):
            onboard(platform, (APPDS / appd).read_text())
        onboard(platform, ROGUE_APPD)
        onboard(platform, CONSUMER_APPD)
        system = System(platform, {})
        ids = {"pep": "mts-pep", "pm": "mts-path-manager", "rnis": "mts-rnis-adapter"}
        appd_ids = {p["appDId"] for p in platform.admin.get("/app_pkgm/v1/app_packages").json()}
        for key, appd_id in ids.items():
            assert appd_id in appd_ids, (appd_id, appd_ids)
            system.apps[key] = system.new_app(appd_id)
        for key in ("rogue", "consumer"):
            system.apps[key] = system.new_app(key)

        source = FlexranSource(tmp, ues=2, cells=1)
        rnis_app = system.apps["rnis"]
        adapter = Adapter(tmp, source.url, exchange, env={
            "RNIS_PLATFORM_URL": platform.url, "RNIS_APP_INSTANCE_ID": rnis_app.instance,
            "RNIS_CLIENT_ID": rnis_app.client_id, "RNIS_CLIENT_SECRET": rnis_app.secret,
            "RNIS_API_TOKENS": STATIC}).start()  # fmt: skip
        assert adapter.proc is not None
        system.services["rnis"] = Service("rnis", adapter.url, adapter.proc)
        pep = python_service("pep", "mec_pep", "PEP_", system.apps["pep"], platform, tmp,
                              SOCKS5_PORT=str(free_port()), RAN_AWARE="false",
                              BACKLOG_INTERVAL_MS="0", ALLOWED_CLIENTS="127.0.0.1/32",
                              ALLOWED_DESTINATIONS="127.0.0.1/32")  # fmt: skip
        system.services["pep"] = pep
        pm = python_service("pm", "path_manager.cli", "PM_", system.apps["pm"], platform, tmp,
                             ACTUATION="none", RNIS_EXCHANGE=exchange)  # fmt: skip
        system.services["pm"] = pm
        started = list(system.services.values())
        for service in started:
            wait_for(lambda s=service: ready(s), 300, f"{service.name} to serve")  # type: ignore[misc]
        for ser_name in ("pep", "path-manager", "rnis"):
            wait_for(lambda n=ser_name: registered(platform, n), 300, f"{ser_name} in Mp1")  # type: ignore[misc]
        yield system
    finally:
        for service in started:
            service.proc.stop()
        if source is not None:
            source.proc.stop()
        platform.stop()
        next(exchanges, None)
