"""Sign-in and access control against a real MEC platform; a lost backend is reported.

The platform (``mec_platform.testing``) issues the tokens: the admin's, and an app's
(not admin: the read-only view). The dashboard runs as an app of its own with its Mp1
credentials, as under ``make run``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from mec_common.bus.rnis import RnisMeasurement
from mec_dashboard.api import BASE
from mec_dashboard.app import build_app
from mec_dashboard.config import DashboardSettings
from mec_platform.testing import ADMIN_SECRET, Running, make_settings, onboard, wait_until

APPD = (Path(__file__).parents[1] / "appd.yaml").read_text()
VIEWER_APPD = """
appDId: dashboard-viewer
appName: dashboard-viewer
appProvider: mts-tests
appSoftVersion: "1.0"
appDVersion: "1"
appServiceOptional:
  - {serName: dashboard, version: v1}
"""
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(make_settings(tmp_path_factory.mktemp("platform")))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def app_credentials(platform: Running) -> dict[str, str]:
    """The dashboard's own instance on the platform (not started by a backend)."""
    onboard(platform, APPD)
    r = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": "mts-dashboard"})
    instance = r.json()["id"]
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{instance}/credentials").json()
    return {"instance": instance, "id": creds["clientId"], "secret": creds["clientSecret"]}


def dashboard(tmp_path: Path, platform: Running, creds: dict[str, str], **kw: Any) -> TestClient:
    settings = DashboardSettings(
        state_dir=tmp_path,
        platform_url=platform.url,
        app_instance_id=creds["instance"],
        client_id=creds["id"],
        client_secret=creds["secret"],
        sample_interval_s=0.1,
        slow_interval_s=1,
        **kw,
    )
    return TestClient(build_app(settings))


