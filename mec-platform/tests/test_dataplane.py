"""Traffic rules become real nftables TPROXY rules in a MEC-host namespace (and go away).

Topology (unique names, removed even on failure):
    [client ns] 10.251.N.2 ── veth ── 10.251.N.1 [MEC ns: nft TPROXY -> transparent listener]
The client connects to 203.0.113.10:80, an address that exists nowhere: only the
interception by the app's traffic rule can answer it.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mec_platform.dataplane import table_prefix
from mec_platform.testing import Running, make_settings, onboard, wait_op

pytestmark = pytest.mark.netns
SAMPLE = Path(__file__).with_name("sample_app.py")

LISTENER = textwrap.dedent("""
    import socket
    s = socket.socket()
    s.setsockopt(socket.SOL_IP, 19, 1)  # IP_TRANSPARENT
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5000)); s.listen()
    print("listening", flush=True)
    conn, peer = s.accept()
    conn.sendall(("%s:%d" % conn.getsockname()).encode()); conn.close()
""")
CLIENT = textwrap.dedent("""
    import socket, sys
    try:
        c = socket.create_connection(("203.0.113.10", 80), timeout=2)
        print(c.recv(100).decode())
    except OSError as exc:
        print("failed:", exc); sys.exit(1)
""")


def sh(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


@pytest.fixture
def namespaces() -> Iterator[tuple[str, str, str]]:
    tag = uuid.uuid4().hex[:6]
    mec, client, net = f"mtsp-mec-{tag}", f"mtsp-cli-{tag}", f"10.251.{random.randint(1, 254)}"
    try:
        sh("ip", "netns", "add", mec)
        sh("ip", "netns", "add", client)
        sh("ip", "link", "add", f"m{tag}", "netns", mec, "type", "veth", "peer", f"c{tag}",
           "netns", client)  # fmt: skip
        for ns, dev, addr in ((mec, f"m{tag}", f"{net}.1"), (client, f"c{tag}", f"{net}.2")):
            sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", client, "route", "add", "default", "via", f"{net}.1")
        yield mec, client, net
    finally:
        subprocess.run(["ip", "netns", "del", mec], capture_output=True)
        subprocess.run(["ip", "netns", "del", client], capture_output=True)


def connect(client: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", client, sys.executable, "-c", CLIENT],
                          capture_output=True, text=True, timeout=10)  # fmt: skip


def test_traffic_rule_intercepts_until_termination(
    tmp_path: Path, namespaces: tuple[str, str, str]
) -> None:
    mec, client, net = namespaces
    platform = Running(make_settings(tmp_path, dataplane=True, dataplane_netns=mec))
    listener = subprocess.Popen(["ip", "netns", "exec", mec, sys.executable, "-c", LISTENER],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "listening"
        admin = platform.admin
        iid = instantiate_pep_like(platform, net)
        table = table_prefix(iid) + "0"
        rules = sh("ip", "netns", "exec", mec, "nft", "list", "table", "ip", table).stdout
        assert f"tproxy to {net}.1:5000" in rules and "tcp dport 80" in rules

        done = connect(client)
        assert done.stdout.strip() == "203.0.113.10:80", done  # the original destination
        listener.wait(timeout=5)

        r = admin.post(f"/app_lcm/v1/app_instances/{iid}/terminate",
                       json={"terminationType": "FORCEFUL"})  # fmt: skip
        assert r.status_code == 202
        assert wait_op(platform, r.json())["operationState"] == "COMPLETED"
        listed = subprocess.run(["ip", "netns", "exec", mec, "nft", "list", "table", "ip", table],
                                capture_output=True)  # fmt: skip
        assert listed.returncode != 0  # the table is gone
        assert connect(client).returncode == 1  # nothing intercepts any more
    finally:
        listener.kill()
        platform.stop()


def test_rule_changes_reach_nftables_together_with_storage_or_not_at_all(
    tmp_path: Path, namespaces: tuple[str, str, str]
) -> None:
    """Issue 20: a PUT the data plane cannot apply stores nothing; a restart restores."""
    mec, _client, net = namespaces
    platform = Running(make_settings(tmp_path, dataplane=True, dataplane_netns=mec))
    iid = ""
    try:
        admin = platform.admin
        iid = instantiate_pep_like(platform, net)
        table = table_prefix(iid) + "0"
        url = f"/mec_app_support/v1/applications/{iid}/traffic_rules/intercept-http"
        declared = admin.get(url).json()
        narrowed = {**declared, "trafficFilter": [
            {**declared["trafficFilter"][0], "srcAddress": [f"{net}.2/32"]}]}  # fmt: skip
        assert admin.put(url, json=narrowed).status_code == 200
        assert f"ip saddr {net}.2" in nft_table(mec, table)

        wider = {**declared, "trafficFilter": [
            {**declared["trafficFilter"][0], "srcAddress": ["0.0.0.0/0"]}]}  # fmt: skip
        assert admin.put(url, json=wider).status_code == 403
        bad = {**narrowed, "trafficFilter": [{**narrowed["trafficFilter"][0], "dstPort": ["-1"]}]}
        assert admin.put(url, json=bad).status_code == 400
        assert admin.get(url).json() == narrowed and f"ip saddr {net}.2" in nft_table(mec, table)

        # The data plane fails (its namespace is gone): 503, and the rule stays as it was.
        sh("ip", "netns", "del", mec)
        r = admin.put(url, json={**narrowed, "state": "INACTIVE"})
        assert r.status_code == 503 and "nothing changed" in r.json()["detail"], r.text
        assert admin.get(url).json() == narrowed

        # A restart (the namespace is back, empty) restores exactly the stored rule.
        sh("ip", "netns", "add", mec)
        platform.stop()
        platform = Running(platform.settings)
        assert f"ip saddr {net}.2" in nft_table(mec, table)
    finally:
        if iid:
            r = platform.admin.post(f"/app_lcm/v1/app_instances/{iid}/terminate",
                                    json={"terminationType": "FORCEFUL"})  # fmt: skip
            wait_op(platform, r.json())
        platform.stop()


def instantiate_pep_like(platform: Running, net: str) -> str:
    onboard(platform, pep_like_appd(net))
    admin = platform.admin
    iid = str(admin.post("/app_lcm/v1/app_instances", json={"appDId": "pep-like"}).json()["id"])
    op = admin.post(f"/app_lcm/v1/app_instances/{iid}/instantiate").json()
    assert wait_op(platform, op)["operationState"] == "COMPLETED"
    return iid


def nft_table(ns: str, table: str) -> str:
    return sh("ip", "netns", "exec", ns, "nft", "list", "table", "ip", table).stdout


def pep_like_appd(net: str) -> str:
    return f"""
appDId: pep-like
appName: pep-like
appProvider: mts-tests
appSoftVersion: "1"
appDVersion: "1"
appTrafficRule:
  - trafficRuleId: intercept-http
    filterType: FLOW
    priority: 1
    trafficFilter: [{{protocol: [tcp], dstPort: ["80"], srcAddress: ["{net}.0/24"]}}]
    action: FORWARD_DECAPSULATED
    dstInterface: {{interfaceType: IP, dstIpAddress: {net}.1, dstPort: 5000}}
deployment:
  process: {{command: ["{sys.executable}", "{SAMPLE}"]}}
"""
