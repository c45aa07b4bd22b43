"""The data plane in this process (relay threads inside the lab's PEP namespace):
extension hooks, ``for_flows``, mounted routers, and the AMQP backlog feed."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from functools import partial
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import jsonschema_rs
import orjson
import pytest
from fastapi import APIRouter
from fastapi.testclient import TestClient
from pep_support import (
    RELAYS,
    TOKEN,
    DataServer,
    connect_direct,
    core_service,
    expected_digest,
    receive_digest,
    recv_exact,
    request,
    send_stream,
    wait_for,
)

from mec_common.amqp import AmqpConsumer, AmqpPublisher
from mec_common.auth import TokenVerifier
from mec_common.bus.backlog import PepBacklog, backlog_routing_key
from mec_common.bus.flowrtt import FlowRttSummary, Rtt, RulesRtt
from mec_pep.api import build_app
from mec_pep.backlog import BacklogFeed, BacklogSource
from mec_pep.config import PepSettings
from mec_pep.dataplane import DataPlane
from mec_pep.flows import Flow, FlowTable, Hooks, PepExtension
from mec_pep.service import PepService
from mts_lab import REPO
from mts_lab.line import Lab, in_netns
from mts_lab.rabbitmq import fresh_exchange

pytestmark = pytest.mark.netns

SOCKS = 11080
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


class Recorder(PepExtension):
    name = "recorder"

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_ran_leg_ready(self, flow: Flow) -> None:
        assert flow.wan is None
        flow.ran.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
        self.events.append(("ran", flow.id))

    def on_wan_leg_ready(self, flow: Flow) -> None:
        assert flow.wan is not None and flow.established_at is None
        self.events.append(("wan", flow.id))

    def on_flow_established(self, flow: Flow) -> None:
        self.events.append(("established", flow.id))
        raise RuntimeError("a broken hook must not hurt the flow")

    def on_flow_closed(self, flow: Flow) -> None:
        self.events.append(("closed", flow.id))

    def router(self) -> APIRouter:
        router = APIRouter()

        @router.get("/ping")
        def ping() -> dict[str, str]:
            return {"pong": "yes"}

        return router


def settings(**extra: Any) -> PepSettings:
    defaults: dict[str, Any] = {
        "socks5_port": SOCKS,
        "allowed_clients": "10.201.1.0/24",
        "allowed_destinations": "10.201.2.0/24",
        "backlog_interval_ms": 0,
        "ran_aware": False,
    }
    return PepSettings(**(defaults | extra))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def dataplane(lab: Lab, recorder: Recorder) -> Iterator[DataPlane]:
    dp = DataPlane(settings(), FlowTable(), Hooks([recorder]), threads=2)
    in_netns(lab.pep_ns, dp.start)  # the relay threads inherit the namespace
    try:
        yield dp
    finally:
        dp.stop()


def socks_connect(lab: Lab, target: tuple[str, int], port: int = SOCKS) -> socket.socket:
    address = (lab.pep_client_side_ip, port)
    sock = in_netns(lab.client_ns, lambda: socket.create_connection(address, timeout=10))
    target_bytes = socket.inet_aton(target[0]) + target[1].to_bytes(2, "big")
    sock.sendall(b"\x05\x01\x00" + b"\x05\x01\x00\x01" + target_bytes)  # pipelined
    assert recv_exact(sock, 12)[3] == 0
    return sock


def test_hooks_run_in_order_and_for_flows_reaches_the_sockets(
    lab: Lab, dataplane: DataPlane, recorder: Recorder, server: DataServer
) -> None:
    with socks_connect(lab, server.address) as sock:
        sock.sendall(request(b"E") + b"hi")
        assert sock.recv(2) == b"hi"  # despite the failing on_flow_established
        (flow,) = list(dataplane.flows)
        seen: dict[str, Any] = {}

        def read(f: Flow) -> None:
            assert f.wan is not None
            seen["ran"] = f.ran.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
            seen["thread"] = threading.current_thread().name

        dataplane.for_flows([flow], read)
        assert seen["ran"].rstrip(b"\0") == b"reno"
        assert seen["thread"].startswith("pep-relay-")
    wait_for(lambda: ("closed", flow.id) in recorder.events, what="on_flow_closed")
    assert recorder.events == [(e, flow.id) for e in ("ran", "wan", "established", "closed")]
    dataplane.for_flows([flow], lambda f: pytest.fail("closed flows are skipped"))


def test_the_copy_method_relays_the_same_bytes(lab: Lab, server: DataServer) -> None:
    """``relay_method=copy`` (user-space buffers instead of splice through pipes)."""
    port, size = SOCKS + 1, 32 << 20
    dp = DataPlane(settings(relay_method="copy", socks5_port=port), FlowTable(), Hooks())
    in_netns(lab.pep_ns, dp.start)
    try:
        with socks_connect(lab, server.address, port) as sock:
            sock.sendall(request(b"U", size))
            send_stream(sock, size)
            assert sock.recv(64).decode() == expected_digest(size)
        with socks_connect(lab, server.address, port) as sock:
            sock.sendall(request(b"D", size))
            assert receive_digest(sock) == (size, expected_digest(size))
        counters = dp.counters()
        assert counters.bytes_from_ue >= size and counters.bytes_to_ue >= size
        assert dp.pipes_in_use() == 0  # no pipe was taken
    finally:
        dp.stop()


def test_sockets_are_invisible_outside_the_relay_threads(
    lab: Lab, dataplane: DataPlane, server: DataServer
) -> None:
    """Each relay thread owns its descriptor table: a flow's fd means nothing elsewhere."""
    with socks_connect(lab, server.address):
        (flow,) = list(dataplane.flows)
        fd, owner = flow.ran.fileno(), flow._relay.relay
        inside = owner.call(lambda: _describe(fd))
        assert inside.startswith("socket:[")
        assert _describe(fd) != inside


