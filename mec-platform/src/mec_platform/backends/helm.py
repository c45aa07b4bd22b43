"""Apps as Helm releases (the helm CLI with a kubeconfig).

The platform's variables reach the chart as ``mec.env`` (a map the chart puts into the
pod's environment); the AppD's ``deployment.helm.values`` are passed as they are.
"""

from __future__ import annotations

import json
import subprocess
import tempfile

from mec_platform.appd import AppD
from mec_platform.backends import BackendError, mec_env


class HelmBackend:
    name = "helm"

    def __init__(self, helm: str, kubeconfig: str | None, namespace: str) -> None:
        self._helm, self._kubeconfig, self._namespace = helm, kubeconfig, namespace

    def _run(self, *args: str, timeout: float = 300) -> str:
        cmd = [self._helm, *args, "--namespace", self._namespace]
        if self._kubeconfig:
            cmd += ["--kubeconfig", self._kubeconfig]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendError(f"helm failed: {exc}") from None
        if done.returncode != 0:
            raise BackendError(f"helm {args[0]}: {done.stderr.strip()}")
        return done.stdout

    def start(self, app_instance_id: str, appd: AppD, env: dict[str, str]) -> str:
        spec = appd.deployment.helm
        if spec is None:
            raise BackendError(f"AppD {appd.app_d_id} has no deployment.helm section")
        release = f"mec-{app_instance_id[:12]}"
        values = {**spec.values, "mec": {"env": mec_env(spec.env_prefix, env)}}
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(values, f)  # JSON is YAML; the file holds secrets only briefly (0600)
            f.flush()
            self._run("upgrade", "--install", release, spec.chart, "--values", f.name,
                      "--create-namespace", "--wait", "--timeout", "5m")  # fmt: skip
        return release

    def alive(self, ref: str) -> bool:
        try:
            status = json.loads(self._run("status", ref, "--output", "json"))
        except BackendError:
            return False
        return bool(status.get("info", {}).get("status") == "deployed")

    def stop(self, ref: str, timeout_s: float) -> None:
        try:
            self._run("uninstall", ref, "--wait", "--timeout", f"{int(timeout_s) + 60}s")
        except BackendError as exc:
            if "not found" not in str(exc):
                raise
