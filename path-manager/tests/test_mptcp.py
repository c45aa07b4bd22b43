"""Real MPTCP in two namespaces: path (de)activation changes which subflows carry data.

Topology (names carry a random suffix; removed afterwards, also on failure):

  [proxy ns] 10.91.0.1 (lo) ── veth 10.91.1.1/.2 ──┐
                           └── veth 10.91.2.1/.2 ──┴ [ue ns] one address per "cell"

The proxy's namespace uses the userspace MPTCP path manager (our MptcpActuator); the UE's
uses the in-kernel one with a "subflow" endpoint on its second address, as a multi-homed
MPTCP client does. The proxy sends to the UE, as the PEP does on the RAN leg.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from ipaddress import IPv4Address

import pytest

from mts_lab.mptcp import acked_growth
from path_manager.actuation import MptcpActuator
from path_manager.mptcp import MptcpPm, NetlinkError, in_netns

pytestmark = pytest.mark.netns
IPPROTO_MPTCP = 262
PROXY = IPv4Address("10.91.0.1")
CELL = {1: IPv4Address("10.91.1.2"), 2: IPv4Address("10.91.2.2")}


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True)


def in_ns(ns: str, command: str) -> None:
    sh("ip", "netns", "exec", ns, *command.split())


@pytest.fixture
def namespaces():
    if os.geteuid() != 0:
        pytest.fail("needs root for network namespaces")
    suffix = uuid.uuid4().hex[:6]
    proxy, ue = f"pmt-proxy-{suffix}", f"pmt-ue-{suffix}"
    try:
        sh("ip", "netns", "add", proxy)
        sh("ip", "netns", "add", ue)
        for ns in (proxy, ue):
            in_ns(ns, "ip link set lo up")
        for i in (1, 2):
            sh(
                "ip",
                "link",
                "add",
                f"px{i}",
                "netns",
                proxy,
                "type",
                "veth",
                "peer",
                "name",
                f"ue{i}",
                "netns",
                ue,
            )
            in_ns(proxy, f"ip addr add 10.91.{i}.1/24 dev px{i}")
            in_ns(ue, f"ip addr add {CELL[i]}/24 dev ue{i}")
            in_ns(proxy, f"ip link set px{i} up")
            in_ns(ue, f"ip link set ue{i} up")
            # Each UE address leaves through its own cell (source routing).
            in_ns(ue, f"ip rule add from {CELL[i]} table {i}")
            in_ns(ue, f"ip route add {PROXY}/32 via 10.91.{i}.1 dev ue{i} table {i}")
        in_ns(proxy, f"ip addr add {PROXY}/32 dev lo")
        in_ns(ue, f"ip route add {PROXY}/32 via 10.91.1.1 dev ue1")
        in_ns(proxy, "sysctl -q net.mptcp.pm_type=1")
        in_ns(ue, "ip mptcp limits set subflows 4 add_addr_accepted 4")
        in_ns(ue, f"ip mptcp endpoint add {CELL[2]} dev ue2 subflow")
        yield proxy, ue
    finally:
        for ns in (proxy, ue):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Transfer:
    """The proxy sends to the UE over one MPTCP connection as fast as it can."""

    def __init__(self, proxy: str, ue: str) -> None:
        with in_netns(proxy):
            self.server = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        with in_netns(ue):
            self.client = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        self.server.bind((str(PROXY), 0))
        self.server.listen()
        self.client.bind((str(CELL[1]), 0))
        self.client.connect((str(PROXY), self.server.getsockname()[1]))
        self.conn, _ = self.server.accept()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._send, self._recv)]
        for t in self.threads:
            t.start()

    def _send(self) -> None:
        data = b"x" * 65536
        while not self.stop.is_set():
            try:
                self.conn.send(data)
            except OSError:
                return

    def _recv(self) -> None:
        while not self.stop.is_set():
            try:
                if not self.client.recv(1 << 20):
                    return
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        for s in (self.conn, self.client, self.server):
            s.close()


def growth_over(proxy: str, seconds: float) -> dict[int, int]:
    return acked_growth(proxy, CELL, seconds)


def wait_for_subflows(actuator: MptcpActuator, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(actuator.subflows()) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(actuator.subflows()) == count, actuator.subflows()


def test_deactivation_moves_the_data_to_the_active_path(namespaces):
    proxy, ue = namespaces
    actuator = MptcpActuator(proxy)
    actuator.start()
    transfer = Transfer(proxy, ue)
    try:
        wait_for_subflows(actuator, 2)
        both = growth_over(proxy, 0.5)
        assert both[1] > 0 and both[2] > 0, both  # both paths carry data at first

        assert actuator.set_active(CELL[2], False) == 1
        time.sleep(0.2)  # in-flight data on the old path drains
        only_first = growth_over(proxy, 0.5)
        assert only_first[1] > 1_000_000
        assert only_first[2] < 0.01 * only_first[1], only_first

        actuator.set_active(CELL[2], True)
        actuator.set_active(CELL[1], False)
        time.sleep(0.2)
        only_second = growth_over(proxy, 0.5)
        assert only_second[2] > 1_000_000
        assert only_second[1] < 0.01 * only_second[2], only_second
    finally:
        transfer.close()
        actuator.close()


def test_a_new_connection_gets_the_wanted_state(namespaces):
    proxy, ue = namespaces
    actuator = MptcpActuator(proxy)
    actuator.start()
    actuator.set_active(CELL[2], False)  # before any connection exists
    transfer = Transfer(proxy, ue)
    try:
        wait_for_subflows(actuator, 2)
        time.sleep(0.2)
        growth = growth_over(proxy, 0.5)
        assert growth[1] > 1_000_000 and growth[2] < 0.01 * growth[1], growth
    finally:
        transfer.close()
        actuator.close()


def test_kernel_errors_are_reported_clearly(namespaces):
    proxy, _ = namespaces
    with MptcpPm(proxy) as pm, pytest.raises(NetlinkError) as err:
        pm.set_subflow_backup(12345, (PROXY, 1), (CELL[1], 2), True)  # no such connection
    assert err.value.errno != 0 and err.value.strerror


NO_ADMIN_SCRIPT = """
import json, sys
from path_manager.app import build_app
from path_manager.settings import PmSettings
settings = PmSettings(api_tokens=["t"], actuation="mptcp", state_dir=sys.argv[1])
app, manager = build_app(settings)
print(json.dumps({"actuator": manager.actuator is not None,
                  "mptcp": manager.health.report()["checks"]["mptcp"]}))
"""


def test_without_net_admin_the_service_runs_degraded(tmp_path):
    """No CAP_NET_ADMIN (genetlink's MPTCP event group is admin-only): health says so."""
    if os.geteuid() != 0:
        pytest.fail("needs root to drop capabilities with setpriv")
    done = subprocess.run(
        ["setpriv", "--bounding-set=-net_admin,-sys_admin", sys.executable, "-c",
         NO_ADMIN_SCRIPT, str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["actuator"] is False
    assert report["mptcp"]["ok"] is False and "CAP_NET_ADMIN" in report["mptcp"]["detail"]
