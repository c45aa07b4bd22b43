"""A testbed for uplink congestion control: UEs on one cell with an uplink MAC, the
emulator's grant feed writing every UE's grants into a loaded SIGMA instance, and TCP
uploads from the UEs' namespaces to a sink on the server.

``UplinkBed(sigma, scale, n_ues)`` brings the topology up; ``bed.flow(ue, cc)`` opens a
connection with congestion control ``cc`` from UE ``ue`` (index) to a sink whose
reception time of the last byte is the flow's end.
"""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from mec_common.netns import in_netns
from mec_common.tables import cqi_to_mcs, nr_tbs_bits
from mec_pep.sockets import tcp_info
from mts_testbed import builder
from mts_testbed.topology import Topology
from mts_ue.sigma import Sigma

BS_ID = 10000


@dataclass(frozen=True)
class Scale:
    """The uplink the experiment runs on (NR, one slot per ms at numerology 0)."""

    prb: int = 106  # NR 20 MHz at 15 kHz
    ul_cqi: int = 15  # MCS 28 (OAI's map): 9,737 B per slot, 77.9 Mbit/s
    one_way_ms: float = 20.0  # each way: RTT_min ~41 ms
    buffer_bdp: float = 8.3  # the research's 10 MB over its 1.2 MB BDP
    scheduler: str = "rr"  # the research's Round Robin (FlexTtiMacScheduler)

    @property
    def tbs_bytes(self) -> int:
        return nr_tbs_bits(self.prb, cqi_to_mcs(self.ul_cqi)) // 8

    @property
    def rate_Bps(self) -> float:  # noqa: N802
        return self.tbs_bytes * 1000.0

    @property
    def rtt_s(self) -> float:
        return 2 * self.one_way_ms / 1000

    @property
    def bdp_bytes(self) -> int:
        return int(self.rate_Bps * self.rtt_s)

    @property
    def buffer_bytes(self) -> int:
        return int(self.buffer_bdp * self.bdp_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rat": "nr", "numerology": 0, "prb": self.prb, "ul_cqi": self.ul_cqi,
            "ul_mcs": cqi_to_mcs(self.ul_cqi), "tbs_bytes_per_tti": self.tbs_bytes,
            "rate_mbps": round(self.rate_Bps * 8 / 1e6, 2), "one_way_ms": self.one_way_ms,
            "bdp_bytes": self.bdp_bytes, "ue_buffer_bytes": self.buffer_bytes,
            "scheduler": self.scheduler,
        }  # fmt: skip


def scenario(scale: Scale, n_ues: int, feed: Path) -> dict[str, Any]:
    attachment = {
        "bs_id": BS_ID,
        "delay_ms": scale.one_way_ms,
        "ul_delay_ms": scale.one_way_ms,
        "channel": {"cqi": 15},
        "ul_channel": {"cqi": scale.ul_cqi},
        "ul_buffer_bytes": scale.buffer_bytes,
        "grant_feed": str(feed),
        "queue": {"limit_bytes": 4 << 20},
    }
    cell = {
        "bs_id": BS_ID, "rat": "nr", "numerology": 0, "prb": scale.prb,
        "uplink": {"prb": scale.prb, "scheduler": scale.scheduler},
    }  # fmt: skip
    return {"cells": [cell], "ues": [{"count": n_ues, "cells": [attachment]}]}


