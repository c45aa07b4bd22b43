"""The Helm chart on a real Kubernetes node: `make test-k8s`.

deploy/k8s/cluster.sh starts the control plane and deploy/k8s/node.sh a node on this
machine (kubelet, kube-proxy, containerd, CNI, CoreDNS; docs/kubernetes.md). The emulated
RAN runs on the node (`testbed up --mec-here`: the node is the MEC host on the UEs' path).
The chart is installed with ci/node-values.yaml, then, through its Pods and Services:

- every Pod Running and Ready (time from `helm install` printed; docs/results.md);
- the RNIS adapter Pod polls the emulated RAN; RNIS over the chart's RabbitMQ reaches the
  PEP DaemonSet's BPF map; a download at an emulated UE through the PEP Pod, intact, with
  MELD on its RAN leg and MELD's counters moving; MEC 012 and Mp1 answer on their Services;
- `helm upgrade` with changed values (the platform and RNIS adapter Pods replaced) keeps
  the platform's packages, app instances, app credentials and subscriptions, the RNIS
  subscriptions and the Secret; `helm rollback` too;
- faults: the RabbitMQ Pod deleted (back from its StatefulSet, the gap shown by
  readiness, no restart), the PEP Pod deleted (its table and congestion controls not
  duplicated), the kubelet and containerd restarted (the Pods run on);
- the MEC platform's Helm backend instantiates an AppD (this chart) as a release whose
  Pod becomes Ready on the node;
- two nodes: a second kubelet joins from a network namespace (node.sh join) and the PEP
  DaemonSet places one Pod on each labelled node, each told its node's cells;
- `helm uninstall` leaves nothing on the node (no Pod, nftables table, congestion control
  or bpffs pin of the release), and the node's own teardown restores the machine.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import HOST_LOCK, SCENARIO
from harness import CHART, CLUSTER, REPO, Kube, helm, run, tool

from mec_common.ports import free_port

# A cold node (images imported into containerd) takes minutes before the first test.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

NODE = REPO / "deploy/k8s/node.sh"
NODE_VALUES = CHART / "ci/node-values.yaml"
COMPONENTS = ("rabbitmq", "platform", "rnis-adapter", "pep", "path-manager", "dashboard")
NODE_IMAGES = ("pause", "rabbitmq", "mec-platform", "rnis-adapter", "pep", "path-manager",
               "dashboard")  # fmt: skip
READY_TIMEOUT_S = 480  # a hang guard (278 s at load 50): the figure is printed, not asserted
WAIT = ("--wait", "--timeout", f"{READY_TIMEOUT_S}s")
DOWNLOAD_BYTES = 4 * 2**20
# Settings the kubelet and kube-proxy write (node.sh restores them).
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "net/ipv4/conf/all/route_localnet")  # fmt: skip


def sysctls() -> dict[str, str]:
    return {key: Path("/proc/sys", key).read_text().strip() for key in SYSCTLS}


@dataclass
class Node:
    kube: Kube
    directory: Path
    name: str
    sysctls_before: dict[str, str]

    def kubectl(self, *args: str, timeout: float = 60) -> str:
        return run(tool("kubectl"), "--kubeconfig", str(self.kube.kubeconfig), *args,
                   timeout=timeout)  # fmt: skip

    def diagnostics(self, namespace: str) -> str:
        """Pods, events and the end of every container's log, for a failure message."""
        out = []
        kubectl = [tool("kubectl"), "--kubeconfig", str(self.kube.kubeconfig), "-n", namespace]
        for args in (("get", "pods", "-o", "wide"), ("get", "events")):
            done = subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60,
                                  check=False)  # fmt: skip
            out.append(done.stdout + done.stderr)
        for log in sorted((self.directory / "node/pod-logs").glob(f"{namespace}_*/*/*.log")):
            out.append(f"--- {log.parent.parent.name}/{log.parent.name}\n")
            out.append("".join(log.read_text(errors="replace").splitlines(True)[-15:]))
        return "\n".join(out)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    state = tmp_path_factory.mktemp("k8s")
    before = sysctls()
    try:
        kubeconfig = Path(run(str(CLUSTER), "up", str(state), timeout=1800).split()[-1])
        started = time.monotonic()
        name = run(str(NODE), "up", str(state), timeout=1800).split()[-1]
        print(f"node {name} Ready {time.monotonic() - started:.0f} s after node.sh up")
        yield Node(Kube.connect(kubeconfig), state, name, before)
    finally:
        run(str(CLUSTER), "down", str(state), timeout=300)


@dataclass
class EmulatedRan:
    name: str
    token: str

    def in_netns(self, role: str, *cmd: str, timeout: float = 120) -> str:
        return run("ip", "netns", "exec", f"{self.name}-{role}", *cmd, timeout=timeout)


