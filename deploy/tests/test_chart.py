"""The Helm chart against a real Kubernetes control plane (deploy/k8s/cluster.sh: etcd,
kube-apiserver, controller manager and scheduler v1.31; no kubelet).

- `helm lint --strict` with every values file, and the values schema refuses mistakes;
- every object rendered with every values file passes the API server's own validation
  (server-side dry run, strict field validation: unknown fields are errors), the
  ServiceMonitor included (the Prometheus Operator's CRD is installed first);
- least privilege in what is rendered: nothing privileged, capabilities dropped, only the
  PEP and the path manager run as root, with exactly the capabilities they need;
- `helm install`, `upgrade` (credentials are kept) and `uninstall` (nothing left);
- each container, run from its image in Docker exactly as the chart's pod spec says
  (security context, volumes, environment), starts and answers.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import CHART, CLUSTER, REPO, Kube, helm, run

pytestmark = [pytest.mark.slow]

VALUES = {"default": None} | {p.stem: p for p in sorted((CHART / "ci").glob("*.yaml"))}
# The Prometheus Operator's published CRD, from its Go module (the Go proxy serves it).
PROM_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.78.2"
SERVICEMONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"


def render(values: Path | None, *extra: str) -> list[dict[str, Any]]:
    args = ["--values", str(values)] if values else []
    out = run(helm(), "template", "mts", str(CHART), "--namespace", "mts", *args, *extra)
    return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kube]:
    state = tmp_path_factory.mktemp("kube")
    try:
        k = Kube.connect(Path(run(str(CLUSTER), "up", str(state), timeout=1800).split()[-1]))
        crd_dir = json.loads(run("go", "mod", "download", "-json", PROM_OPERATOR))["Dir"]
        k.apply_file(Path(crd_dir) / SERVICEMONITOR_CRD)
        yield k
    finally:
        run(str(CLUSTER), "down", str(state))


def namespace(kube: Kube, labels: dict[str, str] | None = None) -> str:
    name = f"mts-{secrets.token_hex(3)}"
    meta = {"name": name, "labels": labels or {}}
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}
    kube.http.post("/api/v1/namespaces", json=body).raise_for_status()
    return name


def containers(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every container of every workload, by container name."""
    out = {}
    for obj in objs:
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            pod = obj["spec"]["template"]["spec"]
            for c in pod["containers"]:
                out[c["name"]] = c | {"_pod": pod}
    return out


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_lint(values: Path | None) -> None:
    run(helm(), "lint", "--strict", str(CHART), *(["--values", str(values)] if values else []))


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("pep.env.RNIS_POLL_PERIOD=8ms", "does not match"),  # another service's variable
        ("pep.hostnetwork=true", "Additional property hostnetwork"),  # a typo
        ("rnisAdapter.ipMap.imsi.20896=not-an-ip", "ipv4"),
        ("image.pullPolicy=Sometimes", "must be one of"),
    ],
)
def test_values_schema_refuses_mistakes(setting: str, complaint: str) -> None:
    done = subprocess.run(
        [helm(), "template", "mts", str(CHART), "--set", setting],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert complaint in done.stderr


def test_every_service_is_there_by_default() -> None:
    objs = render(None)
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs)
    assert kinds == [
        ("DaemonSet", "mts-path-manager"),
        ("DaemonSet", "mts-pep"),
        ("Deployment", "mts-dashboard"),
        ("Deployment", "mts-platform"),
        ("Deployment", "mts-rnis-adapter"),
        ("PersistentVolumeClaim", "mts-platform"),
        ("PersistentVolumeClaim", "mts-rnis-adapter"),
        ("Secret", "mts-credentials"),
        ("Service", "mts-dashboard"),
        ("Service", "mts-path-manager"),
        ("Service", "mts-pep"),
        ("Service", "mts-platform"),
        ("Service", "mts-rabbitmq"),
        ("Service", "mts-rnis-adapter"),
        ("StatefulSet", "mts-rabbitmq"),
    ]


