"""The tunnel registers on the real MEC platform (mec_platform.testing runs it in-process)
as the MEC service mp-tunnel, is found through Mp1 discovery, accepts the platform's tokens,
and deregisters on SIGTERM. The tunnel end runs in this namespace with a TUN of its own
(removed when it exits) and its paths on loopback."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mec_platform.testing import Running, make_settings, onboard
from mts_lab.tunnel.bed import start_here

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a TUN")
APPD = (Path(__file__).parents[1] / "appd.yaml").read_text()


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    running = Running(make_settings(tmp_path))
    onboard(running, APPD)
    yield running
    running.stop()


def services(platform: Running) -> list[dict[str, Any]]:
    r = platform.admin.get("/mec_service_mgmt/v1/services", params={"ser_name": "mp-tunnel"})
    assert r.status_code == 200, r.text
    return list(r.json())


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_registers_as_mp_tunnel_and_deregisters(tmp_path: Path, platform: Running) -> None:
    r = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": "mts-tunnel"})
    assert r.status_code == 201, r.text
    instance = r.json()["id"]
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{instance}/credentials").json()
    env = {
        "TUNNEL_API_TOKENS": "static-token",
        "TUNNEL_PLATFORM_URL": platform.url,
        "TUNNEL_APP_INSTANCE_ID": instance,
        "TUNNEL_CLIENT_ID": creds["clientId"],
        "TUNNEL_CLIENT_SECRET": creds["clientSecret"],
    }
    proc, base = start_here(tmp_path, env)
    try:
        wait_for(lambda: len(services(platform)) == 1, 20, "the mp-tunnel registration")
        [info] = services(platform)
        assert info["state"] == "ACTIVE" and info["transportInfo"]["type"] == "REST_HTTP"
        api = info["transportInfo"]["endpoint"]["uris"][0]
        assert api == f"{base}/tunnel/v1"
        # an app of the platform calls the API found through Mp1 with its platform token
        token = platform.client(creds["clientId"], creds["clientSecret"]).headers["Authorization"]
        r = httpx.get(f"{api}/paths", headers={"Authorization": token})
        assert r.status_code == 200 and r.json()[0]["id"] == 1, r.text
        assert httpx.get(f"{api}/paths").status_code == 401
        health = httpx.get(f"{base}/healthz").json()
        assert health["checks"]["platform"]["ok"], health
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    assert proc.returncode == 0, (tmp_path / "tunnel.log").read_text()
    assert services(platform) == [], "deregistered on shutdown"
