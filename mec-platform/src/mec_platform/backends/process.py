"""Apps as local processes (used by ``make run`` and the tests).

Each app runs in its own session (process group) with its working directory and log in
``<apps dir>/<app instance id>/``. The reference is ``<pid>:<start time>`` so that a
platform restarted later never signals a recycled pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from mec_platform.appd import AppD
from mec_platform.backends import BackendError, mec_env


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22: starttime in clock ticks


STARTUP_GRACE_S = 0.5  # an app still running after this is considered started


class ProcessBackend:
    name = "process"

    def __init__(self, apps_dir: Path) -> None:
        self.apps_dir = apps_dir
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, app_instance_id: str, appd: AppD, env: dict[str, str]) -> str:
        spec = appd.deployment.process
        if spec is None:
            raise BackendError(f"AppD {appd.app_d_id} has no deployment.process section")
        workdir = self.apps_dir / app_instance_id
        workdir.mkdir(parents=True, exist_ok=True)
        full_env = {**os.environ, **spec.env, **mec_env(spec.env_prefix, env)}
        with (workdir / "app.log").open("ab") as log:
            try:
                child = subprocess.Popen(
                    spec.command, cwd=workdir, env=full_env, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
            except OSError as exc:
                raise BackendError(f"cannot start {spec.command[0]}: {exc}") from None
        _check_it_stays_up(child, spec.command[0], workdir / "app.log")
        self._children[child.pid] = child
        return f"{child.pid}:{_start_time(child.pid)}"

    def alive(self, ref: str) -> bool:
        pid, started = _parse(ref)
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            return False
        return _start_time(pid) == started

    def stop(self, ref: str, timeout_s: float) -> None:
        pid, _ = _parse(ref)
        if not self.alive(ref):
            self._reap(pid)
            return
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.alive(ref):
            time.sleep(0.05)
        if self.alive(ref):
            os.killpg(pid, signal.SIGKILL)
        self._reap(pid)

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait(timeout=5)


def _check_it_stays_up(child: subprocess.Popen[bytes], command: str, log: Path) -> None:
    """An app that exits at once (wrong command, bad configuration) failed to instantiate:
    say so with the end of its log rather than report a running app that is not there."""
    try:
        code = child.wait(timeout=STARTUP_GRACE_S)
    except subprocess.TimeoutExpired:
        return
    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
    raise BackendError(f"{command} exited with status {code} at start: " + " | ".join(tail))


def _parse(ref: str) -> tuple[int, str]:
    pid, _, started = ref.partition(":")
    return int(pid), started