@pytest.fixture(scope="module")
def testbed(node: Node) -> Iterator[EmulatedRan]:
    """The emulated RAN with this machine's namespace as the MEC host (the node), as in
    the compose host-mode test: one at a time on a machine (its interfaces ran0, wan0)."""
    name = f"k{secrets.token_hex(3)}"
    token = secrets.token_hex(16)
    testbed_cli = str(REPO / ".venv/bin/testbed")
    HOST_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with HOST_LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [testbed_cli, "up", "--config", str(SCENARIO), "--name", name, "--mec-here",
             "--emulator", str(REPO / "build/bin/ran-emulator")],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "TESTBED_EMULATOR_TOKEN": token},
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        try:
            yield EmulatedRan(name, token)
        finally:
            run(testbed_cli, "down", "--name", name, timeout=120)


@dataclass
class Release:
    name: str
    node: Node
    settings: list[str]

    @property
    def namespace(self) -> str:
        return self.name

    def helm(self, *args: str, timeout: float = 300) -> str:
        kc = ["--kubeconfig", str(self.node.kube.kubeconfig), "--namespace", self.namespace]
        return run(helm(), *args, *kc, timeout=timeout)

    def get(self, path: str) -> Any:
        r = self.node.kube.http.get(f"/api/v1/namespaces/{self.namespace}{path}")
        return r.raise_for_status().json()

    def secret(self, key: str) -> str:
        data = self.get(f"/secrets/{self.name}-credentials")["data"]
        return base64.b64decode(data[key]).decode()

    def url(self, component: str, path: str) -> str:
        """Through the component's Service (its cluster IP, routed by kube-proxy)."""
        svc = self.get(f"/services/{self.name}-{component}")["spec"]
        return f"http://{svc['clusterIP']}:{svc['ports'][0]['port']}{path}"

    def api(self, component: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.secret('api-token')}"}
        return httpx.request(method, self.url(component, path), headers=headers, timeout=10,
                             **kwargs)  # fmt: skip

    def platform(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The platform's API as its admin (OAuth2 client credentials)."""
        r = httpx.post(self.url("platform", "/oauth2/token"), timeout=10,
                       data={"grant_type": "client_credentials"},
                       auth=("admin", self.secret("platform-admin-secret")))  # fmt: skip
        assert r.status_code == 200, r.text
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        headers |= kwargs.pop("headers", {})
        return httpx.request(method, self.url("platform", path), headers=headers, timeout=10,
                             **kwargs)  # fmt: skip

    def pods(self) -> dict[str, dict[str, Any]]:
        """component -> its Pod (one each)."""
        items = self.get("/pods")["items"]
        return {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in items}

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds until every component's Pod is Running and Ready (with all containers
        ready, none restarting): the hang guard fails with the node's diagnostics."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            pods = self.pods()
            if set(pods) == set(COMPONENTS) and all(ready(p) for p in pods.values()):
                return time.monotonic() - started
            time.sleep(0.5)
        pytest.fail(f"Pods not Ready after {timeout} s\n{self.node.diagnostics(self.namespace)}")

    def wait_services(self, timeout: float = 60) -> float:
        """Seconds until every Service answers on its cluster IP (kube-proxy applies a
        Pod's readiness to the Service's rules a moment after the Pod is Ready)."""
        started = time.monotonic()
        pending = set(COMPONENTS)
        while pending and time.monotonic() - started < timeout:
            for component in sorted(pending):
                url = self.url(component, "")
                host, port = url.removeprefix("http://").split(":")
                with contextlib.suppress(OSError), socket.create_connection((host, int(port)), 2):
                    pending.discard(component)
            time.sleep(0.2)
        assert not pending, f"Services not answering after {timeout} s: {pending}"
        return time.monotonic() - started


def ready_at(release: Release, since: float) -> dict[str, int]:
    """component -> seconds from since (a wall-clock time) to its Pod's Ready condition."""
    out = {}
    for component, pod in release.pods().items():
        when = next(c["lastTransitionTime"] for c in pod["status"]["conditions"]
                    if c["type"] == "Ready")  # fmt: skip
        out[component] = round(datetime.fromisoformat(when).timestamp() - since)
    return out


def ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") != "Running":
        return False
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
    return conditions.get("Ready") == "True"


def persistent_volumes(node: Node, release: str) -> None:
    """What a StorageClass would provide: a hostPath volume for each claim of the release,
    owned by the user its service runs as."""
    for claim, uid, size in ((f"data-{release}-rabbitmq-0", 10002, "2Gi"),
                             (f"{release}-platform", 10001, "1Gi"),
                             (f"{release}-rnis-adapter", 10001, "64Mi")):  # fmt: skip
        path = node.directory / "volumes" / claim
        path.mkdir(parents=True)
        path.chmod(0o700)
        os.chown(path, uid, uid)
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": claim},
            "spec": {
                "capacity": {"storage": size},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": release, "name": claim},
            },
        }
        node.kube.http.post("/api/v1/persistentvolumes", json=body).raise_for_status()


