"""How app instances run: local processes, Docker containers or Helm releases.

A backend starts an app with the environment the platform gives it (platform URL, app
instance id, OAuth2 credentials) and stops it; ``stop`` is called after the app's graceful
termination (or its timeout) and must leave nothing behind.
"""

from __future__ import annotations

from typing import Protocol

from mec_platform.appd import AppD
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


def make_backend(settings: PlatformSettings) -> Backend:
    if settings.backend == "docker":
        from mec_platform.backends.docker import DockerBackend

        return DockerBackend(settings.docker_socket, settings.docker_network)
    if settings.backend == "helm":
        from mec_platform.backends.helm import HelmBackend

        return HelmBackend(settings.helm_binary, settings.kubeconfig, settings.helm_namespace)
    from mec_platform.backends.process import ProcessBackend

    return ProcessBackend(settings.apps_path())
