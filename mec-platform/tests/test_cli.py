"""The `mec-platform` command as a real process: SIGTERM and the admin secret."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mec_common.ports import free_port
from mec_platform.config import PlatformSettings


class Platform:
    """`python -m mec_platform.cli serve` with PLATFORM_* from env, its output in a file."""

    def __init__(self, state_dir: Path, **env: str) -> None:
        self.state_dir, self.port = state_dir, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.output = state_dir / "platform.log"
        environ = {**os.environ, "PLATFORM_STATE_DIR": str(state_dir),
                   "PLATFORM_HTTP_HOST": "127.0.0.1", "PLATFORM_HTTP_PORT": str(self.port),
                   **env}  # fmt: skip
        with self.output.open("w") as out:
            command = [sys.executable, "-m", "mec_platform.cli", "serve"]
            self.proc = subprocess.Popen(command, env=environ, stdout=out, stderr=subprocess.STDOUT)
        # only a guard against a hang: at a load average of 10 the start took over 60 s
        deadline = time.monotonic() + 300
        while not self._healthy():
            assert self.proc.poll() is None, self.output.read_text()
            assert time.monotonic() < deadline, "the platform did not start"
            time.sleep(0.1)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=30).status_code == 200
        except httpx.TransportError:
            return False

    def token_status(self, secret: str) -> int:
        r = httpx.post(f"{self.url}/oauth2/token", data={"grant_type": "client_credentials"},
                       auth=("admin", secret), timeout=60)  # fmt: skip
        return r.status_code

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


@pytest.fixture
def platforms() -> Iterator[list[Platform]]:
    started: list[Platform] = []
    yield started
    for p in started:
        p.stop(signal.SIGKILL)


def test_sigterm_stops_the_platform_cleanly(tmp_path: Path, platforms: list[Platform]) -> None:
    """The clean-up after serve() runs: the database is closed (SQLite folds its write-ahead
    log back and removes it only when the last connection closes) and the exit code is 0."""
    platform = Platform(tmp_path, PLATFORM_ADMIN_CLIENT_SECRET="s3cret")
    platforms.append(platform)
    assert platform.token_status("s3cret") == 200
    assert (tmp_path / "platform.db-wal").exists()
    assert platform.stop() == 0, platform.output.read_text()
    assert "MEC platform stopped" in platform.output.read_text()
    assert not (tmp_path / "platform.db-wal").exists()


def test_an_empty_admin_secret_means_unset(
    tmp_path: Path, platforms: list[Platform], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_ADMIN_CLIENT_SECRET", "")
    assert PlatformSettings().admin_client_secret is None
    monkeypatch.setenv("PLATFORM_ADMIN_CLIENT_SECRET", "  ")
    assert PlatformSettings().admin_client_secret is None

    platform = Platform(tmp_path, PLATFORM_ADMIN_CLIENT_SECRET="")
    platforms.append(platform)
    generated = (tmp_path / "platform-admin.secret").read_text().strip()
    assert len(generated) >= 32
    assert (tmp_path / "platform-admin.secret").stat().st_mode & 0o777 == 0o600
    assert platform.token_status("") == 401
    assert platform.token_status(generated) == 200
