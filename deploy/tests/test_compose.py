"""docker-compose.yml for real: the images `make images` built, Debian's Docker engine, each
project configured by one env file from `deploy/compose/env.sh`, started with the documented
`docker compose up -d --wait`.

- `stack`: profile emulated (env.sh emulated), private MEC-host namespace;
- `host_stack`: host mode (env.sh ran) beside a RAN outside compose, the emulator's FlexRAN
  API on the host reached by URL, as on an OAI testbed;
- a port taken on the machine fails `up` at once, with the variable to change.

Checks: every service healthy, in Mp1 discovery, the report period applied to the RAN, a
download from the server through the PEP with MELD on its RAN leg, `down` leaves nothing.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from conftest import REPORT_SF, new_stack
from harness import DOCKER, SERVICES, Stack, dump, run

from mec_common.ports import free_port

if TYPE_CHECKING:
    from mts_testbed.topology import Topology

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOWNLOAD_BYTES = 6 * 2**20  # ~3 s at the 25-PRB cell's ~16 Mbit/s
APPS = {"platform", "rabbitmq", "rnis-adapter", "pep", "path-manager", "dashboard", "flowrtt"}
MP1_SERVICES = {("rnis", "REST_HTTP"), ("rnis", "MB_TOPIC_BASED"), ("pep", "REST_HTTP"),
                ("path-manager", "REST_HTTP"), ("flow-rtt", "REST_HTTP"),
                ("flow-rtt", "MB_TOPIC_BASED")}  # fmt: skip


def auth(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.token}"}


def assert_healthy(stack: Stack, running: set[str], one_shots: set[str]) -> None:
    """Long-running services running and healthy (by their own check), one-shots exited 0,
    and every API answers its /healthz."""
    states = stack.states()
    assert set(states) == running | one_shots, states
    for service in running:
        state, health = states[service]
        assert state == "running", (service, state)
        if service != "mec-host":  # a sleeping namespace holder, nothing to check
            assert health == "healthy", (service, health)
    for service in one_shots:
        assert states[service][0] == "exited", (service, states[service])
        code = run(DOCKER, "inspect", "-f", "{{.State.ExitCode}}", f"{stack.project}-{service}-1")
        assert code.strip() == "0", service
    for service in SERVICES:
        r = httpx.get(stack.url(service, "/healthz"), timeout=5)
        assert r.status_code == 200, (service, r.text)
    for service in (*SERVICES, "rabbitmq-metrics"):  # Prometheus metrics, without a token
        r = httpx.get(stack.url(service, "/metrics"), timeout=5)
        assert r.status_code == 200 and "# TYPE" in r.text, service


def assert_in_mp1_discovery(stack: Stack) -> None:
    """Every app registered its services on the platform, with the provisioned credentials."""
    admin = {"Authorization": f"Bearer {stack.admin_token()}"}
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 60
    while seen != MP1_SERVICES and time.monotonic() < deadline:
        r = httpx.get(stack.url("platform", "/mec_service_mgmt/v1/services"), headers=admin,
                      timeout=5)  # fmt: skip
        assert r.status_code == 200, r.text
        seen = {(s["serName"], s["transportInfo"]["type"]) for s in r.json()
                if s["state"] == "ACTIVE"}  # fmt: skip
        time.sleep(0.5)
    assert seen == MP1_SERVICES


def serve_command(server_ip: str, blob: Path) -> str:
    return f"python3 -m http.server 8080 --bind {server_ip} --directory {blob.parent}"


def download_through_pep(
    stack: Stack, in_netns: Callable[..., str], ue_ip: str, server_ip: str, blob: Path
) -> None:
    """A download of blob from the server (its HTTP server running) to the UE through the
    PEP: intact, seen by the PEP as a relayed flow with a MELD congestion control on its
    RAN leg and fresh radio data. in_netns(role, *cmd, timeout=) runs a command in one of
    the testbed's namespaces."""
    expected = in_netns("server", "sha256sum", str(blob)).split()[0]
    in_netns("server", "sh", "-c", f"for i in $(seq 100); do curl -so /dev/null "
             f"http://{server_ip}:8080/ && exit 0; sleep 0.1; done; exit 1")  # fmt: skip

    result: dict[str, str] = {}

    def download() -> None:
        result["sha"] = in_netns(
            "ue1",
            "sh",
            "-c",
            # curl's own exit status and message fail the test (not an empty checksum)
            f"curl -sS --retry 5 --retry-connrefused --max-time 60 -o {blob}.ue "
            f"http://{server_ip}:8080/{blob.name} && sha256sum {blob}.ue && rm {blob}.ue",
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
    assert flow is not None, f"the PEP never showed the download's flow\n{dump(stack)}"

    # MELD is the congestion control of the RAN leg and decides with fresh radio data.
    state = httpx.get(
        stack.url("pep", "/pep/v1/ran_aware/state"), headers=auth(stack), timeout=5
    ).json()
    assert state["kernel"]["loaded"], state
    assert (
        flow["ran"]["tcp"]["congestion_control"] in state["kernel"]["congestion_controls"].values()
    )
    r = httpx.get(
        stack.url("pep", f"/pep/v1/ran_aware/ues/{ue_ip}"), headers=auth(stack), timeout=5
    )
    assert r.status_code == 200, r.text
    radio = r.json()
    assert radio["mode"] == "meld-me"
    assert radio["radio"] is not None and radio["radio"]["age_ms"] < 1000, radio


# ------------------------------------------------------------------ profile emulated
def test_every_service_is_healthy(stack: Stack) -> None:
    assert_healthy(stack, running=APPS | {"mec-host", "testbed"}, one_shots={"mp1-provision"})


def test_every_app_is_in_mp1_discovery(stack: Stack) -> None:
    assert_in_mp1_discovery(stack)


def test_apis_deny_without_token(stack: Stack) -> None:
    protected = {
        "rnis-adapter": "/rni/v2/queries/layer2_meas",
        "pep": "/pep/v1/flows",
        "platform": "/mec_service_mgmt/v1/services",
        "path-manager": "/pm/v1/ues",
        "flowrtt": "/flowrtt/v1/flows",
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
    ue_ip = topo["ues"][0]["paths"][0]["ip"]  # type: ignore[index]
    server_ip = topo["server"]["addresses"]["wan0"]  # type: ignore[index]
    blob = Path("/tmp/mts-download.bin")
    stack.in_netns("server", "sh", "-c", f"head -c {DOWNLOAD_BYTES} /dev/urandom > {blob}")
    stack.in_netns("server", "sh", "-c", f"{serve_command(server_ip, blob)} >/dev/null 2>&1 &")
    download_through_pep(stack, stack.in_netns, ue_ip, server_ip, blob)


def test_the_pep_says_which_relay_runs_and_why(stack: Stack) -> None:
    """The image carries the compiled core, so auto takes it, or the Python relay only
    because the engine's seccomp profile refuses io_uring (Docker >= 25.0's default). Where
    the profile refuses pidfd_getfd (Docker's default without CAP_SYS_PTRACE, as here), the
    core's relay threads share the process's descriptor table, and say why."""
    r = httpx.get(stack.url("pep", "/pep/v1/stats"), headers=auth(stack), timeout=5)
    assert r.status_code == 200, r.text
    stats = r.json()
    relay, why = stats["relay"], stats["relay_reason"]
    assert why.startswith("auto:"), why
    assert relay == "uring" or "io_uring_setup refused" in why, why
    if relay == "uring" and "pidfd_getfd refused" in why:
        assert stats["private_descriptor_tables"] is False, stats
    print(f"PEP relay: {relay} ({why}); private tables: {stats['private_descriptor_tables']}")


def test_down_leaves_nothing(stack: Stack) -> None:
    stack.down()
    assert stack.leftovers() == {"container": [], "volume": [], "network": [], "netns": []}


# ------------------------------------------- host mode, the RAN outside compose (OAI case)
def host_topology(stack: Stack) -> Topology:
    from mts_testbed.topology import Topology

    return Topology.load(stack.testbed)


def test_host_mode_every_service_is_healthy_and_publishes_nothing(host_stack: Stack) -> None:
    assert_healthy(host_stack, running=APPS, one_shots={"mp1-provision", "host-check"})
    for service in host_stack.states():
        ports = run(DOCKER, "port", f"{host_stack.project}-{service}-1").strip()
        assert ports == "", (service, ports)
    # Every listener on MTS_BIND (127.0.0.1), none on every address.
    listening = run("ss", "-Hltn").split()
    for port in host_stack.ports.values():
        assert f"127.0.0.1:{port}" in listening, port
        assert f"0.0.0.0:{port}" not in listening and f"*:{port}" not in listening, port
    logs = host_stack.compose("logs", "--no-color", "host-check")
    assert "FORWARD policy" in logs, logs


def test_host_mode_every_app_is_in_mp1_discovery(host_stack: Stack) -> None:
    assert_in_mp1_discovery(host_stack)


def test_host_mode_the_report_period_is_applied(host_stack: Stack) -> None:
    """RNIS_REPORT_SF of .env reached the adapter, which set it on the RAN's controller."""
    topo = host_topology(host_stack)
    headers = {"Authorization": f"Bearer {topo.emulator.token}"}
    bs_id = topo.cells[0].bs_id
    deadline = time.monotonic() + 30
    sf = None
    while sf != REPORT_SF and time.monotonic() < deadline:
        r = httpx.get(f"{topo.emulator.url_from_mec}/stats/conf/enb/{bs_id}", headers=headers,
                      timeout=5)  # fmt: skip
        assert r.status_code == 200, r.text
        sf = r.json()["reports"][0]["sf"]
        time.sleep(0.5)
    assert sf == REPORT_SF


def test_host_mode_download_through_the_pep(host_stack: Stack, tmp_path: Path) -> None:
    topo = host_topology(host_stack)

    def in_netns(role: str, *cmd: str, timeout: float = 120) -> str:
        ns = {"server": topo.server.ns, "ue1": topo.ue(1).ns}[role]
        return run("ip", "netns", "exec", ns, *cmd, timeout=timeout)

    server_ip, blob = topo.server.addresses["wan0"], tmp_path / "download.bin"
    blob.write_bytes(secrets.token_bytes(DOWNLOAD_BYTES))
    cmd = ["ip", "netns", "exec", topo.server.ns, *serve_command(server_ip, blob).split()]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        download_through_pep(host_stack, in_netns, topo.ue(1).paths[0].ip, server_ip, blob)
    finally:
        server.kill()
        server.wait()


def test_host_mode_down_leaves_nothing(host_stack: Stack) -> None:
    host_stack.down()
    left = host_stack.leftovers()
    left["netns"] = []  # the RAN's namespaces are not compose's: the fixture removes them
    assert left == {"container": [], "volume": [], "network": [], "netns": []}
    table = host_stack.settings["PEP_TPROXY_NFT_TABLE"]
    assert table not in run("nft", "list", "tables"), "the PEP left its nftables table"


def test_a_taken_port_fails_up_loudly(docker_engine: None, tmp_path: Path) -> None:
    """Host mode: a port of .env that something else holds (and a missing UE address map)
    fails `up` by host-check, naming the variables, before any service starts (not a
    service restarting in a loop until the wait timeout)."""
    stack = new_stack("ran", tmp_path, f"mtsp{secrets.token_hex(3)}",
                      MTS_AMQP_DIST_PORT=str(free_port()),
                      RNIS_IP_MAP="/etc/mts/rnis/missing.json")  # fmt: skip
    ports = stack.ports
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports["rnis-adapter"]))
        holder.listen()
        try:
            done = stack.up(timeout=600)
            states = stack.states()
            why = stack.compose("logs", "--no-color", "host-check")
        finally:
            stack.down()
    assert done.returncode != 0, done.stdout
    assert 'service "host-check" didn\'t complete successfully' in done.stderr, done.stderr
    assert f"RNIS_HTTP_PORT={ports['rnis-adapter']} on 127.0.0.1" in why, why
    assert "RNIS_IP_MAP=/etc/mts/rnis/missing.json: no such file" in why, why
    started_services = {name for name, (state, _) in states.items() if state != "created"}
    assert started_services == {"host-check"}, states  # nothing else was started
