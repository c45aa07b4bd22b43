"""The compiled relay core (PEP_RELAY_CORE=uring): it refuses what it does not carry,
clearly, and runs the extensions' hooks from its events.

Its relaying is tested by the mode, limit, API, scale and MELD/RAPID tests, which run
against both relays (their ``relay_settings`` fixture).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pep_support import RELAYS, DataServer, PepProcess, connect_direct, request, wait_for

from mec_pep.config import PepSettings
from mec_pep.core import check_core_settings
from mec_pep.flows import Flow, PepExtension
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns


def test_settings_the_core_lacks_are_all_named() -> None:
    settings = PepSettings(
        transparent_port=5999, socks5_port=1080, tlv_port=8181, ran_mptcp=True,
        backlog_interval_ms=50,
    )  # fmt: skip
    with pytest.raises(ValueError) as refused:
        check_core_settings(settings)
    for name in ("PEP_SOCKS5_PORT", "PEP_TLV_PORT", "PEP_RAN_MPTCP", "PEP_BACKLOG_INTERVAL_MS"):
        assert name in str(refused.value)
    check_core_settings(PepSettings(transparent_port=5999, backlog_interval_ms=0))


@pytest.mark.netns
def test_a_core_pep_with_socks5_does_not_start(start_pep: Callable[..., PepProcess]) -> None:
    with pytest.raises(RuntimeError, match="PEP_SOCKS5_PORT"):
        start_pep(**{**RELAYS["uring"], "socks5_port": 1080})


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

            service.dataplane.for_flows([flow], read)
            assert seen == {"cc": b"reno".ljust(16, b"\0"), "server": server.address}
            with pytest.raises(RuntimeError, match="compiled relay core"):
                flow.ran.sock  # noqa: B018 -- lent only for the call
        wait_for(lambda: ("closed", flow.id) in recorder.events, what="on_flow_closed")
        assert recorder.events == [(e, flow.id) for e in ("ran", "wan", "established", "closed")]
        service.dataplane.for_flows([flow], lambda f: pytest.fail("ended flows are skipped"))
    finally:
        in_netns(lab.pep_ns, service.stop)
