"""Thin wrappers around iproute2 for network namespaces, links and processes in them."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NETNS_DIR = Path("/run/netns")


class CommandError(RuntimeError):
    """A command failed; the message carries its stderr."""


def run(*cmd: str, check: bool = True, input_text: str | None = None) -> str:
    """Run a command, return its stdout; raise CommandError with stderr on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True, input=input_text, check=False)
    if check and proc.returncode != 0:
        raise CommandError(f"{' '.join(cmd)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    """Run `ip [-n ns] args...`."""
    return run("ip", *(("-n", ns) if ns else ()), *args, check=check)


def ns_exec_argv(ns: str, cmd: Sequence[str]) -> list[str]:
    """The argv that runs cmd inside namespace ns."""
    return ["ip", "netns", "exec", ns, *cmd]


def list_namespaces() -> list[str]:
    """Names of the named network namespaces."""
    return sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []


def add_namespace(ns: str) -> None:
    ip("netns", "add", ns)
    ip("link", "set", "lo", "up", ns=ns)


def attach_current(ns: str) -> None:
    """Give the current network namespace the name ns (`ip netns attach`)."""
    ip("netns", "attach", ns, str(os.getpid()))


def is_current(ns: str) -> bool:
    """Whether named namespace ns is the one this process runs in."""
    try:
        named, own = (NETNS_DIR / ns).stat(), Path("/proc/self/ns/net").stat()
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (own.st_dev, own.st_ino)


def sysctl(ns: str, key: str, value: str) -> None:
    run(*ns_exec_argv(ns, ["sysctl", "-q", "-w", f"{key}={value}"]))


def ns_pids(ns: str) -> list[int]:
    """Processes running in namespace ns."""
    out = ip("netns", "pids", ns, check=False)
    return [int(p) for p in out.split()]


def kill_pids(pids: Sequence[int], timeout: float = 3.0) -> None:
    """SIGTERM the given processes, then SIGKILL those still alive after timeout."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in pids if _signal(p, sig)]
        deadline = time.monotonic() + timeout
        while alive and time.monotonic() < deadline:
            time.sleep(0.05)
            alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)]
        if not alive:
            return


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def delete_namespace(ns: str) -> None:
    """Kill every process in ns, then delete it (its interfaces go with it)."""
    kill_pids(ns_pids(ns))
    ip("netns", "delete", ns, check=False)


def stop_processes(procs: Sequence[subprocess.Popen[Any]], timeout: float = 20) -> None:
    """SIGTERM every process still running (in reverse start order), then wait for each,
    killing those that outlast ``timeout``."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
