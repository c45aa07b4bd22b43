"""Apps as Docker containers, through the Docker engine's HTTP API on its Unix socket."""

from __future__ import annotations

from typing import Any

import httpx

from mec_platform.appd import AppD
from mec_platform.backends import BackendError, mec_env

API = "http://docker/v1.41"


class DockerBackend:
    name = "docker"

    def __init__(self, socket: str, network_mode: str = "host") -> None:
        self._http = httpx.Client(transport=httpx.HTTPTransport(uds=socket), timeout=120)
        self._network = network_mode

    def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            r = self._http.request(method, API + path, **kwargs)
        except httpx.HTTPError as exc:
            raise BackendError(f"Docker engine unreachable: {exc}") from None
        if r.status_code >= 400 and r.status_code != 404:
            raise BackendError(f"Docker {method} {path}: {r.status_code} {r.text.strip()}")
        return r

    def start(self, app_instance_id: str, appd: AppD, env: dict[str, str]) -> str:
        spec = appd.deployment.docker
        if spec is None:
            raise BackendError(f"AppD {appd.app_d_id} has no deployment.docker section")
        image = spec.image or appd.sw_image_descriptor.container_image
        assert image is not None  # the AppD validator ensures it
        if self._call("GET", f"/images/{image}/json").status_code == 404:
            name, _, tag = image.partition(":")
            self._call("POST", "/images/create", params={"fromImage": name, "tag": tag or "latest"})
        compute = appd.virtual_compute_descriptor
        body: dict[str, Any] = {
            "Image": image,
            "Env": [f"{k}={v}" for k, v in {**spec.env, **mec_env(spec.env_prefix, env)}.items()],
            "Labels": {"mts.mec.app_instance_id": app_instance_id},
            "HostConfig": {
                "NetworkMode": self._network,
                "NanoCpus": int(compute.virtual_cpu.num_virtual_cpu * 1e9),
                "Memory": compute.virtual_memory.virtual_mem_size * 2**20,
            },
        }
        if spec.entrypoint:
            body["Entrypoint"] = spec.entrypoint
        if spec.command:
            body["Cmd"] = spec.command
        r = self._call("POST", "/containers/create", params={"name": f"mec-{app_instance_id}"},
                       json=body)  # fmt: skip
        if r.status_code == 404:
            raise BackendError(f"image {image} not found")
        container = str(r.json()["Id"])
        self._call("POST", f"/containers/{container}/start")
        return container

    def alive(self, ref: str) -> bool:
        r = self._call("GET", f"/containers/{ref}/json")
        return r.status_code == 200 and bool(r.json()["State"]["Running"])

    def stop(self, ref: str, timeout_s: float) -> None:
        self._call("POST", f"/containers/{ref}/stop", params={"t": int(timeout_s)},
                   timeout=timeout_s + 30)  # fmt: skip
        self._call("DELETE", f"/containers/{ref}", params={"force": "true"})
