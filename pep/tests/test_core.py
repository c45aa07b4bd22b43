"""The compiled relay core (PEP_RELAY_CORE=uring): it refuses what it does not carry,
clearly, and runs the extensions' hooks from its events. Its parse of the explicit modes'
handshakes is held to the Python relay's in test_handshake.py.

Its relaying is tested by the mode, limit, API, scale and MELD/RAPID tests, which run
against both relays (their ``relay_settings`` fixture).
"""

from __future__ import annotations

import os
import socket
import statistics
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pep_support import (
    DataServer,
    connect_direct,
    core_service,
    expected_digest,
    receive_digest,
    request,
    wait_for,
)

from mec_pep.config import PepSettings
from mec_pep.core import JOIN_PORTS, check_core_settings
from mec_pep.flows import Flow, PepExtension
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns

SPLICE_CHECK = Path(__file__).resolve().parents[2] / "build" / "bin" / "uring-splice-check"


@pytest.mark.parametrize("method", ["uring-splice", "uring-splice-polled", "poll-splice", "copy"])
def test_io_uring_splice_moves_tcp_bytes_but_in_worker_threads(method: str) -> None:
    """64 MiB through a relay thread, checked byte by byte, every way the core could move
    them. IORING_OP_SPLICE works on TCP sockets, but the kernel runs it in io_uring's worker
    threads; the core's bulk path (poll + splice(2) in its own thread) needs none. If a
    kernel runs io_uring's splice inline, this fails: then measure the choice again."""
    out = subprocess.run([str(SPLICE_CHECK), method, "64"], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    fields = dict(f.split("=") for f in out.stdout.split()[1:])
    assert fields["bad"] == "0" and fields["bytes"] == str(64 << 20)
    assert (int(fields["uring_workers"]) > 0) == method.startswith("uring-splice"), fields


def test_more_join_ports_than_the_core_has_listeners_for_are_refused() -> None:
    every_mode = {"transparent_port": 5999, "socks5_port": 1080, "tlv_port": 8181}
    settings = PepSettings(
        **every_mode, ran_mptcp=True,
        tproxy_ports=list(range(8000, 8000 + JOIN_PORTS + 1)),  # a join listener each
    )  # fmt: skip
    with pytest.raises(ValueError, match=f"PEP_RAN_MPTCP with more than {JOIN_PORTS}"):
        check_core_settings(settings)
    check_core_settings(
        PepSettings(**every_mode, backlog_interval_ms=50, ran_mptcp=True,
                    tproxy_ports=list(range(8000, 8000 + JOIN_PORTS)))
    )  # fmt: skip


class CoreRecorder(PepExtension):
    """Hears the hooks of the core's flows; sets the RAN leg's congestion control."""

    name = "core-recorder"
    ran_congestion_control = "reno"

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def on_ran_leg_ready(self, flow: Flow) -> None:
        flow.ext = {self.name: {"ran_leg": flow.ran.sock.getsockname()[:2]}}
        self.events.append(("ran", flow.id))

    def on_wan_leg_ready(self, flow: Flow) -> None:
        self.events.append(("wan", flow.id))

    def on_flow_established(self, flow: Flow) -> None:
        self.events.append(("established", flow.id))

    def on_flow_closed(self, flow: Flow) -> None:
        self.events.append(("closed", flow.id))


@pytest.mark.netns
def test_hooks_come_from_the_core_and_for_flows_lends_the_sockets(
    lab: Lab, server: DataServer, tmp_path: Path
) -> None:
    recorder = CoreRecorder()
    settings = PepSettings(
        relay_core="uring", transparent_port=15999, allowed_clients="10.201.1.0/24",
        allowed_destinations="10.201.2.0/24", backlog_interval_ms=0, ran_aware=False,
        state_dir=tmp_path, tproxy_nft_table="mts_pep_core", tproxy_mark=0x61, tproxy_table=161,
    )  # fmt: skip
    service = PepService(settings, extensions=[recorder])
    in_netns(lab.pep_ns, service.start)
    try:
        with connect_direct(lab, server.address) as sock:
            sock.sendall(request(b"E") + b"hi")
            assert sock.recv(2) == b"hi"
            wait_for(lambda: len(recorder.events) == 3, what="the hooks of the flow's start")
            (flow,) = list(service.flows)
            assert flow.ext == {"core-recorder": {"ran_leg": server.address}}  # kept by id
            seen: dict[str, Any] = {}

            def read(f: Flow) -> None:
                assert f.wan is not None
                seen["cc"] = f.ran.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
                seen["server"] = f.wan.sock.getpeername()[:2]

            descriptors = len(os.listdir("/proc/self/fd"))
            service.dataplane.for_flows([flow], read)
            assert seen == {"cc": b"reno".ljust(16, b"\0"), "server": server.address}
            assert service.dataplane.flow_states([flow], tcp=True)
            assert len(os.listdir("/proc/self/fd")) == descriptors  # the copies are closed
            with pytest.raises(RuntimeError, match="compiled relay core"):
                flow.ran.sock  # noqa: B018 -- lent only for the call
        wait_for(lambda: ("closed", flow.id) in recorder.events, what="on_flow_closed")
        assert recorder.events == [(e, flow.id) for e in ("ran", "wan", "established", "closed")]
        service.dataplane.for_flows([flow], lambda f: pytest.fail("ended flows are skipped"))
    finally:
        in_netns(lab.pep_ns, service.stop)


class EstablishedDelay(PepExtension):
    """How late each flow's ``on_flow_established`` ran after the core established it."""

    name = "established-delay"

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.ran = threading.Semaphore(0)

    def on_flow_established(self, flow: Flow) -> None:
        assert flow.established_at is not None  # the core's clock (CLOCK_REALTIME) at queuing
        self.delays.append(time.time() - flow.established_at)
        self.ran.release()


@pytest.mark.netns
def test_the_hooks_run_as_the_core_establishes_flows(
    lab: Lab, server: DataServer, tmp_path: Path
) -> None:
    """The hooks' thread sleeps until the core queues an event, so ``on_flow_established``
    runs within a few ms of the flow's start. When the thread looked every 20 ms, the hook
    of a flow opened right after the last one's hook ran came close to 20 ms late. The
    median of 50 flows, not the largest: a loaded 2-core machine may delay any one wake."""
    delays = EstablishedDelay()
    with core_service(lab, tmp_path, extensions=[delays]):
        for _ in range(50):
            with connect_direct(lab, server.address) as sock:
                sock.sendall(request(b"E") + b"hi")
                assert sock.recv(2) == b"hi"
                assert delays.ran.acquire(timeout=10), "on_flow_established did not run"
    assert statistics.median(delays.delays) < 0.008, sorted(delays.delays)


MB = 1 << 20


@pytest.mark.netns
def test_bulk_flows_splice_with_backpressure_half_close_and_counts(
    lab: Lab, server: DataServer, tmp_path: Path
) -> None:
    """A flow moves to splice once it has relayed 64 KiB; a short one never does. A UE that
    stops reading leaves bytes in the pipe (the pipe is held, the record shows them), not in
    user space; every byte arrives, is counted, and the pipe goes back."""
    with core_service(lab, tmp_path, ran_sndbuf=256 * 1024) as service:
        dp = service.dataplane
        with connect_direct(lab, server.address) as sock:  # a short flow: buffers only
            sock.sendall(request(b"E") + b"x" * 10_000)
            sock.shutdown(socket.SHUT_WR)
            assert receive_digest(sock)[0] == 10_000
        assert dp.spliced() == 0
        before = dp.counters().bytes_to_ue
        size = 64 * MB
        with connect_direct(lab, server.address) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
            sock.sendall(request(b"D", size))
            wait_for(lambda: dp.pipes_in_use() == 1, what="the download's pipe, the UE not reading")
            (flow,) = list(service.flows)
            assert flow._relay.buffered_to_ue > 0  # bytes in the pipe, shown as the PEP's
            assert receive_digest(sock) == (size, expected_digest(size))
        assert dp.counters().bytes_to_ue - before == size
        with connect_direct(lab, server.address) as sock:  # half-close after both spliced
            sock.sendall(request(b"E"))
            sender = threading.Thread(target=lambda: (sock.sendall(b"y" * 4 * MB),
                                                      sock.shutdown(socket.SHUT_WR)))  # fmt: skip
            sender.start()
            assert receive_digest(sock)[0] == 4 * MB
            sender.join()
        assert dp.spliced() == 3  # the download, the echo both ways
        wait_for(lambda: dp.pipes_in_use() == 0 and len(service.flows) == 0, what="pipes back")


def _reset_after(conn: socket.socket, size: int) -> None:
    """A server that sends ``size`` bytes, then resets the connection."""
    with conn:
        conn.sendall(b"z" * size)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@pytest.mark.netns
def test_resets_cross_a_spliced_flow_both_ways(
    lab: Lab, server: DataServer, tmp_path: Path
) -> None:
    with core_service(lab, tmp_path) as service:
        dp = service.dataplane
        # the client's RST reaches the server
        errors = len(server.errors)
        sock = connect_direct(lab, server.address)
        sock.sendall(request(b"E") + b"e" * MB)
        assert receive_digest(sock, MB)[0] == MB
        wait_for(lambda: dp.spliced() == 2, what="both directions spliced")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        wait_for(lambda: len(server.errors) > errors, what="the RST at the server")
        assert isinstance(server.errors[-1], (ConnectionResetError, BrokenPipeError))
        # the server's RST reaches the client, after a spliced megabyte
        listener = in_netns(lab.server_ns, lambda: socket.create_server((lab.server_ip, 0)))
        with listener, connect_direct(lab, listener.getsockname()[:2]) as sock:
            conn, _ = listener.accept()
            threading.Thread(target=_reset_after, args=(conn, 4 * MB)).start()
            with pytest.raises(ConnectionResetError):
                while sock.recv(1 << 20):
                    pass
        assert dp.spliced() == 3
        wait_for(lambda: dp.pipes_in_use() == 0 and len(service.flows) == 0, what="pipes back")
