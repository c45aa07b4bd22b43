"""The platform on PostgreSQL: a private cluster (initdb in a temp dir, a free port)."""

from __future__ import annotations

import contextlib
import glob
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mec_platform.testing import (
    Running,
    external_app,
    free_port,
    make_settings,
    onboard,
    wait_until,
)

SM = "/mec_service_mgmt/v1"


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    if not found:
        pytest.fail("PostgreSQL is not installed (make system installs Debian's postgresql)")
    return Path(found[-1]).parent


class Cluster:
    """A throwaway cluster owned by the postgres user (the server refuses to run as root)."""

    def __init__(self) -> None:
        self.bindir, self.port = _pg_bin(), free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="mts-pg-"))
        user = pwd.getpwnam("postgres")
        shutil.chown(self.dir, user.pw_uid, user.pw_gid)
        self.url = f"postgresql+psycopg://mts@127.0.0.1:{self.port}/postgres"
        self._as_postgres("initdb", "-D", str(self.dir / "db"), "-U", "mts", "--auth=trust",
                          "-E", "UTF8")  # fmt: skip

    def _as_postgres(self, tool: str, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bindir / tool), *args],
                       check=True, capture_output=True, cwd=self.dir)  # fmt: skip

    def start(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.dir / "db"), "-l", str(self.dir / "log"), "-w",
                          "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1",
                          "start")  # fmt: skip

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.dir / "db"), "-m", "immediate", "-w", "stop")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            c.stop()
        shutil.rmtree(c.dir, ignore_errors=True)


@pytest.fixture
def postgres_url(cluster: Cluster) -> str:
    return cluster.url


def test_platform_on_postgresql_keeps_state_across_restarts(
    tmp_path: Path, postgres_url: str
) -> None:
    settings = make_settings(tmp_path, database_url=postgres_url)
    first = Running(settings)
    try:
        assert first.platform.db.engine.dialect.name == "postgresql"
        onboard(first)
        iid, app = external_app(first)
        body = {"serName": "rnis", "version": "v2", "state": "ACTIVE", "serializer": "JSON",
                "transportId": "amqp-bus"}  # fmt: skip
        created = app.post(f"{SM}/applications/{iid}/services", json=body).json()
        ser_id = created["serInstanceId"]
        r = app.put(f"{SM}/applications/{iid}/services/{ser_id}",
                    json={**created, "version": "v3"})  # fmt: skip
        assert r.status_code == 200
        second_app = app.post(f"{SM}/applications/{iid}/services", json={**body, "serName": "x"})
        app.delete(f"{SM}/applications/{iid}/services/{second_app.json()['serInstanceId']}")
    finally:
        first.stop()

    again = Running(settings)
    try:
        services = again.admin.get(f"{SM}/services").json()
        assert [(s["serName"], s["version"]) for s in services] == [("rnis", "v3")]
        assert [p["appDId"] for p in again.admin.get("/app_pkgm/v1/app_packages").json()] == [
            "test-app"]  # fmt: skip
        rules = again.admin.get(f"/mec_app_support/v1/applications/{iid}/traffic_rules").json()
        assert [r["trafficRuleId"] for r in rules] == ["intercept-http"]
    finally:
        again.stop()


def test_a_lost_database_shows_in_health_and_comes_back(tmp_path: Path, cluster: Cluster) -> None:
    platform = Running(make_settings(tmp_path, database_url=cluster.url))
    try:
        health = f"{platform.url}/healthz"
        assert httpx.get(health).status_code == 200
        cluster.stop()
        wait_until(lambda: httpx.get(health).status_code == 503, 20, "health to show the loss")
        assert not httpx.get(health).json()["checks"]["database"]["ok"]
        r = platform.admin.get("/app_lcm/v1/app_instances")
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert r.json()["detail"] == "the database is unavailable; retry later"
        cluster.start()
        wait_until(lambda: httpx.get(health).status_code == 200, 30, "health to recover")
        assert platform.admin.get(f"{SM}/services").status_code == 200
    finally:
        platform.stop()
