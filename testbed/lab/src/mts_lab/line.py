"""A three-namespace line for tests and benchmarks: client ─ pep ─ server.

::

    [<name>-c] 10.201.1.2 ── 10.201.1.1 [<name>-p] 10.201.2.1 ── 10.201.2.2 [<name>-s]
               fd00:201:1::2   fd00:201:1::1     fd00:201:2::1   fd00:201:2::2

The middle namespace routes (so traffic can go "direct") and is where a PEP or HAProxy
runs. Names carry a random suffix so parallel runs never collide; ``down()`` removes
everything (deleting a namespace deletes its veth ends).

``in_netns(ns, fn)`` (``mec_common.netns``) runs ``fn`` in a thread that joined namespace
``ns``: sockets it creates stay in that namespace and can be used from any thread
afterwards, and threads it starts inherit the namespace (this is how tests run a relay
inside the PEP namespace).
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mec_common.netns import in_netns

__all__ = ["Lab", "in_netns", "run"]


def run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
    return done


@dataclass(frozen=True)
class Lab:
    name: str
    client_ns: str
    pep_ns: str
    server_ns: str
    client_ip: str = "10.201.1.2"
    pep_client_side_ip: str = "10.201.1.1"
    pep_server_side_ip: str = "10.201.2.1"
    server_ip: str = "10.201.2.2"
    client_ip6: str = "fd00:201:1::2"
    pep_client_side_ip6: str = "fd00:201:1::1"
    pep_server_side_ip6: str = "fd00:201:2::1"
    server_ip6: str = "fd00:201:2::2"
    pep_client_if: str = "pc0"  # the PEP's interface toward the client
    pep_server_if: str = "ps0"

    @classmethod
    def create(cls, prefix: str = "pep") -> Lab:
        name = f"{prefix}{secrets.token_hex(3)}"
        lab = cls(name, f"{name}-c", f"{name}-p", f"{name}-s")
        try:
            lab._build()
        except BaseException:
            lab.down()
            raise
        return lab

    def _build(self) -> None:
        for ns in (self.client_ns, self.pep_ns, self.server_ns):
            run(["ip", "netns", "add", ns])
            self.sh(ns, "ip link set lo up")
            # TFO on both ends (client bit for the client, server bit for the PEP).
            self.sh(ns, "sysctl -qw net.ipv4.tcp_fastopen=3")
            # Connection-rate runs open tens of thousands of connections to one address:
            # reuse TIME_WAIT ports for new outgoing connections, and use the whole range.
            self.sh(ns, "sysctl -qw net.ipv4.tcp_tw_reuse=1")
            self.sh(ns, "sysctl -qw net.ipv4.ip_local_port_range='1024 65535'")
            # IPv6 usable at once: links moved in here skip duplicate address detection
            # (a tentative link-local address cannot resolve neighbours for ~1 s).
            self.sh(ns, "sysctl -qw net.ipv6.conf.default.accept_dad=0")
        self._link(
            self.client_ns, "c0", self.client_ip, self.pep_client_if, self.pep_client_side_ip
        )
        self._link(
            self.server_ns, "s0", self.server_ip, self.pep_server_if, self.pep_server_side_ip
        )
        self.sh(self.pep_ns, "sysctl -qw net.ipv4.ip_forward=1")
        self.sh(self.pep_ns, "sysctl -qw net.ipv6.conf.all.forwarding=1")
        self.sh(self.client_ns, f"ip route add default via {self.pep_client_side_ip}")
        self.sh(self.server_ns, f"ip route add default via {self.pep_server_side_ip}")
        self._link6(
            self.client_ns, "c0", self.client_ip6, self.pep_client_if, self.pep_client_side_ip6
        )
        self._link6(
            self.server_ns, "s0", self.server_ip6, self.pep_server_if, self.pep_server_side_ip6
        )

    def _link(self, ns: str, ns_if: str, ns_ip: str, pep_if: str, pep_ip: str) -> None:
        tmp_a, tmp_b = f"v{secrets.token_hex(4)}", f"v{secrets.token_hex(4)}"
        run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b])
        run(["ip", "link", "set", tmp_a, "netns", ns, "name", ns_if])
        run(["ip", "link", "set", tmp_b, "netns", self.pep_ns, "name", pep_if])
        self.sh(ns, f"ip addr add {ns_ip}/24 dev {ns_if}")
        self.sh(ns, f"ip link set {ns_if} up")
        self.sh(self.pep_ns, f"ip addr add {pep_ip}/24 dev {pep_if}")
        self.sh(self.pep_ns, f"ip link set {pep_if} up")

    def _link6(self, ns: str, ns_if: str, ns_ip: str, pep_if: str, pep_ip: str) -> None:
        """IPv6 on a link (no duplicate address detection: usable at once)."""
        self.sh(ns, f"ip -6 addr add {ns_ip}/64 dev {ns_if} nodad")
        self.sh(self.pep_ns, f"ip -6 addr add {pep_ip}/64 dev {pep_if} nodad")
        self.sh(ns, f"ip -6 route add default via {pep_ip}")

    def sh(self, ns: str, command: str, *, check: bool = True) -> str:
        return run(["ip", "netns", "exec", ns, "sh", "-c", command], check=check).stdout

    def popen(self, ns: str, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(["ip", "netns", "exec", ns, *cmd], **kwargs)

    def down(self) -> None:
        for ns in (self.client_ns, self.pep_ns, self.server_ns):
            run(["ip", "netns", "del", ns], check=False)