@pytest.fixture(scope="module")
def release(node: Node, testbed: EmulatedRan) -> Iterator[Release]:
    name = f"k{secrets.token_hex(3)}"
    settings = [
        "--values", str(NODE_VALUES),
        "--set", f"rnisAdapter.env.RNIS_FLEXRAN_TOKEN={testbed.token}",
        # The node's namespace is the machine's: the PEP's table, mark, routing table and
        # port of its own.
        "--set", f"pep.env.PEP_TPROXY_NFT_TABLE=mts_pep_{name}",
        "--set", f"pep.env.PEP_TPROXY_MARK={0x1000 + secrets.randbelow(0xE000)}",
        "--set", f"pep.env.PEP_TPROXY_TABLE={1000 + secrets.randbelow(30000)}",
        "--set", f"pep.env.PEP_TRANSPARENT_PORT={free_port()}",
    ]  # fmt: skip
    r = Release(name, node, settings)
    persistent_volumes(node, name)
    wall = time.time()
    started = time.monotonic()
    notes = r.helm("install", name, str(CHART), "--create-namespace", *settings)
    assert "The PEP runs on 1 of the cluster's 1 node(s)" in notes, notes
    installed = time.monotonic() - started
    waited = r.wait_ready()
    routed = r.wait_services()
    print(f"helm install returned after {installed:.1f} s; every Pod Ready "
          f"{installed + waited:.1f} s after it started; each: {ready_at(r, wall)}; "
          f"every Service answering {routed:.1f} s later")  # fmt: skip
    try:
        yield r
    finally:
        subprocess.run(
            [helm(), "uninstall", name, "--kubeconfig", str(node.kube.kubeconfig),
             "--namespace", name, "--wait"],
            capture_output=True, timeout=300, check=False,
        )  # fmt: skip


# ----------------------------------------------------------------------------- tests
def test_every_pod_runs_and_is_ready(release: Release) -> None:
    pods = release.pods()
    assert set(pods) == set(COMPONENTS)
    for component, pod in pods.items():
        assert ready(pod), component
        assert pod["spec"]["nodeName"] == release.node.name
        statuses = pod["status"]["containerStatuses"]
        assert all(s["ready"] for s in statuses), (component, statuses)
    # The PEP and the path manager in the node's namespace, the others in the pod network.
    node_ip = pods["pep"]["status"]["hostIP"]
    assert pods["pep"]["status"]["podIP"] == node_ip == pods["path-manager"]["status"]["podIP"]
    assert pods["platform"]["status"]["podIP"].startswith("10.244.")


def test_containerd_keeps_only_the_current_images(node: Node) -> None:
    """node.sh prunes the builds of earlier runs from the node's containerd root (kept
    across runs), so that repeated runs do not fill the disk: every image left there is a
    name of the current build of one of the suite's images."""
    ctr = ["ctr", "--address", str(node.directory / "node/containerd/containerd.sock"),
           "-n", "k8s.io", "images", "ls"]  # fmt: skip
    images = [line.split()[:3] for line in run(*ctr).splitlines()[1:]]
    current = {digest for ref, _, digest in images if ref.startswith("docker.io/mts/")
               and ref.endswith(":latest")}  # fmt: skip
    assert len(current) == len(NODE_IMAGES), images
    assert {digest for _, _, digest in images} == current, images


def test_apis_answer_through_their_services(release: Release) -> None:
    # Denied without a token (ETSI ProblemDetails), the health endpoints open.
    r = httpx.get(release.url("rnis-adapter", "/rni/v2/queries/layer2_meas"), timeout=10)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")
    for component in ("platform", "rnis-adapter", "pep", "path-manager", "dashboard"):
        r = httpx.get(release.url(component, "/healthz"), timeout=10)
        assert r.status_code == 200, (component, r.text)
    # MEC 012: the emulated UE, polled from the RAN by the adapter's Pod.
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while "10.30.0.1" not in seen and time.monotonic() < deadline:
        r = release.api("rnis-adapter", "GET", "/rni/v2/queries/layer2_meas")
        assert r.status_code == 200, r.text
        seen = {ue["associateId"]["value"] for ue in r.json().get("cellUEInfo", [])}
        time.sleep(0.5)
    assert "10.30.0.1" in seen
    # Mp1 (MEC 011) and the platform's MEC 010-2 APIs.
    r = release.platform("GET", "/mec_service_mgmt/v1/services")
    assert r.status_code == 200 and isinstance(r.json(), list), r.text
    r = release.platform("GET", "/app_pkgm/v1/app_packages")
    assert r.status_code == 200, r.text


