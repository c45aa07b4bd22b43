"""A line with a known delay for the L4S tests and experiments (issue 14)::

    [<name>-c] 10.203.1.2 ─veth─ 10.203.1.1 [<name>-m] wan0 10.203.2.1
                                           ═ emulator WAN ═ wan0 10.203.2.2 [<name>-s]

The kernel has no netem, so the delay (each direction) and the optional rate come from
the RAN emulator's WAN stage, as in the testbed (``docs/testbed.md``); the emulator runs
with one cell and no UE. The MEC host ``m`` routes between client and server, so an
observer there sees both directions: arriving on ``m0`` (client to server) and on
``wan0`` (server to client).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mec_common.netns import in_netns
from mec_common.ports import free_port
from mec_l4s.efm import Marker, Technique
from mts_lab.line import run

REPO = Path(__file__).resolve().parents[5]
EMULATOR = REPO / "build/bin/ran-emulator"
MARKER_OBJ = REPO / "build/bpf/efm_marker.bpf.o"
OBSERVER_OBJ = REPO / "build/bpf/efm_observer.bpf.o"


@dataclass
class WanLine:
    name: str
    delay_ms: float
    rate_mbps: float = 0.0
    queue: str = "fifo"  # the WAN bottleneck: fifo or dualpi2
    reorder_pct: float = 0.0  # the WAN's packets (%) that skip its delay (netem's reorder)
    jitter_ms: float = 0.0  # uniform ± on each packet's delay, kept in order
    # DualPI2 settings other than the Linux defaults (the emulator's wan.dualpi2_coupling,
    # wan.dualpi2_step_us)
    dualpi2: dict[str, float] = field(default_factory=dict)
    client_ip: str = "10.203.1.2"
    mec_client_side_ip: str = "10.203.1.1"
    mec_wan_ip: str = "10.203.2.1"
    server_ip: str = "10.203.2.2"
    emulator: subprocess.Popen[bytes] | None = None
    _api: tuple[str, str] = ("", "")  # the emulator's base URL and token
    _tmp: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mts-l4s-")))

    @property
    def client_ns(self) -> str:
        return f"{self.name}-c"

    @property
    def mec_ns(self) -> str:
        return f"{self.name}-m"

    @property
    def server_ns(self) -> str:
        return f"{self.name}-s"

    @classmethod
    def create(
        cls,
        delay_ms: float,
        rate_mbps: float = 0.0,
        queue: str = "fifo",
        prefix: str = "l4s",
        reorder_pct: float = 0.0,
        jitter_ms: float = 0.0,
        dualpi2: dict[str, float] | None = None,
    ) -> WanLine:
        line = cls(
            f"{prefix}{secrets.token_hex(3)}", delay_ms, rate_mbps, queue, reorder_pct,
            jitter_ms, dualpi2 or {},
        )  # fmt: skip
        try:
            line._build()
            line._start_emulator()
        except BaseException:
            line.down()
            raise
        return line

    def sh(self, ns: str, command: str) -> str:
        return run(["ip", "netns", "exec", ns, "sh", "-c", command]).stdout

    def _build(self) -> None:
        c, m, s = self.client_ns, self.mec_ns, self.server_ns
        for ns in (c, m, s):
            run(["ip", "netns", "add", ns])
            self.sh(ns, "ip link set lo up")
        tmp_a, tmp_b = f"v{secrets.token_hex(4)}", f"v{secrets.token_hex(4)}"
        run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b])
        run(["ip", "link", "set", tmp_a, "netns", c, "name", "c0"])
        run(["ip", "link", "set", tmp_b, "netns", m, "name", "m0"])
        self.sh(c, f"ip addr add {self.client_ip}/24 dev c0 && ip link set c0 up")
        self.sh(c, f"ip route add default via {self.mec_client_side_ip}")
        self.sh(m, f"ip addr add {self.mec_client_side_ip}/24 dev m0 && ip link set m0 up")
        self.sh(m, "sysctl -qw net.ipv4.ip_forward=1")
        for ns, local, peer in (
            (m, self.mec_wan_ip, self.server_ip),
            (s, self.server_ip, self.mec_wan_ip),
        ):
            self.sh(ns, "ip tuntap add dev wan0 mode tun && ip link set wan0 txqueuelen 1000 up")
            self.sh(ns, f"ip addr add {local} peer {peer} dev wan0")
        # the emulator's downlink TUN, unused (no UE), in the MEC namespace
        self.sh(m, "ip tuntap add dev emu-dl mode tun && ip link set emu-dl up")
        self.sh(s, "ip route add default dev wan0")

    def _emulator_config(self) -> dict[str, Any]:
        return {
            "stats_period_ms": 100,
            "seed": 1,
            "dl_tun": {"netns": f"/run/netns/{self.mec_ns}", "name": "emu-dl"},
            # NR numerology 3: 125 µs ticks, so the bottleneck's sojourn times have
            # sub-millisecond resolution (DualPI2's step threshold is 1 ms)
            "cells": [{"bs_id": 1, "rat": "nr", "numerology": 3, "prb": 25}],
            "ues": [],
            "wan": {
                "server_tun": {"netns": f"/run/netns/{self.server_ns}", "name": "wan0"},
                "mec_tun": {"netns": f"/run/netns/{self.mec_ns}", "name": "wan0"},
                "delay_ms": self.delay_ms,
                "rate_mbps": self.rate_mbps,
                "queue": self.queue,
            }
            | ({"reorder_pct": self.reorder_pct} if self.reorder_pct else {})
            | ({"jitter_ms": self.jitter_ms} if self.jitter_ms else {})
            | {f"dualpi2_{k}": v for k, v in self.dualpi2.items()},
        }

    def _start_emulator(self) -> None:
        if not EMULATOR.exists():
            raise FileNotFoundError(f"{EMULATOR} missing: make build/bin/ran-emulator")
        config = self._tmp / "emulator.json"
        config.write_text(json.dumps(self._emulator_config()))
        port = free_port()
        token = secrets.token_hex(16)
        log = (self._tmp / "emulator.log").open("wb")
        self.emulator = subprocess.Popen(
            [str(EMULATOR), "-config", str(config), "-http-host", "127.0.0.1",
             "-http-port", str(port), "-api-tokens", token, "-state-dir", str(self._tmp),
             "-log-format", "console"],
            stdout=log, stderr=log, env={**os.environ},
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.emulator.poll() is not None:
                raise RuntimeError(
                    f"ran-emulator exited: {(self._tmp / 'emulator.log').read_text()[-2000:]}"
                )
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                self._api = (f"http://127.0.0.1:{port}", token)
                return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError("ran-emulator did not answer /healthz in 30 s")

    def wan_stats(self) -> list[dict[str, Any]]:
        """The emulator's WAN directions: packet counters and, with DualPI2, its marks
        (step and coupled) and p′ (``GET /emulator/v1/wan``)."""
        url, token = self._api
        response = httpx.get(
            f"{url}/emulator/v1/wan", headers={"Authorization": f"Bearer {token}"}, timeout=5
        )
        response.raise_for_status()
        stats: list[dict[str, Any]] = response.json()
        return stats

    def down(self) -> None:
        if self.emulator is not None and self.emulator.poll() is None:
            self.emulator.terminate()
            try:
                self.emulator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.emulator.kill()
                self.emulator.wait()
        for ns in (self.client_ns, self.mec_ns, self.server_ns):
            run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(self._tmp, ignore_errors=True)


def serve_once(netns: str, ip: str, handler: Callable[[socket.socket], None], cca: str = "") -> int:
    """A one-connection TCP server on ``ip`` in ``netns``, in a thread; returns its port.
    ``cca``: the listener's congestion control (it decides the handshake's ECN offer)."""

    def listen() -> socket.socket:
        s = socket.socket()
        if cca:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
        s.bind((ip, 0))
        s.listen(1)
        return s

    ls = in_netns(netns, listen)

    def run_handler() -> None:
        conn, _ = ls.accept()
        with conn:
            handler(conn)
        ls.close()

    threading.Thread(target=run_handler, daemon=True).start()
    return int(ls.getsockname()[1])


def connect(netns: str, ip: str, port: int, cca: str = "", timeout: float = 10) -> socket.socket:
    """A TCP connection made from ``netns`` (the socket stays there); ``cca``: its
    congestion control, chosen before the handshake (Prague's asks for Accurate ECN)."""

    def make() -> socket.socket:
        s = socket.socket()
        if cca:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
        s.settimeout(timeout)
        s.connect((ip, port))
        return s

    return in_netns(netns, make)


@contextmanager
def marking(line: WanLine, technique: Technique, **configure: Any) -> Iterator[list[Marker]]:
    """The endpoint marker on the client's and the server's interface, for the block."""
    markers: list[Marker] = []
    try:
        for ns, ifname in ((line.client_ns, "c0"), (line.server_ns, "wan0")):
            m = Marker.load(MARKER_OBJ, f"mts-efm-{line.name}-{ns[-1]}")
            markers.append(m)
            m.configure(technique, **configure)
            m.attach(ifname, ns)
        yield markers
    finally:
        for m in markers:
            m.close()


def tcp_info_rtt_ms(sock: socket.socket) -> float:
    """tcpi_rtt (the kernel's smoothed RTT, µs) of struct tcp_info, at byte offset 68."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return float(struct.unpack_from("I", raw, 68)[0]) / 1000


SO_MAX_PACING_RATE = 47


def paced_download(
    line: WanLine,
    seconds: float,
    *,
    rate_mbps: float = 10.0,
    every_s: float = 0.1,
    on_tick: Callable[[], None] | None = None,
) -> list[float]:
    """Server to client for ``seconds``, paced by the server's kernel at ``rate_mbps``
    (SO_MAX_PACING_RATE: the sender always has data, so a sample never waits for the
    application); returns the server socket's TCP_INFO RTT (ms) every ``every_s`` (the data
    sender's view, the truth for the RTT), calling ``on_tick`` on the client side too."""
    truth: list[float] = []

    def send(conn: socket.socket) -> None:
        conn.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(rate_mbps * 1e6 / 8))
        end = time.monotonic() + seconds
        next_tick = time.monotonic()
        block = b"d" * 16384
        while time.monotonic() < end:
            conn.sendall(block)
            if time.monotonic() >= next_tick:
                truth.append(tcp_info_rtt_ms(conn))
                next_tick += every_s

    port = serve_once(line.server_ns, line.server_ip, send)
    with connect(line.client_ns, line.server_ip, port) as sock:
        sock.settimeout(10)
        next_tick = time.monotonic()
        while sock.recv(1 << 16):
            if on_tick is not None and time.monotonic() >= next_tick:
                on_tick()
                next_tick += every_s
    return truth
