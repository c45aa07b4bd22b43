"""The docker and helm backends with the real things: a MEC app in a container registers
over Mp1 and is terminated gracefully; a Helm release is installed into a real Kubernetes
control plane and uninstalled. They run when the deployment's tools are there (`make
docker-engine`, `make images`, `make deploy-tools`); otherwise they say what is missing."""

from __future__ import annotations

import json
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml

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


REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "deploy" / "k8s" / "cluster.sh"
TOOLS = REPO / "deploy" / "scripts" / "tools.sh"
CHART = Path(__file__).with_name("charts") / "mec-env-app"


def helm_ready() -> str | None:
    if not CLUSTER.exists() or not TOOLS.exists():
        return "the deployment's cluster.sh/tools.sh are missing"
    bindir = subprocess.run([str(TOOLS), "path"], capture_output=True, text=True).stdout.strip()
    for tool in ("helm", "kube-apiserver"):
        if not (Path(bindir) / tool).exists():
            return f"{tool} is not built (`make deploy-tools`)"
    return None


def test_helm_backend_installs_and_uninstalls_a_release(tmp_path: Path) -> None:
    """On a real control plane (deploy/k8s/cluster.sh: no kubelet, so the test chart is a
    ConfigMap showing what the app's pod would get)."""
    reason = helm_ready()
    if reason:
        pytest.skip(reason)
    bindir = subprocess.run([str(TOOLS), "path"], capture_output=True, text=True).stdout.strip()
    state = tmp_path / "kube"
    up = subprocess.run([str(CLUSTER), "up", str(state)], capture_output=True, text=True,
                        timeout=600)  # fmt: skip
    assert up.returncode == 0, up.stderr
    kubeconfig = up.stdout.split()[-1]
    platform = Running(make_settings(tmp_path / "platform", backend="helm",
                                     helm_binary=f"{bindir}/helm", kubeconfig=kubeconfig,
                                     helm_namespace="mec-apps-test"))  # fmt: skip
    try:
        appd = {"appDId": "helm-app", "appName": "helm-app", "appProvider": "mts-tests",
                "appSoftVersion": "1", "appDVersion": "1",
                "deployment": {"helm": {"chart": str(CHART), "values": {"greeting": "hi"},
                                        "envPrefix": "APP_"}}}  # fmt: skip
        onboard(platform, json.dumps(appd))
        admin = platform.admin
        iid = admin.post("/app_lcm/v1/app_instances", json={"appDId": "helm-app"}).json()["id"]
        op = wait_op(platform, admin.post(f"/app_lcm/v1/app_instances/{iid}/instantiate").json(),
                     timeout=300)  # fmt: skip
        assert op["operationState"] == "COMPLETED", op

        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        tls = ssl.create_default_context(cafile=cluster["certificate-authority"])
        kube = httpx.Client(base_url=cluster["server"], verify=tls,
                            headers={"Authorization": f"Bearer {user['token']}"})  # fmt: skip
        cm = kube.get(f"/api/v1/namespaces/mec-apps-test/configmaps/mec-{iid[:12]}-env").json()
        assert cm["data"]["GREETING"] == "hi"
        assert cm["data"]["APP_INSTANCE_ID"] == iid == cm["data"]["APP_APP_INSTANCE_ID"]
        assert cm["data"]["PLATFORM_URL"] == platform.url
        op = admin.post(f"/app_lcm/v1/app_instances/{iid}/terminate",
                        json={"terminationType": "FORCEFUL"}).json()  # fmt: skip
        assert wait_op(platform, op, timeout=300)["operationState"] == "COMPLETED"
        gone = kube.get(f"/api/v1/namespaces/mec-apps-test/configmaps/mec-{iid[:12]}-env")
        assert gone.status_code == 404
    finally:
        platform.stop()
        subprocess.run([str(CLUSTER), "down", str(state)], capture_output=True, timeout=120)
