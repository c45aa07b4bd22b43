"""The docker backend with the real Docker engine: a MEC app in a container registers over
Mp1 and is terminated gracefully. Runs when the engine is reachable (the deployment's
`make docker-engine` starts Debian's) and the suite's images are built (`make images`)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from mec_platform.testing import Running, make_settings, onboard, wait_op, wait_until

pytestmark = pytest.mark.docker
SOCKET = "/var/run/docker.sock"
IMAGE = "mts/pep:latest"  # any image of ours: it has Python and mec_common
SAMPLE = Path(__file__).with_name("sample_app.py")


def docker_ready() -> str | None:
    """None if the engine answers and has the image, else why not."""
    if not Path(SOCKET).exists():
        return f"no Docker engine ({SOCKET} is missing; `make docker-engine` starts one)"
    client = httpx.Client(transport=httpx.HTTPTransport(uds=SOCKET), timeout=10)
    try:
        r = client.get(f"http://docker/v1.41/images/{IMAGE}/json")
    except httpx.HTTPError as exc:
        return f"Docker engine unreachable: {exc}"
    return None if r.status_code == 200 else f"image {IMAGE} is not built (`make images`)"


def test_docker_backend_runs_a_mec_app_in_a_container(tmp_path: Path) -> None:
    reason = docker_ready()
    if reason:
        pytest.skip(reason)
    platform = Running(make_settings(tmp_path, backend="docker"))
    try:
        appd = {
            "appDId": "sample-in-docker", "appName": "sample", "appProvider": "mts-tests",
            "appSoftVersion": "1", "appDVersion": "1",
            "virtualComputeDescriptor": {"virtualCpu": {"numVirtualCpu": 0.5},
                                         "virtualMemory": {"virtualMemSize": 256}},
            "deployment": {"docker": {
                "image": IMAGE, "entrypoint": ["python3", "-c", SAMPLE.read_text()],
                "env": {"SAMPLE_SER_NAME": "in-docker"}}},
        }  # fmt: skip
        onboard(platform, json.dumps(appd))
        admin = platform.admin
        iid = admin.post("/app_lcm/v1/app_instances", json={"appDId": "sample-in-docker"})
        iid = iid.json()["id"]
        op = wait_op(platform, admin.post(f"/app_lcm/v1/app_instances/{iid}/instantiate").json(),
                     timeout=120)  # fmt: skip
        assert op["operationState"] == "COMPLETED", op
        services = "/mec_service_mgmt/v1/services"
        wait_until(lambda: admin.get(services, params={"ser_name": "in-docker"}).json(), 60,
                   "the containerised app's registration")  # fmt: skip
        container = admin.get(f"/app_lcm/v1/app_instances/{iid}").json()
        assert container["backend"] == "docker"

        op = admin.post(f"/app_lcm/v1/app_instances/{iid}/terminate",
                        json={"gracefulTerminationTimeout": 20}).json()  # fmt: skip
        assert wait_op(platform, op, timeout=120)["operationState"] == "COMPLETED"
        assert admin.get(services, params={"ser_name": "in-docker"}).json() == []
        engine = httpx.Client(transport=httpx.HTTPTransport(uds=SOCKET), timeout=10)
        gone = engine.get(f"http://docker/v1.41/containers/mec-{iid}/json")
        assert gone.status_code == 404  # stopped and removed
    finally:
        platform.stop()