def pep_state(release: Release, ue: str) -> tuple[dict[str, Any], dict[str, Any]]:
    state = release.api("pep", "GET", "/pep/v1/ran_aware/state")
    radio = release.api("pep", "GET", f"/pep/v1/ran_aware/ues/{ue}")
    assert state.status_code == 200 and radio.status_code == 200, (state.text, radio.text)
    return state.json(), radio.json()


def test_download_at_a_ue_through_the_pep_pod(release: Release, testbed: EmulatedRan) -> None:
    server, ue = "10.10.0.2", "10.30.0.1"
    blob = Path(f"/tmp/mts-k8s-{release.name}.bin")
    blob.write_bytes(secrets.token_bytes(DOWNLOAD_BYTES))
    try:
        testbed.in_netns("server", "sh", "-c", f"python3 -m http.server 8080 --bind {server} "
                         f"--directory {blob.parent} >/dev/null 2>&1 &")  # fmt: skip
        testbed.in_netns("server", "sh", "-c", f"for i in $(seq 100); do curl -so /dev/null "
                         f"http://{server}:8080/ && exit 0; sleep 0.1; done; exit 1")  # fmt: skip
        _, before = pep_state(release, ue)
        flows, radios = download(release, testbed, f"http://{server}:8080/{blob.name}", blob)
    finally:
        blob.unlink(missing_ok=True)
        subprocess.run(["ip", "netns", "exec", f"{testbed.name}-server", "pkill", "-f",
                        "http.server 8080"], check=False)  # fmt: skip
    state, after = pep_state(release, ue)
    relaying = [f for f in flows if f["ran"]["tcp"]]
    assert relaying, "the PEP never showed the download's flow"
    cca = relaying[0]["ran"]["tcp"]["congestion_control"]
    assert cca in state["kernel"]["congestion_controls"].values(), (cca, state)
    # The PEP Pod registered MELD from the Pod, pinned its maps in the node's bpffs, and
    # the RNIS data of the UE (bound when its flow started) came over the chart's RabbitMQ.
    assert state["kernel"]["loaded"] and Path(state["kernel"]["pin_dir"]).is_dir(), state
    assert state["kernel"]["pin_dir"] == f"/sys/fs/bpf/mts-pep/{release.name}"
    assert state["rnis"]["broker"].startswith(f"amqp://{release.name}-rabbitmq:")
    assert state["rnis"]["applied"] > 0, state
    assert radios and all(r["radio"] is not None for r in radios), radios
    assert min(r["radio"]["age_ms"] for r in radios) < 1000, radios
    # MELD decided on the download's losses with the radio data (its counters moved).
    moved = {k: after["counters"][k] - before["counters"][k] for k in after["counters"]}
    assert sum(moved.values()) > 0, (before, after)
    print(f"MELD counters during the download: {moved}")
    # All of it under containerd's RuntimeDefault seccomp profile (the chart's default for
    # the PEP too): bpf() is allowed with CAP_BPF, unshare is not, so the relay threads
    # share the process's descriptor table; io_uring is allowed (containerd 1.6; 2.0
    # refuses it), so the default relay is the compiled core, in that shared table.
    stats = release.api("pep", "GET", "/pep/v1/stats").json()
    assert stats["relay"] == "uring", stats
    assert stats["private_descriptor_tables"] is False, stats
    metrics = httpx.get(release.url("pep", "/metrics"), timeout=10).text
    assert "pep_private_descriptor_tables 0.0" in metrics
    print(f"PEP under RuntimeDefault: relay {stats['relay']} ({stats['relay_reason']}), one "
          f"descriptor table of {stats['descriptor_limit']}")  # fmt: skip


Sample = list[dict[str, Any]]


def download(release: Release, testbed: EmulatedRan, url: str, blob: Path) -> tuple[Sample, Sample]:
    """Download url at the UE (intact, checked by its SHA-256); the PEP's relaying flows of
    the UE and its radio state (RNIS data in the BPF map) seen meanwhile."""
    result: dict[str, str] = {}

    def fetch() -> None:
        result["sha"] = testbed.in_netns(
            "ue1", "sh", "-c",
            f"curl -sS --retry 5 --retry-connrefused --max-time 60 -o {blob}.ue {url} "
            f"&& sha256sum {blob}.ue && rm {blob}.ue", timeout=90,
        ).split()[0]  # fmt: skip

    client = threading.Thread(target=fetch)
    client.start()
    seen: Sample = []
    radios: Sample = []
    while client.is_alive() and len(radios) < 3:
        r = release.api("pep", "GET", "/pep/v1/flows", params={"ue": "10.30.0.1"})
        assert r.status_code == 200, r.text
        seen = seen or [f for f in r.json()["flows"] if f["stage"] == "relaying"]
        if seen:
            radios.append(pep_state(release, "10.30.0.1")[1])
        time.sleep(0.1)
    client.join(timeout=90)
    expected = run("sha256sum", str(blob)).split()[0]
    assert result.get("sha") == expected, "the download through the PEP was not intact"
    return seen, radios