def _describe(fd: int) -> str:
    try:
        return os.readlink(f"/proc/thread-self/fd/{fd}")
    except OSError:
        return "-"


def test_the_ran_legs_congestion_control_is_read_when_the_extensions_are_set() -> None:
    """The first extension's that names one, else the setting's; found again when the
    extensions are set again (the relays ask per accepted connection)."""

    class Named(PepExtension):
        ran_congestion_control = "reno"

    hooks = Hooks([PepExtension()])
    assert hooks.ran_congestion_control("cubic") == "cubic"
    hooks.extensions = [PepExtension(), Named()]
    assert hooks.ran_congestion_control("cubic") == "reno"
    hooks.extensions = []
    assert hooks.ran_congestion_control(None) is None


def test_extension_router_is_mounted_with_auth(recorder: Recorder) -> None:
    service = PepService(settings(), extensions=[recorder])
    service.hooks.extensions = [recorder]
    client = TestClient(build_app(service, TokenVerifier([TOKEN])))
    assert client.get("/pep/v1/recorder/ping").status_code == 401
    response = client.get("/pep/v1/recorder/ping", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.json() == {"pong": "yes"}


@pytest.fixture
def exchange() -> Iterator[str]:
    with fresh_exchange("test-pep") as name:
        yield name


Connect = Callable[[tuple[str, int]], socket.socket]


@pytest.fixture(params=sorted(RELAYS))
def backlog_source(
    request: pytest.FixtureRequest, lab: Lab, tmp_path: Path
) -> Iterator[tuple[BacklogSource, Connect]]:
    """A data plane of each relay for the backlog feed, and how a UE reaches a server
    through it: SOCKS5 on the Python relay, transparent on the compiled core."""
    if request.param == "uring":
        with core_service(lab, tmp_path) as service:
            yield service.dataplane, partial(connect_direct, lab)
        return
    dp = DataPlane(settings(), FlowTable(), Hooks(), threads=2)
    in_netns(lab.pep_ns, dp.start)
    try:
        yield dp, partial(socks_connect, lab)
    finally:
        dp.stop()


def test_backlog_toward_the_ue_is_published(
    lab: Lab, backlog_source: tuple[BacklogSource, Connect], server: DataServer, exchange: str
) -> None:
    """The contract test of the backlog feed: every message the PEP publishes validates
    against the committed JSON Schema and reads as the consumers' model, under its key."""
    dataplane, connect = backlog_source
    schema = json.loads((REPO / "docs/schemas/pep-backlog.v2.json").read_text())
    validator = jsonschema_rs.validator_for(schema)
    messages: list[dict[str, Any]] = []
    raw: list[tuple[str, bytes, dict[str, Any]]] = []

    def on_message(key: str, body: bytes, headers: dict[str, Any]) -> None:
        raw.append((key, body, headers))
        messages.append(orjson.loads(body))

    consumer = AmqpConsumer(AMQP_URL, exchange, [backlog_routing_key(lab.client_ip)], on_message)
    publisher = AmqpPublisher(AMQP_URL, exchange)
    feed = BacklogFeed(dataplane, publisher, interval=0.02)
    consumer.start()
    publisher.start()
    assert consumer.connected.wait(10) and publisher.connected.wait(10)
    feed.start()
    try:
        sock = connect(server.address)
        sock.sendall(request(b"D", 32 << 20))  # and do not read: the PEP holds the rest
        wait_for(
            lambda: any(m["backlog_bytes"] > 8 << 20 for m in messages),
            timeout=20,
            what="a backlog message",
        )
        big = next(m for m in messages if m["backlog_bytes"] > 8 << 20)
        assert big["ue"] == lab.client_ip and big["flows"] == 1 and big["schema"] == 2
        assert 0 <= big["unsent_bytes"] <= big["backlog_bytes"] <= big["received_bytes"]
        received = 0
        while received < 32 << 20:  # drain: the backlog falls to zero and is announced
            received += len(sock.recv(1 << 20))
        wait_for(lambda: messages[-1]["backlog_bytes"] == 0, timeout=10, what="drained")
        sock.close()
        # received_bytes: the arrival count, cumulative and exact once everything was read.
        counts = [m["received_bytes"] for m in messages]
        assert counts == sorted(counts), counts
        assert counts[-1] == 32 << 20
        for key, body, headers in raw:
            validator.validate(json.loads(body))
            model = PepBacklog.model_validate_json(body)
            assert key == model.routing_key() and headers == {"schema": model.schema_version}
    finally:
        feed.stop()
        publisher.close()
        consumer.close()


def test_a_legs_observed_rtt_shows_when_the_feed_knows_its_two_ends(
    lab: Lab, server: DataServer, exchange: str
) -> None:
    """The PEP consumes the flow-RTT feed on the real broker: the leg whose two ends a
    summary names shows the observer's RTT, the other leg has no such field, and a
    malformed message is counted and changes nothing."""
    port = SOCKS + 3
    service = PepService(settings(socks5_port=port))
    in_netns(lab.pep_ns, service.dataplane.start)
    service.consume_flow_rtt(exchange)  # outside the PEP's namespace: the broker is here
    assert service.flow_rtt is not None
    publisher = AmqpPublisher(AMQP_URL, exchange)
    publisher.start()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    client = TestClient(build_app(service, TokenVerifier([TOKEN])))

    def the_flow() -> dict[str, Any]:
        (flow,) = client.get("/pep/v1/flows", headers=auth).json()["flows"]
        return dict(flow)

    try:
        assert publisher.connected.wait(10)
        wait_for(lambda: service.health.report()["checks"]["flowrtt_feed"]["ok"], what="feed")
        with socks_connect(lab, server.address, port) as sock:
            sock.sendall(request(b"E") + b"hi")
            assert sock.recv(2) == b"hi"
            flow = the_flow()
            assert "observed_rtt" not in flow["ran"] and "observed_rtt" not in flow["wan"]
            ue_end, pep_end = flow["ran"]["peer"], flow["ran"]["local"]
            (ue_ip, ue_port), (pep_ip, pep_port) = (e.rsplit(":", 1) for e in (ue_end, pep_end))
            e2e = Rtt(samples=7, current_ms=42.0, p50_ms=41.5, p90_ms=44.0, p99_ms=45.0)
            summary = FlowRttSummary(
                flow_id=f"{ue_end}-{pep_end}", client=IPv4Address(ue_ip), client_port=int(ue_port),
                server=IPv4Address(pep_ip), server_port=int(pep_port), method="spin", ts_ns=1,
                raw=RulesRtt(e2e=e2e, client_side=None, server_side=None),
                filtered=RulesRtt(e2e=e2e, client_side=None, server_side=None),
            )  # fmt: skip
            publisher.publish(summary.routing_key(), summary.to_json(), {"schema": 1})
            publisher.publish(summary.routing_key(), b'{"schema": 1}', {"schema": 1})
            wait_for(lambda: "observed_rtt" in the_flow()["ran"], what="the leg's RTT")
            flow = the_flow()
            shown = flow["ran"]["observed_rtt"]
            assert shown["flow_id"] == summary.flow_id and shown["method"] == "spin"
            assert shown["filtered"]["e2e"]["p50_ms"] == 41.5
            assert "observed_rtt" not in flow["wan"]
            wait_for(lambda: service.flow_rtt.rejected == 1, what="the malformed message")  # type: ignore[union-attr]
    finally:
        publisher.close()
        service.stop()


def test_pinned_relays_take_the_connections_of_their_cpu(lab: Lab) -> None:
    """``relay_cpu_affinity``: relay thread i runs on CPU i only, and a connection whose SYN
    the kernel processes on CPU i (veth: the connecting thread's CPU) goes to relay i."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    port = SOCKS + 2
    dp = DataPlane(settings(relay_cpu_affinity=True, socks5_port=port), FlowTable(), Hooks(),
                   threads=2)  # fmt: skip
    in_netns(lab.pep_ns, dp.start)
    try:
        for relay, cpu in zip(dp.relays, cpus, strict=True):
            assert relay.native_id is not None
            assert os.sched_getaffinity(relay.native_id) == {cpu}
        for index, cpu in enumerate(cpus):
            before = [r.counters.accepted for r in dp.relays]

            def connect_from(cpu: int = cpu) -> list[socket.socket]:
                os.sched_setaffinity(0, {cpu})  # this thread only
                return [socket.create_connection((lab.pep_client_side_ip, port), timeout=10)
                        for _ in range(20)]  # fmt: skip

            socks = in_netns(lab.client_ns, connect_from)
            try:
                wait_for(lambda b=before: sum(r.counters.accepted for r in dp.relays) - sum(b)
                         == 20, what="20 accepted")  # fmt: skip
                gained = [r.counters.accepted - b for r, b in zip(dp.relays, before, strict=True)]
                assert gained[index] == 20, (cpu, gained)
            finally:
                for sock in socks:
                    sock.close()
    finally:
        dp.stop()
