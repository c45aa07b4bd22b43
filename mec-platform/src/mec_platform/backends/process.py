"""Apps as local processes (used by ``make run`` and the tests).

Each app runs in its own session (process group) with its working directory, home and log in
``<apps dir>/<app instance id>/`` and an explicit environment (``granted_env``). The
reference is ``<pid>:<start time>`` so that a platform restarted later never signals a
recycled pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from mec_platform.appd import AppD
from mec_platform.backends import BackendError, granted_env, mec_env


def _state_and_start_time(pid: int) -> tuple[str, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], fields[19]  # fields 3 and 22: state, starttime in clock ticks


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
        full_env = {**granted_env(spec.inherit_env), "HOME": str(workdir), **spec.env,
                    **mec_env(spec.env_prefix, env)}  # fmt: skip
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
        stat = _state_and_start_time(child.pid)
        return f"{child.pid}:{stat[1] if stat else None}"

    def alive(self, ref: str) -> bool:
        """Running (a zombie is dead; it is left unreaped so ``stop`` still owns its pid)."""
        pid, started = _parse(ref)
        stat = _state_and_start_time(pid)
        return stat is not None and stat[1] == started and stat[0] not in ("Z", "X")

    def stop(self, ref: str, timeout_s: float) -> None:
        pid, started = _parse(ref)
        if self.alive(ref):
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and self.alive(ref):
                time.sleep(0.05)
        stat = _state_and_start_time(pid)
        if stat is not None and stat[1] == started:  # running or our zombie: the group is ours
            _kill_group(pid, signal.SIGKILL)  # the app if it is still there, what it left
        self._reap(pid)

    def _reap(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.wait(timeout=5)


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


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
