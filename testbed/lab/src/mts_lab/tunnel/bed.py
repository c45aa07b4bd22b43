"""Two namespaces joined by the multipath tunnel (docs/tunnel.md), for its tests, its
benchmark and its experiment.

``[<name>-ue] mptun0 10.92.0.1 ══ tunnel ══ 10.92.0.2 mptun0 [<name>-mec]``, one veth pair
per path (``10.91.<path>.1`` on the UE side, ``.2`` on the MEC side), each end a
``build/bin/tunnel serve`` in its namespace. A path's rate can be capped with tbf on the
MEC side (the downlink), which is what this kernel has (no netem).

The module also speaks the tunnel's datagram format (``Datagram``), so that a test can be a
peer of its own: valid datagrams, replays, forgeries.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mec_common.ports import free_port
from mts_testbed import netns

REPO = Path(__file__).resolve().parents[5]
BINARY = REPO / "build/bin/tunnel"
UE_ADDR, MEC_ADDR = "10.92.0.1", "10.92.0.2"
API_PORT = 8105
# The TUN's MTU: the tunnel's default TUNNEL_MTU, a 1,500 B underlay less 28 B of UDP/IP and
# the tunnel's 32 B (short header, data seq, tag).
TUN_MTU = 1440


def path_addr(path: int, side: str) -> str:
    """The underlay address of ``side`` (ue or mec) on path ``path``."""
    return f"10.91.{path}.{1 if side == 'ue' else 2}"


def path_port(path: int) -> int:
    return 7000 + path


@dataclass
class PathSpec:
    """One path: its id and an optional tbf rate cap (Mbit/s) on the MEC side's egress."""

    id: int
    rate_mbit: float | None = None
    cwnd_bytes: int | None = None
    rnis_ue: str | None = None  # the MEC end's path reads this UE's RNIS reports