def test_least_privilege() -> None:
    for values in VALUES.values():
        for name, c in containers(render(values)).items():
            sc = c["securityContext"]
            assert not sc.get("privileged"), name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            assert c["_pod"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            assert sc.get("seccompProfile", {"type": "RuntimeDefault"}) == {
                "type": "RuntimeDefault"}, name  # fmt: skip
            if name in ("pep", "path-manager", "flowrtt"):
                assert sc["runAsUser"] == 0
            else:
                assert sc["runAsNonRoot"] is True and "add" not in sc["capabilities"], name
    flowrtt = containers(render(VALUES["flowrtt-values"]))["flowrtt"]["securityContext"]
    assert flowrtt["capabilities"]["add"] == ["NET_ADMIN", "BPF", "PERFMON"]
    pep = containers(render(None))["pep"]["securityContext"]
    assert pep["capabilities"]["add"] == ["NET_ADMIN", "BPF", "PERFMON"]
    assert pep["seccompProfile"] == {"type": "RuntimeDefault"}  # its own, to be changed per cluster
    no_bpf = containers(render(VALUES["no-bpf-values"]))["pep"]
    assert no_bpf["securityContext"]["capabilities"]["add"] == ["NET_ADMIN"]
    assert all(m["name"] != "bpffs" for m in no_bpf["volumeMounts"])


def test_the_flow_rtt_observer_is_off_unless_its_interfaces_are_named() -> None:
    assert "flowrtt" not in containers(render(None))
    done = subprocess.run(
        [helm(), "template", "mts", str(CHART), "--set", "flowRtt.enabled=true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "flowRtt.interfaces" in done.stderr
    objs = render(None, "--set", "flowRtt.enabled=true", "--set", "flowRtt.interfaces={ran0,ran1}",
                  "--set", "pep.nodeSelector.mec=yes")  # fmt: skip
    c = containers(objs)["flowrtt"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["FLOWRTT_INTERFACES"] == "ran0,ran1"
    assert env["FLOWRTT_INSTANCE"] == "mts-flowrtt-mts"  # its pins apart from other releases'
    assert env["FLOWRTT_API_TOKENS"] == {"secretKeyRef": {"name": "mts-credentials",
                                                          "key": "api-token"}}  # fmt: skip
    assert c["_pod"]["hostNetwork"] is True and c["_pod"]["nodeSelector"] == {"mec": "yes"}
    assert ("Service", "mts-flowrtt") in {(o["kind"], o["metadata"]["name"]) for o in objs}


def test_credentials_come_from_the_secret() -> None:
    for c in containers(render(None)).values():
        plain = {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}
        for name, value in plain.items():
            if re.search(r"_(PASS|PASSWORD|SECRET|TOKENS?)$", name):
                pytest.fail(f"{c['name']}: {name} is a plain value, not a secretKeyRef")
            assert "amqp://" not in value or "$(MTS_AMQP_PASSWORD)" in value, (name, value)


@pytest.mark.parametrize("values", VALUES.values(), ids=VALUES.keys())
def test_api_server_accepts_every_object(kube: Kube, values: Path | None) -> None:
    ns = namespace(kube)
    for obj in render(values, "--namespace", ns):
        r = kube.dry_run_create(obj, ns)
        assert r.status_code in (200, 201), f"{obj['kind']} {obj['metadata']['name']}: {r.text}"
        assert "warning" not in r.headers, (obj["kind"], r.headers["warning"])


def test_pod_security_standards(kube: Kube) -> None:
    """Every pod but the PEP's and the path manager's meets the "restricted" standard; those
    two need the "privileged" level (host network, root with capabilities)."""
    ns = namespace(kube, {"pod-security.kubernetes.io/warn": "restricted"})
    warned = set()
    for obj in render(None, "--namespace", ns):
        r = kube.dry_run_create(obj, ns)
        assert r.status_code in (200, 201), r.text
        if "restricted" in r.headers.get("warning", ""):
            warned.add(obj["metadata"]["name"])
    assert warned == {"mts-pep", "mts-path-manager"}


def test_api_server_refuses_an_unknown_field(kube: Kube) -> None:
    """The validation above can fail: a misspelt field in a rendered object is refused."""
    deployment = next(o for o in render(None) if o["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    r = kube.dry_run_create(deployment, namespace(kube))
    assert r.status_code == 400 and "imagePulPolicy" in r.text


def test_install_upgrade_uninstall(kube: Kube) -> None:
    ns = namespace(kube)
    kc = ["--kubeconfig", str(kube.kubeconfig), "--namespace", ns]
    out = run(helm(), "install", "mts", str(CHART), *kc)
    assert f"kubectl -n {ns} port-forward svc/mts-platform 8100:8100" in out
    secret_path = f"/api/v1/namespaces/{ns}/secrets/mts-credentials"
    before = kube.http.get(secret_path).raise_for_status().json()["data"]
    assert len(base64.b64decode(before["amqp-password"])) == 32
    assert kube.names(ns, "/apis/apps/v1/namespaces/{ns}/deployments") == [
        "mts-dashboard",
        "mts-platform",
        "mts-rnis-adapter",
    ]
    # The controllers act on what was installed: the Deployments' ReplicaSets and the
    # StatefulSet create Pods, which pass admission (there is no node to run them).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = kube.names(ns, "/api/v1/namespaces/{ns}/pods")
        if len(pods) == 4:
            break
        time.sleep(1)
    assert [p.rsplit("-", 2)[0] if "rabbitmq" not in p else p for p in pods] == [
        "mts-dashboard",
        "mts-platform",
        "mts-rabbitmq-0",
        "mts-rnis-adapter",
    ]

    run(helm(), "upgrade", "mts", str(CHART), *kc, "--set", "platform.env.PLATFORM_LOG_LEVEL=DEBUG")
    after = kube.http.get(secret_path).raise_for_status().json()["data"]
    assert after == before, "an upgrade must keep the generated credentials"
    status = json.loads(run(helm(), "status", "mts", *kc, "--output", "json"))
    assert status["info"]["status"] == "deployed" and status["version"] == 2

    run(helm(), "uninstall", "mts", *kc, "--wait", "--timeout", "60s")
    for resource in ("deployments", "statefulsets", "daemonsets"):
        assert kube.names(ns, "/apis/apps/v1/namespaces/{ns}/" + resource) == []
    for resource in ("services", "secrets", "persistentvolumeclaims", "configmaps"):
        left = kube.names(ns, "/api/v1/namespaces/{ns}/" + resource)
        assert [n for n in left if n.startswith("mts-")] == [], (resource, left)


# --- the chart's containers, run as the chart specifies, in Docker ---------------------------
# No kubelet runs here, so Docker stands in as the container runtime: each container of the
# default values starts from its image with the rendered securityContext (user, read-only
# root, dropped and added capabilities, no privilege escalation), volumes and environment,
# and must come up listening without restarting. Dependencies (broker, RAN) are absent, so
# readiness is not asked for, only that /healthz answers.

# Docker 20.10 (Debian 12) does not know CAP_BPF/CAP_PERFMON; SYS_ADMIN includes both.
DOCKER_CAPS = {"BPF": "SYS_ADMIN", "PERFMON": "SYS_ADMIN"}


def docker_args(c: dict[str, Any], name: str) -> list[str]:
    sc, pod = c["securityContext"], c["_pod"]
    args = ["--name", name, "--network", "none", "--cap-drop", "ALL"]
    args += [f"--cap-add={DOCKER_CAPS.get(cap, cap)}" for cap in sc["capabilities"].get("add", [])]
    if sc.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    if sc.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    if "runAsUser" in sc:
        args += ["--user", str(sc["runAsUser"])]
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in c.get("volumeMounts", []):
        if "hostPath" in volumes.get(mount["name"], {}):  # the node's bpffs: one of its own
            args += [
                "--mount",
                f"type=volume,dst={mount['mountPath']},"
                "volume-driver=local,volume-opt=type=bpf,volume-opt=device=bpf",
            ]
        else:  # emptyDir or a PVC: an anonymous volume, initialised from the image
            args += ["--mount", f"type=volume,dst={mount['mountPath']}"]
    secret = secrets.token_hex(8)
    env = {  # a Secret holds the credentials; an optional key is absent
        e["name"]: e.get("value", secret)
        for e in c.get("env", [])
        if not e.get("valueFrom", {}).get("secretKeyRef", {}).get("optional")
    }
    for key, value in env.items():  # Kubernetes expands $(VAR) of earlier variables
        for ref, ref_value in env.items():
            value = value.replace(f"$({ref})", ref_value)
        args += ["--env", f"{key}={value}"]
    return args


def http_get(docker: str, container: str, port: int, path: str) -> tuple[int, str]:
    """GET inside the container with bash alone (the images need no curl)."""
    request = (
        f"exec 3<>/dev/tcp/127.0.0.1/{port}; printf 'GET {path} HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    )
    raw = run(docker, "exec", container, "bash", "-c", request)
    head, _, body = raw.replace("\r\n", "\n").partition("\n\n")  # text mode keeps no \r
    return int(head.split()[1]), body


@pytest.mark.docker
@pytest.mark.parametrize(
    "container", ["rabbitmq", "platform", "rnis-adapter", "pep", "path-manager", "flowrtt"]
)
def test_container_starts_as_the_chart_runs_it(container: str) -> None:
    docker = "/usr/bin/docker"
    run(str(REPO / "deploy/scripts/docker-engine.sh"), "ensure")
    c = containers(render(VALUES["flowrtt-values"], "--set", "image.tag=latest"))[container]
    port = c["ports"][0]["containerPort"]
    name = f"mts-chart-{container}-{secrets.token_hex(3)}"
    run(docker, "run", "--detach", *docker_args(c, name), c["image"], *c.get("args", []))
    try:
        listening = [docker, "exec", name, "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if subprocess.run(listening, capture_output=True, check=False).returncode == 0:
                break
            time.sleep(1)
        state = json.loads(run(docker, "inspect", "--format", "{{json .State}}", name))
        restarts = run(docker, "inspect", "--format", "{{.RestartCount}}", name).strip()
        logs = subprocess.run(
            [docker, "logs", "--tail", "30", name], capture_output=True, text=True, check=False
        )
        assert state["Running"] and restarts == "0", logs.stdout + logs.stderr
        if container != "rabbitmq":  # the others answer /healthz: 200, or 503 naming the cause
            status, body = http_get(docker, name, port, "/healthz")
            assert status in (200, 503) and json.loads(body)["checks"], body
    finally:
        subprocess.run(
            [docker, "rm", "--force", "--volumes", name], capture_output=True, check=False
        )