class Flow:
    """One upload: a socket in the UE's namespace, a sink in the server's. ``end`` is when
    the sink read the last byte (time.monotonic of this process, like ``start``)."""

    def __init__(self, topo: Topology, ue: int, cc: str) -> None:
        self.listener = in_netns(topo.server.ns, lambda: socket.create_server(("0.0.0.0", 0)))
        port = self.listener.getsockname()[1]
        self.received = 0
        self.end: float | None = None
        self._sink = threading.Thread(target=self._drain, daemon=True)
        self._sink.start()

        def connect() -> socket.socket:
            sock = socket.socket()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            sock.connect((topo.server.addresses["wan0"], port))
            return sock

        self.start = time.monotonic()
        self.sock = in_netns(topo.ues[ue].ns, connect)
        self.sent = 0
        self.stop = threading.Event()

    def _drain(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while data := conn.recv(1 << 18):
                self.received += len(data)
            self.end = time.monotonic()

    def warm_up(self) -> None:
        """Make this a persistent connection: one byte sent and ACKed. After it the
        sender knows the sink's scaled window, which a fresh connection's first round
        trip lacks (a SYN-ACK's window is never scaled, RFC 7323 §2.2; docs/sigma.md)."""
        self.send_more(1)
        deadline = time.monotonic() + 10
        while tcp_info(self.sock)["unacked"]:
            if time.monotonic() > deadline:
                raise TimeoutError("the warm-up byte was never ACKed")
            time.sleep(0.001)

    def send_more(self, n: int) -> None:
        """Send n bytes, keeping the connection open."""
        self.sock.sendall(bytes(n))
        self.sent += n

    def send(self, n: int) -> None:
        """Send n bytes and the FIN (the sink's EOF ends the flow)."""
        self.send_more(n)
        self.sock.shutdown(socket.SHUT_WR)

    def run(self) -> None:
        """Send until close() (a saturating upload)."""
        chunk = bytes(1 << 16)
        with contextlib.suppress(OSError):  # closed under it
            while not self.stop.is_set():
                self.sock.sendall(chunk)
                self.sent += len(chunk)

    def wait(self, timeout: float) -> bool:
        self._sink.join(timeout)
        return self.end is not None

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.listener.close()


class UplinkBed:
    """The topology, the SIGMA instance it feeds, the emulator's API."""

    def __init__(self, sigma: Sigma, scale: Scale, n_ues: int) -> None:
        self.sigma, self.scale = sigma, scale
        self.name = "g" + secrets.token_hex(4)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "scenario.yaml"
            path.write_text(yaml.safe_dump(scenario(scale, n_ues, sigma.pin_dir)))
            self.topo = builder.up(path, self.name, log=lambda _: None)
        headers = {"Authorization": f"Bearer {self.topo.emulator.token}"}
        self.api = httpx.Client(base_url=self.topo.emulator.url, headers=headers, timeout=5)

    def ue_ip(self, ue: int) -> str:
        return self.topo.ues[ue].paths[0].ip

    def open_sink_window(self, segments: int) -> None:
        """Let the sink advertise `segments` MSS from its first ACK on. Linux starts a receive
        window small and grows it as data arrives (80,896 B after the first ten segments,
        measured in ue/tests/test_sigma_tcp.py): a slow start of the receiver that caps Max
        Start's first window whatever the sender's cwnd (docs/sigma.md). Route ``initrwnd`` sets the
        first window, ``tcp_rmem``'s default the buffer it needs (twice: half is overhead)."""
        ns = self.topo.server.ns
        rmem = 2 * segments * 1500
        rmem_sysctl = f"net.ipv4.tcp_rmem=4096 {rmem} {max(rmem, 33554432)}"
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", rmem_sysctl], check=True)
        shown = subprocess.run(
            ["ip", "-n", ns, "route", "show"], check=True, capture_output=True, text=True
        )
        for route in shown.stdout.splitlines():
            change = ["ip", "-n", ns, "route", "change", *route.split(), "initrwnd", str(segments)]
            subprocess.run(change, check=True)

    def ul_mac(self, ue: int) -> dict[str, Any]:
        path = f"/emulator/v1/ues/ue{ue + 1}/cells/{BS_ID}"
        return dict(self.api.get(path).raise_for_status().json()["ul_mac"])

    def set_ul_channel(self, ue: int, **change: Any) -> None:
        path = f"/emulator/v1/ues/ue{ue + 1}/cells/{BS_ID}/ul_channel"
        self.api.patch(path, json=change).raise_for_status()

    def wait_for_feed(self, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        for ue in range(len(self.topo.ues)):
            while self.sigma.read_grant(self.ue_ip(ue)) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("the emulator never wrote the grant map")
                time.sleep(0.05)

    def wait_drained(self, timeout: float = 60) -> None:
        """An earlier upload's packets in a modem buffer would delay the next handshake."""
        deadline = time.monotonic() + timeout
        for ue in range(len(self.topo.ues)):
            while self.ul_mac(ue)["buffer_bytes"] > 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"UE {ue}'s modem buffer never drained")
                time.sleep(0.05)

    def flow(self, ue: int, cc: str) -> Flow:
        return Flow(self.topo, ue, cc)

    def close(self) -> None:
        self.api.close()
        builder.down(self.name, log=None)
