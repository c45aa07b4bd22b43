"""The platform on PostgreSQL: a private cluster (initdb in a temp dir, a free port)."""

from __future__ import annotations

import glob
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.testing import Running, external_app, free_port, make_settings, onboard

SM = "/mec_service_mgmt/v1"


def _pg_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    if not found:
        pytest.fail("PostgreSQL is not installed (make system installs Debian's postgresql)")
    return Path(found[-1]).parent


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throwaway cluster owned by the postgres user (the server refuses to run as root)."""
    bindir, port = _pg_bin(), free_port()
    data = Path(tempfile.mkdtemp(prefix="mts-pg-"))
    user = pwd.getpwnam("postgres")
    shutil.chown(data, user.pw_uid, user.pw_gid)

    def as_postgres(*cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True,
                       capture_output=True, cwd=data)  # fmt: skip

    try:
        as_postgres(str(bindir / "initdb"), "-D", str(data / "db"), "-U", "mts",
                    "--auth=trust", "-E", "UTF8")  # fmt: skip
        as_postgres(
            str(bindir / "pg_ctl"),
            "-D",
            str(data / "db"),
            "-l",
            str(data / "log"),
            "-w",
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
            "start",
        )
        yield f"postgresql+psycopg://mts@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(bindir / "pg_ctl"),
                "-D",
                str(data / "db"),
                "-m",
                "immediate",
                "stop",
            ],
            capture_output=True,
        )
        shutil.rmtree(data, ignore_errors=True)


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