@dataclass
class Kept:
    """What an upgrade must not lose: ids of what was created, and the credentials."""

    package: str
    instance: str
    app_client: tuple[str, str]
    lcm_subscription: str
    rnis_subscription: str
    secret: dict[str, str]


def create_data(release: Release) -> Kept:
    appd = (REPO / "mec-platform/appds/path-manager.yaml").read_bytes()
    r = release.platform("POST", "/app_pkgm/v1/app_packages", content=appd,
                         headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert r.status_code == 201, r.text
    package, appd_id = r.json()["id"], r.json()["appDId"]
    r = release.platform("POST", "/app_lcm/v1/app_instances",
                         json={"appDId": appd_id, "appInstanceName": "kept"})  # fmt: skip
    assert r.status_code == 201, r.text
    instance = r.json()["id"]
    r = release.platform("POST", f"/app_lcm/v1/app_instances/{instance}/credentials")
    assert r.status_code in (200, 201), r.text
    client = (r.json()["clientId"], r.json()["clientSecret"])
    callback = "http://10.244.0.1:9/notifications"
    body = {"subscriptionType": "AppInstanceStateChangeSubscription", "callbackUri": callback}
    r = release.platform("POST", "/app_lcm/v1/subscriptions", json=body)
    assert r.status_code == 201, r.text
    lcm_subscription = r.json()["id"]
    r = release.api("rnis-adapter", "POST", "/rni/v2/subscriptions", json={
        "subscriptionType": "CellChangeSubscription", "callbackReference": callback,
        "filterCriteriaAssocHo": {"associateId": [{"type": 1, "value": "10.30.0.1"}]}})  # fmt: skip
    assert r.status_code == 201, r.text
    # The Location is the in-cluster URL (RNIS_PUBLIC_URL): its path, through the Service.
    rnis_subscription = urlsplit(r.headers["location"]).path
    secret = {k: release.secret(k) for k in ("amqp-password", "api-token", "platform-admin-secret")}
    return Kept(package, instance, client, lcm_subscription, rnis_subscription, secret)


def assert_kept(release: Release, kept: Kept) -> None:
    assert {k: release.secret(k) for k in kept.secret} == kept.secret
    r = release.platform("GET", f"/app_pkgm/v1/app_packages/{kept.package}")
    assert r.status_code == 200, r.text
    r = release.platform("GET", f"/app_lcm/v1/app_instances/{kept.instance}")
    assert r.status_code == 200, r.text
    r = release.platform("GET", f"/app_lcm/v1/subscriptions/{kept.lcm_subscription}")
    assert r.status_code == 200, r.text
    r = httpx.post(release.url("platform", "/oauth2/token"), timeout=10, auth=kept.app_client,
                   data={"grant_type": "client_credentials"})  # fmt: skip
    assert r.status_code == 200, f"the app's credentials were lost: {r.text}"
    headers = {"Authorization": f"Bearer {release.secret('api-token')}"}
    r = httpx.get(release.url("rnis-adapter", kept.rnis_subscription), headers=headers,
                  timeout=10)  # fmt: skip
    assert r.status_code == 200, f"the RNIS subscription was lost: {r.text}"


@pytest.fixture(scope="module")
def kept(release: Release) -> Kept:
    return create_data(release)


def pod_uids(release: Release) -> dict[str, str]:
    return {c: p["metadata"]["uid"] for c, p in release.pods().items()}


def test_upgrade_with_a_changed_value_keeps_the_data(release: Release, kept: Kept) -> None:
    before = pod_uids(release)
    changed = ["--set", "platform.env.PLATFORM_LOG_LEVEL=DEBUG",
               "--set", "rnisAdapter.env.RNIS_LOG_LEVEL=DEBUG"]  # fmt: skip
    # --wait: until the new ReplicaSets' Pods are Ready (helm returns before the rollout).
    release.helm("upgrade", release.name, str(CHART), *release.settings, *changed, *WAIT,
                 timeout=READY_TIMEOUT_S + 60)  # fmt: skip
    release.wait_ready()
    release.wait_services()
    after = pod_uids(release)
    assert [after[c] != before[c] for c in ("platform", "rnis-adapter")] == [True, True]
    env = {e["name"]: e.get("value") for e in
           release.pods()["platform"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["PLATFORM_LOG_LEVEL"] == "DEBUG"
    assert_kept(release, kept)


def test_rollback_keeps_the_data(release: Release, kept: Kept) -> None:
    release.helm("rollback", release.name, "1", *WAIT, timeout=READY_TIMEOUT_S + 60)
    release.wait_ready()
    release.wait_services()
    env = {e["name"]: e.get("value") for e in
           release.pods()["platform"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["PLATFORM_LOG_LEVEL"] == "INFO"
    assert_kept(release, kept)


def delete_pod(release: Release, component: str) -> str:
    pod = release.pods()[component]["metadata"]
    path = f"/api/v1/namespaces/{release.namespace}/pods/{pod['name']}"
    release.node.kube.http.delete(path).raise_for_status()
    return str(pod["uid"])


def test_rabbitmq_pod_deleted(release: Release) -> None:
    """The StatefulSet brings the broker back; its clients' readiness shows the gap (they
    retry by themselves, never restart) and they are Ready again."""
    old = delete_pod(release, "rabbitmq")
    unready: set[str] = set()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        pods = release.pods()
        unready |= {c for c, p in pods.items() if not ready(p)}
        back = "rabbitmq" in pods and pods["rabbitmq"]["metadata"]["uid"] != old
        if back and all(ready(p) for p in pods.values()) and len(pods) == len(COMPONENTS):
            break
        time.sleep(0.5)
    release.wait_ready()
    release.wait_services()
    assert "rabbitmq" in unready
    assert unready & {"rnis-adapter", "pep", "path-manager"}, f"no gap shown: {unready}"
    restarts = {c: sum(s["restartCount"] for s in p["status"]["containerStatuses"])
                for c, p in release.pods().items()}  # fmt: skip
    assert restarts == dict.fromkeys(COMPONENTS, 0), restarts
    # The feed recovered: MEC 012 reports the UE again, from fresh polls.
    r = release.api("rnis-adapter", "GET", "/rni/v2/queries/layer2_meas")
    assert r.status_code == 200 and r.json().get("cellUEInfo"), r.text


def release_ccas(release: Release) -> list[str]:
    state, _ = pep_state(release, "10.30.0.1")
    return sorted(state["kernel"]["congestion_controls"].values())


def test_pep_pod_deleted(release: Release) -> None:
    """The DaemonSet replaces the PEP; the old one removed its nftables table and
    congestion controls, the new one installed them once."""
    ccas = release_ccas(release)
    old = delete_pod(release, "pep")
    deadline = time.monotonic() + READY_TIMEOUT_S
    while release.pods().get("pep", {}).get("metadata", {}).get("uid") in (old, None):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    release.wait_ready()
    release.wait_services()
    tables = run("nft", "list", "tables").split("\n")
    assert tables.count(f"table ip mts_pep_{release.name}") == 1, tables
    assert release_ccas(release) == ccas
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    assert sorted(c for c in available if c in ccas) == ccas


def test_node_reboot_kubelet_and_containerd_restarted(release: Release) -> None:
    """The kubelet and containerd restart (node.sh restart): the Pods run on, the same
    ones, Ready, and the Services answer."""
    before = pod_uids(release)
    run(str(NODE), "restart", str(release.node.directory), timeout=300)
    release.wait_ready()
    release.wait_services()
    assert pod_uids(release) == before
    r = release.api("pep", "GET", "/pep/v1/flows")
    assert r.status_code == 200, r.text


def test_uninstall_leaves_nothing_on_the_node(release: Release) -> None:
    state, _ = pep_state(release, "10.30.0.1")
    ccas = set(state["kernel"]["congestion_controls"].values())
    release.helm("uninstall", release.name, "--wait")
    deadline = time.monotonic() + 120
    while release.get("/pods")["items"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert release.get("/pods")["items"] == []
    assert f"mts_pep_{release.name}" not in run("nft", "list", "tables")
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    assert not ccas & set(available), (ccas, available)
    assert not Path(f"/sys/fs/bpf/mts-pep/{release.name}").exists()
    running = release.node.kubectl("get", "pods", "--all-namespaces", "-o", "name")
    assert running.strip() == ""


def test_an_unschedulable_pep_is_reported(node: Node) -> None:
    """A PEP whose nodeSelector matches no node: DaemonSets then schedule nothing and
    `helm install --wait` succeeds, so the notes (and `helm status`) say it."""
    name = f"u{secrets.token_hex(3)}"
    kc = ["--kubeconfig", str(node.kube.kubeconfig), "--namespace", name]
    only_pep = [f"{c}.enabled=false" for c in
                ("rabbitmq", "platform", "rnisAdapter", "pathManager", "dashboard")]  # fmt: skip
    out = run(helm(), "install", name, str(CHART), *kc, "--create-namespace",
              "--set", ",".join([*only_pep, "amqp.host=broker.invalid"]),
              "--set-string", "pep.nodeSelector.mts\\.example/mec-host=true")  # fmt: skip
    try:
        warning = "WARNING: no node has the labels of pep.nodeSelector"
        assert warning in out, out
        assert warning in run(helm(), "status", name, *kc)
        ds = f"/apis/apps/v1/namespaces/{name}/daemonsets/{name}-pep"
        deadline = time.monotonic() + 60
        while "desiredNumberScheduled" not in node.kube.http.get(ds).json()["status"]:
            assert time.monotonic() < deadline
            time.sleep(0.5)
        assert node.kube.http.get(ds).json()["status"]["desiredNumberScheduled"] == 0
    finally:
        run(helm(), "uninstall", name, *kc, "--wait")


def test_platform_helm_backend_instantiates_an_app_on_the_node(node: Node, tmp_path: Path) -> None:
    """The MEC platform (on the node's machine, helm backend with the node's kubeconfig)
    instantiates an AppD whose deployment is this chart (the dashboard alone) as a real
    release: `helm upgrade --install --wait` returns once its Pod is Ready on the node."""
    from mec_platform.testing import Running, make_settings, onboard, wait_op

    namespace = f"a{secrets.token_hex(3)}"
    # On the pods' bridge (node.sh's gateway): PLATFORM_URL must be reachable from the Pod.
    platform = Running(make_settings(tmp_path / "platform", backend="helm", helm_binary=helm(),
                                     kubeconfig=str(node.kube.kubeconfig), http_host="10.244.0.1",
                                     helm_namespace=namespace))  # fmt: skip
    iid = ""
    try:
        off = {"enabled": False}
        values = {"image": {"tag": "latest", "pullPolicy": "Never"},
                  "amqp": {"host": "broker.invalid"}, "rabbitmq": off, "platform": off,
                  "rnisAdapter": off, "pep": off, "pathManager": off}  # fmt: skip
        appd = {"appDId": "k8s-dashboard", "appName": "k8s-dashboard", "appProvider": "mts",
                "appSoftVersion": "1", "appDVersion": "1",
                "deployment": {"helm": {"chart": str(CHART), "values": values,
                                        "envPrefix": "DASHBOARD_"}}}  # fmt: skip
        onboard(platform, json.dumps(appd))
        admin = platform.admin
        iid = admin.post("/app_lcm/v1/app_instances", json={"appDId": "k8s-dashboard"}).json()["id"]
        started = time.monotonic()
        op = admin.post(f"/app_lcm/v1/app_instances/{iid}/instantiate").json()
        op = wait_op(platform, op, timeout=READY_TIMEOUT_S)
        assert op["operationState"] == "COMPLETED", op
        print(f"helm backend: instance Ready {time.monotonic() - started:.1f} s after instantiate")
        pods = node.kube.http.get(f"/api/v1/namespaces/{namespace}/pods").json()["items"]
        assert [p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods] == [
            "dashboard"
        ]
        assert ready(pods[0]) and pods[0]["spec"]["nodeName"] == node.name
        env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
        assert env["DASHBOARD_APP_INSTANCE_ID"] == iid
        op = admin.post(f"/app_lcm/v1/app_instances/{iid}/terminate",
                        json={"terminationType": "FORCEFUL"}).json()  # fmt: skip
        assert wait_op(platform, op, timeout=300)["operationState"] == "COMPLETED"
    finally:
        platform.stop()
        subprocess.run([helm(), "uninstall", f"mec-{iid[:12]}",
                        "--kubeconfig", str(node.kube.kubeconfig), "--namespace", namespace],
                       capture_output=True, timeout=120, check=False)  # fmt: skip


def label(node: Node, name: str, value: str | None) -> None:
    body = {"metadata": {"labels": {"mts.example/mec-host": value}}}
    node.kube.http.patch(f"/api/v1/nodes/{name}", json=body,
                         headers={"Content-Type": "application/merge-patch+json"}
                         ).raise_for_status()  # fmt: skip


def process_env(node_dir: Path, pod: dict[str, Any]) -> dict[str, str]:
    """The environment of a Pod's first container, read from its process on the machine
    (through the containerd of the node it runs on)."""
    container = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    sock = node_dir / "containerd/containerd.sock"
    tasks = run("ctr", "--address", str(sock), "-n", "k8s.io", "tasks", "ls").splitlines()
    pid = next(line.split()[1] for line in tasks if line.startswith(container))
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_a_second_node_gets_its_own_pep(node: Node) -> None:
    """Two MEC-host nodes: a second kubelet joins from a network namespace of this machine
    (node.sh join: its own containerd, CNI range, kube-proxy, node IP in the namespace).
    The PEP DaemonSet places one Pod on each labelled node, each in its node's namespace
    with its own nftables table, each Ready (the worker's through its kube-proxy to the
    RabbitMQ Service on the first node) and told its node and the cells of every node
    (pep.cellsByNode); a node that loses the label loses its PEP."""
    started = time.monotonic()
    worker = run(str(NODE), "join", str(node.directory), timeout=600).split()[-1]
    print(f"worker {worker} Ready {time.monotonic() - started:.0f} s after node.sh join")
    name = f"m{secrets.token_hex(3)}"
    kc = ["--kubeconfig", str(node.kube.kubeconfig), "--namespace", name]
    nodes = (node.name, worker)
    cells = {node.name: "10000-0", worker: "10000-1"}
    table = f"mts_pep_{name}"
    settings = [
        "--set", "image.tag=latest,image.pullPolicy=Never",
        "--set", "platform.enabled=false,rnisAdapter.enabled=false,pathManager.enabled=false",
        "--set", "dashboard.enabled=false,rabbitmq.persistence.enabled=false",
        # One kernel under both nodes: MELD's congestion controls and pins are per kernel,
        # so the PEPs of one release cannot both register them here (on real nodes each
        # has its own kernel).
        "--set", "pep.bpf.enabled=false",
        "--set", f"pep.env.PEP_TPROXY_NFT_TABLE={table},pep.env.PEP_RNIS_FEED=cell",
        "--set", f"pep.env.PEP_TRANSPARENT_PORT={free_port()}",
        "--set", f"pep.env.PEP_TPROXY_MARK={0x1000 + secrets.randbelow(0xE000)}",
        "--set", f"pep.env.PEP_TPROXY_TABLE={1000 + secrets.randbelow(30000)}",
        "--set-string", "pep.nodeSelector.mts\\.example/mec-host=true",
        "--set", "pep.tolerations[0].key=mts.example/worker,pep.tolerations[0].operator=Exists",
        *[arg for n, c in cells.items() for arg in ("--set", f"pep.cellsByNode.{n}[0]={c}")],
    ]  # fmt: skip
    try:
        for n in nodes:
            label(node, n, "true")
        notes = run(helm(), "install", name, str(CHART), *kc, "--create-namespace", *settings)
        assert "The PEP runs on 2 of the cluster's 2 node(s)" in notes, notes
        release = Release(name, node, settings)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            peps = [p for p in release.get("/pods")["items"]
                    if p["metadata"]["labels"]["app.kubernetes.io/component"] == "pep"]  # fmt: skip
            if len(peps) == 2 and all(ready(p) for p in peps):
                break
            assert time.monotonic() < deadline, node.diagnostics(name)
            time.sleep(0.5)
        print(f"two PEPs Ready {time.monotonic() - started:.0f} s after node.sh join")
        by_node = {p["spec"]["nodeName"]: p for p in peps}
        assert set(by_node) == set(nodes)
        assert by_node[worker]["status"]["hostIP"] == "10.245.0.2"  # in the namespace
        assert (
            by_node[node.name]["status"]["hostIP"]
            == (node.directory / "node/ip").read_text().strip()
        )
        assert f"table ip {table}" in run("nft", "list", "tables")
        worker_ns = ["ip", "netns", "exec", "mtsk8s-w1"]
        assert f"table ip {table}" in run(*worker_ns, "nft", "list", "tables")
        for n, pod in by_node.items():
            env = process_env(node.directory / ("worker" if n == worker else "node"), pod)
            assert env["PEP_NODE_NAME"] == n
            assert json.loads(env["PEP_RNIS_CELLS_BY_NODE"]) == {k: [c] for k, c in cells.items()}
        # The worker loses the label: the DaemonSet takes its PEP away (and its table).
        label(node, worker, None)
        while any(p["spec"]["nodeName"] == worker for p in release.get("/pods")["items"]):
            assert time.monotonic() < deadline
            time.sleep(0.5)
        while f"table ip {table}" in run(*worker_ns, "nft", "list", "tables"):
            assert time.monotonic() < deadline
            time.sleep(0.5)
    finally:
        subprocess.run([helm(), "uninstall", name, *kc, "--wait"], capture_output=True,
                       timeout=300, check=False)  # fmt: skip
        label(node, node.name, None)
        run(str(NODE), "leave", str(node.directory), timeout=300)
    assert "mtsk8s-w1" not in run("ip", "netns", "list")


def test_node_down_restores_the_machine(node: Node) -> None:
    """What the kubelet, kube-proxy, containerd and CNI changed on the machine is undone."""
    run(str(NODE), "down", str(node.directory), timeout=300)
    assert sysctls() == node.sysctls_before
    for cmd in ("iptables-save", "ip6tables-save"):
        chains = [line for line in run(cmd).splitlines() if line.startswith(":")]
        assert not [c for c in chains if c.startswith((":KUBE-", ":CNI-"))], chains
    assert "mtsk8s0" not in run("ip", "-o", "link", "show")
    mounts = Path("/proc/self/mounts").read_text()
    assert str(node.directory) not in mounts
    assert not Path("/sys/fs/cgroup/cpu/mts-k8s").exists()
    # The node's processes (the control plane of the same directory stops later).
    left = subprocess.run(["pgrep", "-f", f"{node.directory}/node"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert left.stdout.strip() == "", left.stdout