@dataclass
class TunnelBed:
    """The two namespaces, the links and the two tunnel ends. Use as a context manager."""

    name: str = field(default_factory=lambda: f"tnl{secrets.token_hex(3)}")
    paths: list[PathSpec] = field(default_factory=lambda: [PathSpec(1), PathSpec(2)])
    env: dict[str, str] = field(default_factory=dict)  # TUNNEL_* for both ends
    side_env: dict[str, dict[str, str]] = field(default_factory=dict)  # and for one end
    sides: tuple[str, ...] = ("ue", "mec")  # which ends run a daemon
    psk: str = field(default_factory=lambda: secrets.token_hex(16))
    token: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tunnel-bed-")))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def ns(self, side: str) -> str:
        return f"{self.name}-{side}"

    def __enter__(self) -> Self:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        self.make_links()
        for side, addr in (("ue", UE_ADDR), ("mec", MEC_ADDR)):
            netns.ip("tuntap", "add", "mode", "tun", "name", "mptun0", ns=self.ns(side))
            netns.ip("link", "set", "mptun0", "mtu", str(TUN_MTU), "up", ns=self.ns(side))
            netns.ip("addr", "add", f"{addr}/30", "dev", "mptun0", ns=self.ns(side))
        for side in self.sides:
            self.start(side)
        for side in self.sides:
            self.wait_ready(side)

    def make_links(self) -> None:
        """The two namespaces and one veth pair per path (a subclass may use others')."""
        for side in ("ue", "mec"):
            netns.add_namespace(self.ns(side))
        for p in self.paths:
            ue_if, mec_if = f"tu{p.id}", f"tm{p.id}"
            netns.ip(
                "link", "add", ue_if, "netns", self.ns("ue"), "type", "veth",
                "peer", "name", mec_if, "netns", self.ns("mec"),
            )  # fmt: skip
            for side, ifname in (("ue", ue_if), ("mec", mec_if)):
                netns.ip(
                    "addr", "add", f"{path_addr(p.id, side)}/24", "dev", ifname, ns=self.ns(side)
                )
                netns.ip("link", "set", ifname, "up", ns=self.ns(side))
            if p.rate_mbit:
                self.limit(p.id, p.rate_mbit)

    def endpoint(self, path: int, side: str) -> str:
        """The underlay ``address:port`` of ``side``'s socket on path ``path``."""
        return f"{path_addr(path, side)}:{path_port(path)}"

    def limit(self, path: int, rate_mbit: float) -> None:
        """Cap path ``path``'s downlink (MEC side egress) with tbf."""
        burst = max(int(rate_mbit * 1e6 / 8 / 250), 16_000)  # 4 ms of the rate
        netns.run(
            "tc", "-n", self.ns("mec"), "qdisc", "replace", "dev", f"tm{path}", "root", "tbf",
            "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "20ms",
        )  # fmt: skip

    def path_json(self, side: str) -> str:
        other = "mec" if side == "ue" else "ue"
        paths: list[dict[str, Any]] = []
        for p in self.paths:
            entry: dict[str, Any] = {
                "id": p.id,
                "local": self.endpoint(p.id, side),
                "remote": self.endpoint(p.id, other),
            }
            if p.cwnd_bytes:
                entry["cwnd_bytes"] = p.cwnd_bytes
            if p.rnis_ue and side == "mec":
                entry["rnis_ue"] = p.rnis_ue
            paths.append(entry)
        return json.dumps(paths)

    def start(self, side: str) -> None:
        env = {
            **os.environ,
            "TUNNEL_ROLE": side,
            "TUNNEL_PSK": self.psk,
            "TUNNEL_API_TOKENS": self.token,
            "TUNNEL_HTTP_HOST": "127.0.0.1",
            "TUNNEL_HTTP_PORT": str(API_PORT),
            "TUNNEL_PATHS": self.path_json(side),
            "TUNNEL_LOG_LEVEL": "WARNING",
            **self.env,
            **self.side_env.get(side, {}),
        }
        with (self.logs / f"{side}.log").open("wb") as log:  # the child keeps its own copy
            self.procs[side] = subprocess.Popen(
                netns.ns_exec_argv(self.ns(side), [str(BINARY), "serve"]),
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def log(self, side: str) -> str:
        return (self.logs / f"{side}.log").read_text(errors="replace")

    def wait_ready(self, side: str, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[side].poll() is not None:
                raise RuntimeError(f"tunnel ({side}) exited: {self.log(side)[-2000:]}")
            try:
                url = f"http://127.0.0.1:{API_PORT}/healthz"  # an end that hangs never answers
                if self.exec(side, "curl", "-sf", "--max-time", "2", url).strip():
                    return
            except netns.CommandError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"tunnel ({side}) not ready: {self.log(side)[-2000:]}")

    def down(self) -> None:
        netns.stop_processes(list(self.procs.values()), timeout=5)
        for side in ("ue", "mec"):
            netns.delete_namespace(self.ns(side))

    def exec(self, side: str, *cmd: str, check: bool = True) -> str:
        return netns.run(*netns.ns_exec_argv(self.ns(side), cmd), check=check)

    def popen(self, side: str, *cmd: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            netns.ns_exec_argv(self.ns(side), cmd), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def api(
        self, side: str, method: str, path: str, body: Any = None, auth: bool = True
    ) -> tuple[int, Any]:
        """Call the tunnel's API of ``side`` (curl in its namespace): (status, JSON body)."""
        token = self.token if auth else None
        cmd = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "-X", method]
        if token:
            cmd += ["-H", f"Authorization: Bearer {token}"]
        if body is not None:
            cmd += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
        out = self.exec(side, *cmd, f"http://127.0.0.1:{API_PORT}{path}")
        text, _, status = out.rpartition("\n")
        return int(status), json.loads(text) if text.strip() else None

    def get(self, side: str, path: str) -> Any:
        status, body = self.api(side, "GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: {status} {body}")
        return body


def ping_rtts(output: str) -> list[float]:
    """The RTTs (ms) of ``ping`` output's replies."""
    return [
        float(line.split("time=")[1].split()[0]) for line in output.splitlines() if "time=" in line
    ]


# The datagram format (tunnel/internal/wire): a test peer of the tunnel speaks it too.
TYPE_DATA, TYPE_ACK, TYPE_SHORT_DATA = 1, 2, 3
ACK_SEQ_BIT = 1 << 63
WIRE_VERSION = 2


def derive_key(psk: bytes, role: str, epoch: int, peer: int) -> AESGCM:
    info = role.encode()[:1] + struct.pack(">QI", epoch, peer)
    return AESGCM(hmac.new(psk, b"mts-tunnel v2" + info, hashlib.sha256).digest())


def datagram(
    key: AESGCM,
    path: int,
    seq: int,
    *,
    epoch: int,
    peer: int = 1,
    kind: int = TYPE_DATA,
    data_seq: int = 0,
    packet: bytes = b"",
) -> bytes:
    """A sealed datagram (a probe when packet is empty); TYPE_SHORT_DATA has the short
    header, without the epoch and peer id."""
    if kind == TYPE_SHORT_DATA:
        header = struct.pack(">BBHI", WIRE_VERSION << 4 | kind, path, seq >> 32, seq & 0xFFFFFFFF)
    else:
        header = struct.pack(">BBHIQQ", WIRE_VERSION << 4 | kind, path, 0, peer, epoch, seq)
    nonce = struct.pack(">IQ", path, seq)
    body = struct.pack(">Q", data_seq) + packet
    return header + key.encrypt(nonce, body, header)


def start_here(
    state: Path, env: dict[str, str], rnis_ue: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """One tunnel end in this namespace, for what lives here (the platform, RabbitMQ): a TUN
    of its own (a unique name; gone when it exits), one path on loopback to a peer that is
    not there. Returns the process and its API base URL."""
    port = free_port()
    local, remote = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_DGRAM)
    path: dict[str, Any] = {"id": 1, "local": f"127.0.0.1:{local}", "remote": f"127.0.0.1:{remote}"}
    if rnis_ue:
        path["rnis_ue"] = rnis_ue
    full = {
        **os.environ,
        "TUNNEL_TUN": f"mpt{secrets.token_hex(3)}",
        "TUNNEL_PSK": secrets.token_hex(16),
        "TUNNEL_PATHS": json.dumps([path]),
        "TUNNEL_HTTP_HOST": "127.0.0.1",
        "TUNNEL_HTTP_PORT": str(port),
        "TUNNEL_STATE_DIR": str(state),
        **env,
    }
    with (state / "tunnel.log").open("wb") as out:
        proc = subprocess.Popen([str(BINARY), "serve"], env=full, stdout=out, stderr=out)
    return proc, f"http://127.0.0.1:{port}"
