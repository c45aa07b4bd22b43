"""Fixtures of the MELD/RAPID tests: the registered program, namespace pairs, a broker.

Everything is real: the BPF object built by ``make build`` registered in the running
kernel (under a unique instance name, so parallel runs never share congestion controls
or maps), veth pairs in fresh network namespaces, the shared RabbitMQ with exchanges of
our own.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mec_pep.ran_aware.kernel import CcaMode, MeldKernel, Tuning, loader_paths
from mts_lab.line import in_netns, run

PIN_ROOT = Path("/sys/fs/bpf/mts-pep")
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # beyond net.core.[rw]mem_max (root)

# The tests keep radio state fresh from Python threads, which a loaded machine can delay
# by tens of milliseconds: a generous staleness bound keeps "fresh" fresh. The bound
# itself is tested on the decision alone (test_kernel.py).
TUNING = Tuning(
    stale_ms=1000.0,
    rapid_period_ms=100.0,
    rapid_init_cwnd=40,
    rapid_min_cwnd=4,
    rapid_gain_pct=100,
    rapid_rtt_extra_us=0,
)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("MELD/RAPID tests need root (BPF struct_ops, network namespaces)")


@pytest.fixture(scope="session")
def pin_root() -> Path:
    return PIN_ROOT


@pytest.fixture(scope="session")
def tuning() -> Tuning:
    return TUNING


@pytest.fixture(scope="session")
def build() -> tuple[Path, Path]:
    """The built loader and object; every test that loads them runs as root."""
    require_root()
    loader, obj = loader_paths()
    missing = [str(p) for p in (loader, obj) if not p.is_file()]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (run `make build`)")
    return loader, obj


@pytest.fixture(scope="module")
def kernel(build: tuple[Path, Path]) -> Iterator[MeldKernel]:
    k = MeldKernel.load(*build, PIN_ROOT, f"test-{secrets.token_hex(4)}")
    k.configure(CcaMode.MELD_ME, TUNING)
    try:
        yield k
    finally:
        k.close()


@dataclass
class NetnsPair:
    """A sender ``a`` (10.198.x.1: the PEP's RAN leg) and a receiver ``b`` (10.199.x.2: the
    UE), through a router ``r`` whose link toward ``b`` can be a bottleneck. The queue is on
    the router, not on the sender: a queue in the sender's own qdisc would be throttled by
    TCP small queues and never fill.

    The sender's link sends one TCP segment per packet (``gso_max_segs 1``). With GSO, a
    packet on a veth is a burst of segments whose length follows TSO autosizing (the
    RTT, the load): the UE's loss rule would drop bursts, fewer and longer on a busy
    machine, instead of single segments at random."""

    name: str
    a: str
    r: str
    b: str
    a_ip: str
    b_ip: str
    _listeners: list[socket.socket] = field(default_factory=list)

    @classmethod
    def create(cls) -> NetnsPair:
        name = f"mt{secrets.token_hex(3)}"
        x = secrets.randbelow(200) + 20
        pair = cls(name, f"{name}-a", f"{name}-r", f"{name}-b", f"10.198.{x}.1", f"10.199.{x}.2")
        try:
            for ns in (pair.a, pair.r, pair.b):
                run(["ip", "netns", "add", ns])
                pair.sh(ns, "ip link set lo up")
            pair._link(pair.a, f"{name}a", pair.a_ip, f"{name}ra", f"10.198.{x}.254")
            pair.sh(pair.a, f"ip link set {name}a gso_max_segs 1")
            pair._link(pair.b, f"{name}b", pair.b_ip, f"{name}rb", f"10.199.{x}.254")
            pair.sh(pair.r, "sysctl -qw net.ipv4.ip_forward=1")
            pair.sh(pair.a, f"ip route add default via 10.198.{x}.254")
            pair.sh(pair.b, f"ip route add default via 10.199.{x}.254")
        except BaseException:
            pair.down()
            raise
        return pair

    def _link(self, ns: str, ns_if: str, ns_ip: str, r_if: str, r_ip: str) -> None:
        run(["ip", "link", "add", ns_if, "netns", ns, "type", "veth",
             "peer", "name", r_if, "netns", self.r])  # fmt: skip
        self.sh(ns, f"ip addr add {ns_ip}/24 dev {ns_if} && ip link set {ns_if} up")
        self.sh(self.r, f"ip addr add {r_ip}/24 dev {r_if} && ip link set {r_if} up")

    def sh(self, ns: str, command: str) -> str:
        return run(["ip", "netns", "exec", ns, "sh", "-c", command]).stdout

    def random_loss(self, per_mille: int, dport: int, *, dscp: int | None = None) -> None:
        """Drop that share of the data segments toward the receiver (nftables numgen).

        With ``dscp``, only segments with that DSCP: the sender turns the loss on by
        marking its packets (``IP_TOS``), at a moment of its choosing, where a command
        would start at a moment a loaded machine chooses. A second call replaces the
        first one's rule (the table is flushed), so the loss is never applied twice."""
        marked = f"ip dscp {dscp} " if dscp is not None else ""
        chain = "{ type filter hook input priority 0; }"
        rule = f"{marked}tcp dport {dport} numgen random mod 1000 < {per_mille} drop"
        self.sh(self.b, f"nft 'add table inet loss; flush table inet loss; "
                f"add chain inet loss in {chain}; add rule inet loss in {rule}'")  # fmt: skip

    def bottleneck(self, rate: str, limit: str = "20mb") -> None:
        """A rate limit with a deep queue on the router toward ``b`` (tbf; there is no netem)."""
        dev = f"{self.name}rb"
        self.sh(self.r, f"tc qdisc add dev {dev} root tbf rate {rate} burst 32kb limit {limit}")

    def sink(self, port: int, rcvbuf: int = 16 << 20) -> None:
        """A receiver in ``b`` that reads and discards everything, one connection at a time."""

        def make() -> socket.socket:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
            s.bind((self.b_ip, port))
            s.listen()
            return s

        listener = in_netns(self.b, make)
        self._listeners.append(listener)

        def serve() -> None:
            with listener:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except OSError:
                        return
                    with conn:
                        while conn.recv(1 << 20):
                            pass

        threading.Thread(target=serve, daemon=True).start()

    def connect(self, port: int, cca: str) -> socket.socket:
        def make() -> socket.socket:
            s = socket.socket()
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
            s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 16 << 20)
            s.connect((self.b_ip, port))
            return s

        return in_netns(self.a, make)

    def down(self) -> None:
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        for ns in (self.a, self.r, self.b):
            run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def netns_pair() -> Iterator[NetnsPair]:
    require_root()
    pair = NetnsPair.create()
    try:
        yield pair
    finally:
        pair.down()


@pytest.fixture
def unique() -> Callable[[str], str]:
    return lambda prefix: f"{prefix}-{secrets.token_hex(4)}"
