"""The PEP registers its API as a MEC service on the real MEC platform (in-process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mec_pep.config import PepSettings
from mec_pep.service import PepService
from mec_platform.testing import Running, app_credentials, make_settings, onboard, wait_until

PEP_APPD = """
appDId: pep
appName: pep
appProvider: mts
appSoftVersion: "0.1"
appDVersion: "1"
appServiceProduced:
  - {serName: pep, version: v1}
"""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    running = Running(make_settings(tmp_path / "platform"))
    onboard(running, PEP_APPD)
    yield running
    running.stop()


def pep_services(platform: Running) -> list[dict[str, Any]]:
    r = platform.admin.get("/mec_service_mgmt/v1/services", params={"ser_name": "pep"})
    assert r.status_code == 200, r.text
    return list(r.json())


def test_registers_and_deregisters(platform: Running, tmp_path: Path) -> None:
    settings = PepSettings(
        platform_url=platform.url, state_dir=tmp_path, **app_credentials(platform, "pep")
    )
    service = PepService(settings)
    service.register_with_platform("http://10.99.0.2:8102", "http://10.99.0.2:8102/cb")
    try:
        wait_until(lambda: len(pep_services(platform)) == 1, 15, "the PEP service in Mp1")
        (info,) = pep_services(platform)
        assert info["state"] == "ACTIVE"
        assert info["transportInfo"]["type"] == "REST_HTTP"
        assert info["transportInfo"]["endpoint"]["uris"] == ["http://10.99.0.2:8102/pep/v1"]
        wait_until(lambda: service.health.report()["checks"]["platform"]["ok"], 10, "health")
    finally:
        assert service.registration is not None
        service.registration.stop()
    assert pep_services(platform) == []
