"""How app instances run: local processes, Docker containers or Helm releases.

A backend starts an app with the environment the platform gives it (platform URL, app
instance id, OAuth2 credentials) and stops it; ``stop`` is called after the app's graceful
termination (or its timeout) and must leave nothing behind.

An app's environment is explicit: what its AppD grants and its own credentials, never the
platform's environment (which holds the admin secret and every app's settings).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Protocol

from mec_platform.appd import PLATFORM_PREFIX, AppD
from mec_platform.config import PlatformSettings


class BackendError(RuntimeError):
    pass


class Backend(Protocol):
    name: str

    def start(self, app_instance_id: str, appd: AppD, env: dict[str, str]) -> str:
        """Start the app; returns a reference (pid, container id, release) for ``stop``."""

    def stop(self, ref: str, timeout_s: float) -> None:
        """Stop the app (SIGTERM/stop, then force after ``timeout_s``); idempotent."""

    def alive(self, ref: str) -> bool: ...


def mec_env(prefix: str | None, values: dict[str, str]) -> dict[str, str]:
    """The platform's variables, plain and (if the AppD asks) with the app's prefix."""
    env = dict(values)
    if prefix:
        env.update({prefix + k: v for k, v in values.items()})
    return env


# What every local process needs to run at all; none of it is a secret.
BASIC_ENV = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR")


def granted_env(patterns: Iterable[str], source: Mapping[str, str] | None = None
                ) -> dict[str, str]:  # fmt: skip
    """The basics (PATH, locale) and the variables of ``source`` (the platform's environment)
    the AppD grants by name or ``PREFIX*`` pattern, never a ``PLATFORM_`` one."""
    source = os.environ if source is None else source
    prefixes = tuple(p[:-1] for p in patterns if p.endswith("*"))
    names = {p for p in patterns if not p.endswith("*")}
    return {
        name: value for name, value in source.items()
        if not name.startswith(PLATFORM_PREFIX)
        and (name in BASIC_ENV or name.startswith("LC_") or name in names
             or (prefixes and name.startswith(prefixes)))
    }  # fmt: skip


def make_backend(settings: PlatformSettings) -> Backend:
    if settings.backend == "docker":
        from mec_platform.backends.docker import DockerBackend

        return DockerBackend(settings.docker_socket, settings.docker_network)
    if settings.backend == "helm":
        from mec_platform.backends.helm import HelmBackend

        return HelmBackend(settings.helm_binary, settings.kubeconfig, settings.helm_namespace)
    from mec_platform.backends.process import ProcessBackend

    return ProcessBackend(settings.apps_path())