def test_nothing_without_a_valid_token(
    tmp_path: Path, platform: Running, app_credentials: dict[str, str]
) -> None:
    with dashboard(tmp_path, platform, app_credentials) as client:
        for method, path in [("GET", "/state"), ("GET", "/stream"), ("GET", "/platform"),
                             ("GET", "/session"), ("PUT", "/pep/mode")]:  # fmt: skip
            r = client.request(method, BASE + path, json={"mode": "off"})
            assert r.status_code == 401, (path, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            r = client.request(method, BASE + path, json={"mode": "off"},
                               headers={"Authorization": "Bearer not-a-token"})  # fmt: skip
            assert r.status_code == 401, (path, r.text)
            client.cookies.set("mts_dashboard", "forged", path=BASE)
            assert client.request(method, BASE + path, json={"mode": "off"}).status_code == 401
            client.cookies.clear()
        # sign-in: no token, an empty one, a wrong one
        assert client.post(f"{BASE}/session", json={}).status_code == 400
        assert client.post(f"{BASE}/session", json={"token": ""}).status_code == 400
        r = client.post(f"{BASE}/session", json={"token": "wrong"})
        assert r.status_code == 401 and "set-cookie" not in r.headers
        # the page and its scripts are public and carry no data
        page = client.get("/")
        assert page.status_code == 200 and "ueMeas" not in page.text
        assert client.get("/assets/uPlot.iife.min.js").status_code == 200
        assert client.get("/assets/../config.py").status_code == 404


def app_token(platform: Running, appd: str, appd_id: str) -> str:
    onboard(platform, appd)
    r = platform.admin.post("/app_lcm/v1/app_instances", json={"appDId": appd_id})
    creds = platform.admin.post(f"/app_lcm/v1/app_instances/{r.json()['id']}/credentials")
    return platform.token(creds.json()["clientId"], creds.json()["clientSecret"])


def test_admin_and_read_only_viewers(
    tmp_path: Path, platform: Running, app_credentials: dict[str, str]
) -> None:
    admin_token = platform.token("admin", ADMIN_SECRET)
    viewer_token = app_token(platform, VIEWER_APPD, "dashboard-viewer")
    # an app token not meant for the dashboard (the dashboard's own: it does not consume
    # itself) is refused, like any service refuses an app that did not declare it
    own_token = platform.token(app_credentials["id"], app_credentials["secret"])
    with dashboard(tmp_path, platform, app_credentials) as client:
        r = client.post(f"{BASE}/session", json={"token": admin_token})
        assert r.status_code == 200 and r.json()["read_only"] is False
        assert "httponly" in r.headers["set-cookie"].lower()
        view = client.get(f"{BASE}/platform").json()  # with the cookie
        assert view["absent"] is None
        assert "mts-dashboard" in {p["appDId"] for p in view["packages"]}
        client.delete(f"{BASE}/session")
        assert client.get(f"{BASE}/state").status_code == 401

        r = client.post(f"{BASE}/session", json={"token": own_token})
        assert r.status_code == 403 and "set-cookie" not in r.headers
        assert client.get(f"{BASE}/state", headers={"Authorization": f"Bearer {own_token}"}
                          ).status_code == 403  # fmt: skip

        r = client.post(f"{BASE}/session", json={"token": viewer_token})
        assert r.status_code == 200 and r.json()["read_only"] is True
        assert client.put(f"{BASE}/pep/mode", json={"mode": "off"}).status_code == 403
        view = client.get(f"{BASE}/platform").json()
        assert view["packages"] == [] and "403" in view["absent"]
        # the dashboard itself reached Mp1 with its own token: the platform is up
        wait_until(lambda: client.get(f"{BASE}/state").json()["backends"]["platform"]["ok"],
                   timeout=30, what="the platform reported up")  # fmt: skip


class RecordedRnis:
    """An HTTP server answering ``/rni/v2/queries/ext/ran_meas`` with one recorded UE.

    A stand-in for the RNIS adapter only to be able to stop it at a chosen time; the
    browser test reads the real adapter on the emulated RAN.
    """

    def __init__(self) -> None:
        measurement = RnisMeasurement(
            cell="10000-0", bs_id=10000, phy_cell_id=0, cell_prbs=25, observed_ns=0,
            cell_ues=1, rnti=70, imsi="208950000000001", ue_ipv4="10.30.0.1", wb_cqi=11,
            dl_mcs=20, dl_tbs_bytes=1200, dl_prbs=20, rlc_queue_bytes=5000,
        )  # fmt: skip
        recorded = measurement.model_dump(mode="json")

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                recorded["observed_ns"] = time.time_ns() - 3_000_000  # 3 ms old
                body = json.dumps({"timeStamp": {"seconds": 0, "nanoSeconds": 0},
                                   "ueMeas": [recorded]}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rni/v2"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_lost_backend_is_shown_as_lost(
    tmp_path: Path, platform: Running, app_credentials: dict[str, str]
) -> None:
    rnis = RecordedRnis()
    token = platform.token("admin", ADMIN_SECRET)
    auth = {"Authorization": f"Bearer {token}"}
    with dashboard(tmp_path, platform, app_credentials, rnis_url=rnis.url) as client:

        def state() -> dict[str, Any]:
            body: dict[str, Any] = client.get(f"{BASE}/state", headers=auth).json()
            return body

        wait_until(lambda: state()["backends"]["rnis"]["ok"] is True, 30, "the RNIS read")
        live = state()
        sample = live["radio"]["10.30.0.1"]["sample"]
        assert dict(zip(live["columns"][1:6], sample[1:6], strict=True)) == {
            "cqi": 11, "mcs": 20, "tbs": 1200, "prbs": 20, "rlc": 5000}  # fmt: skip
        assert 3 <= sample[6] < 10_000  # the measurement's age (ms) when read
        rnis.stop()
        wait_until(lambda: state()["backends"]["rnis"]["ok"] is False, 30, "RNIS reported lost")
        lost = state()["backends"]["rnis"]
        assert "unreachable" in lost["detail"] and lost["last_ok"] <= lost["since"]
        # the history stays for the charts; the page greys it out under the 'lost' note
        assert state()["radio_history"]["10.30.0.1"]
        # the backends the dashboard has no URL for are 'absent', not 'up'
        assert state()["backends"]["pep"]["ok"] is None
