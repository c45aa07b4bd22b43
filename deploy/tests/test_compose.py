"""docker-compose.yml, profile emulated, for real: the images `make images` built, Debian's
Docker engine, the RAN emulator in namespaces around the MEC host's namespace.

Checks, in order: every service healthy; the RNIS API reports the emulated UEs; a download
from the server through the PEP arrives intact while MELD is active on its RAN leg; `down`
leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from typing import TYPE_CHECKING

import httpx
import pytest
import yaml
from harness import DOCKER, SERVICES, run

if TYPE_CHECKING:
    from harness import Stack

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOWNLOAD_BYTES = 6 * 2**20  # ~3 s at the 25-PRB cell's ~16 Mbit/s


def auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.token}"}


def test_every_service_is_healthy(stack: Stack) -> None:
    rows = [json.loads(line) for line in stack.compose("ps", "--format", "json").splitlines()]
    state = {row["Service"]: (row["State"], row.get("Health", "")) for row in rows}
    expected = {
        "mec-host",
        "rabbitmq",
        "platform",
        "rnis-adapter",
        "pep",
        "path-manager",
        "testbed",
    }
    assert set(state) == expected
    for service, (running, health) in state.items():
        assert running == "running", service
        if service != "mec-host":  # a sleeping namespace holder, nothing to check
            assert health == "healthy", service
    for service in SERVICES:
        r = httpx.get(stack.url(service, "/healthz"), timeout=5)
        assert r.status_code == 200, (service, r.text)
        assert r.json()["status"] == "ok"
    for service in (*SERVICES, "rabbitmq-metrics"):  # Prometheus metrics, without a token
        r = httpx.get(stack.url(service, "/metrics"), timeout=5)
        assert r.status_code == 200 and "# TYPE" in r.text, service


def test_apis_deny_without_token(stack: Stack) -> None:
    protected = {
        "rnis-adapter": "/rni/v2/queries/layer2_meas",
        "pep": "/pep/v1/flows",
        "platform": "/mec_service_mgmt/v1/services",
        "path-manager": "/pm/v1/ues",
    }
    for service, path in protected.items():
        r = httpx.get(stack.url(service, path), timeout=5)
        assert r.status_code == 401, (service, r.status_code)
        assert r.headers["content-type"].startswith("application/problem+json")


def test_rnis_reports_the_emulated_ues(stack: Stack) -> None:
    ues = {path["ip"] for ue in stack.topology()["ues"] for path in ue["paths"]}  # type: ignore[attr-defined]
    assert ues
    seen: set[str] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and seen != ues:
        r = httpx.get(
            stack.url("rnis-adapter", "/rni/v2/queries/layer2_meas"), headers=auth(stack), timeout=5
        )
        assert r.status_code == 200, r.text
        seen = {ue["associateId"]["value"] for ue in r.json().get("cellUEInfo", [])}
        time.sleep(0.5)
    assert seen == ues


def test_download_through_the_pep_with_meld(stack: Stack) -> None:
    topo = stack.topology()
    ue = topo["ues"][0]  # type: ignore[index]
    ue_ip, server_ip = ue["paths"][0]["ip"], topo["server"]["addresses"]["wan0"]  # type: ignore[index]
    blob = "/tmp/mts-download.bin"
    stack.exec("testbed", "sh", "-c", f"head -c {DOWNLOAD_BYTES} /dev/urandom > {blob}")
    expected = stack.exec("testbed", "sha256sum", blob).split()[0]
    stack.exec(
        "testbed",
        "sh",
        "-c",
        f"ip netns exec {stack.testbed}-server python3 -m http.server 8080 "
        f"--bind {server_ip} --directory /tmp >/tmp/http.log 2>&1 &",
    )

    result: dict[str, str] = {}

    def download() -> None:
        result["sha"] = stack.in_netns(
            "ue1",
            "sh",
            "-c",
            f"curl -sS --retry 5 --retry-connrefused --max-time 60 "
            f"http://{server_ip}:8080/{blob.rsplit('/', 1)[1]} | sha256sum",
            timeout=90,
        ).split()[0]

    client = threading.Thread(target=download)
    client.start()
    flow = None
    deadline = time.monotonic() + 30
    while client.is_alive() and time.monotonic() < deadline and flow is None:
        r = httpx.get(
            stack.url("pep", "/pep/v1/flows"), params={"ue": ue_ip}, headers=auth(stack), timeout=5
        )
        assert r.status_code == 200, r.text
        relaying = [f for f in r.json()["flows"] if f["stage"] == "relaying" and f["ran"]["tcp"]]
        flow = relaying[0] if relaying else None
        time.sleep(0.2)
    client.join(timeout=90)
    assert result.get("sha") == expected, "the download through the PEP was not intact"
    assert flow is not None, "the PEP never showed the download's flow"

    # MELD is the congestion control of the RAN leg and decides with fresh radio data.
    state = httpx.get(
        stack.url("pep", "/pep/v1/ran_aware/state"), headers=auth(stack), timeout=5
    ).json()
    assert state["kernel"]["loaded"], state
    meld_ccas = state["kernel"]["congestion_controls"].values()
    assert flow["ran"]["tcp"]["congestion_control"] in meld_ccas
    r = httpx.get(
        stack.url("pep", f"/pep/v1/ran_aware/ues/{ue_ip}"), headers=auth(stack), timeout=5
    )
    assert r.status_code == 200, r.text
    radio = r.json()
    assert radio["mode"] == "meld-me"
    assert radio["radio"] is not None and radio["radio"]["age_ms"] < 1000, radio


def test_down_leaves_nothing(stack: Stack) -> None:
    stack.down()
    assert stack.leftovers() == {"container": [], "volume": [], "network": [], "netns": []}


def test_oai_profile_is_valid(docker_engine: None) -> None:
    """The oai profile cannot run here (no OAI images): its configuration is checked."""
    env = dict(os.environ, MTS_AMQP_PASSWORD="x", MTS_PROJECT=f"mtso{secrets.token_hex(3)}")
    config = yaml.safe_load(
        run(
            DOCKER,
            "compose",
            "--env-file",
            "deploy/compose/oai.env",
            "--profile",
            "oai",
            "config",
            env=env,
        )
    )
    services = config["services"]
    assert {"flexran-rtc", "oai-enb", "rnis-adapter", "pep"} <= set(services)
    enb = services["oai-enb"]["environment"]
    assert enb["FLEXRAN_ENABLED"] == "yes"
    assert enb["FLEXRAN_IPV4_ADDRESS"] == "192.168.61.10"
    flexran = services["flexran-rtc"]["networks"]["oai-public"]["ipv4_address"]
    assert flexran == enb["FLEXRAN_IPV4_ADDRESS"]
    for name in ("rabbitmq", "platform", "rnis-adapter", "pep", "path-manager"):
        assert services[name]["network_mode"] == "host", name
    rnis = services["rnis-adapter"]["environment"]
    assert rnis["RNIS_FLEXRAN_URL"] == f"http://{flexran}:9999"
    assert config["networks"]["oai-public"]["external"] is True
