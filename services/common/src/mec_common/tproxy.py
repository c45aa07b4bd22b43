"""Transparent interception with nftables TPROXY (the PEP's, and the platform's data plane).

``TproxySetup`` describes what to intercept and where to deliver it; ``install`` writes one
nftables table (replaced atomically) plus the policy routing that TPROXY needs::

    table ip <table> {
      chain prerouting {
        type filter hook prerouting priority mangle; policy accept;
        # packets of sockets the proxy already owns, including replies to a WAN leg bound
        # to the UE's address (IP_TRANSPARENT): deliver them locally
        meta l4proto tcp socket transparent 1 meta mark set <mark> accept
        # new connections to intercept
        iifname {..} ip saddr {..} ip daddr {..} tcp dport {..}
            tproxy to :<port> meta mark set <mark> accept
      }
    }
    ip rule add fwmark <mark> lookup <route_table>
    ip route add local 0.0.0.0/0 dev lo table <route_table>

The proxy's listening socket needs ``IP_TRANSPARENT`` and sees the original destination
as its local address. ``install`` records what it created in a state file, so that
``cleanup`` removes it at the next start after a crash.

IPv6: intercepts that name IPv6 networks get the same rules in a ``table ip6 <table>``
(``ip6 saddr``/``ip6 daddr``) and the same policy routing with ``ip -6`` (``local ::/0``);
the listener needs ``IPV6_TRANSPARENT``. An intercept without any network stays IPv4 only
(as before IPv6 existed here), so installers that never name IPv6 get no ip6 table.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from mec_common.logging import get_logger

log = get_logger(__name__)


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_FAMILY = {4: "ip", 6: "ip6"}  # nftables table family per IP version


class TproxyError(RuntimeError):
    """nft or ip refused a command."""


@dataclass(frozen=True)
class Intercept:
    """TCP to intercept: every given field must match (an empty field matches anything)."""

    sources: tuple[Network, ...] = ()
    destinations: tuple[Network, ...] = ()
    ports: tuple[int, ...] = ()  # destination ports
    interfaces: tuple[str, ...] = ()  # input interfaces

    def match(self, version: int = 4) -> str | None:
        """The rule's match for IP ``version`` (4 or 6); None if nothing of it matches."""
        sources = [n for n in self.sources if n.version == version]
        destinations = [n for n in self.destinations if n.version == version]
        if (self.sources and not sources) or (self.destinations and not destinations):
            return None  # e.g. IPv4 clients to IPv6 servers: no packet matches both
        if version == 6 and not (sources or destinations):
            return None  # no network named: IPv4 only, as before IPv6 was supported
        ip = "ip" if version == 4 else "ip6"
        parts = []
        if self.interfaces:
            parts.append("iifname " + _set(f'"{_interface(i)}"' for i in self.interfaces))
        if sources:
            parts.append(f"{ip} saddr " + _set(str(n) for n in sources))
        if destinations:
            parts.append(f"{ip} daddr " + _set(str(n) for n in destinations))
        parts.append("meta l4proto tcp")
        if self.ports:
            parts.append("tcp dport " + _set(str(_port(p)) for p in self.ports))
        return " ".join(parts)


@dataclass(frozen=True)
class TproxySetup:
    table: str  # nftables table (family ip, and ip6 for IPv6), owned entirely by its installer
    port: int  # the transparent listener's port
    mark: int  # fwmark that routes a packet to the local host
    route_table: int  # policy routing table holding the local default route
    intercepts: tuple[Intercept, ...]
    address: str | None = None  # listener address; None = where the packet arrived

    @property
    def has_ipv6(self) -> bool:
        return any(i.match(6) is not None for i in self.intercepts)

    def script(self) -> str:
        """The nft script: the ip table, and the ip6 table when IPv6 is intercepted."""
        script = self._table_script(4)
        return script + self._table_script(6) if self.has_ipv6 else script

    def _table_script(self, version: int) -> str:
        mark = f"{self.mark:#x}"
        address, port = self.address or "", _port(self.port)
        target = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
        rules = [f"meta l4proto tcp socket transparent 1 meta mark set {mark} accept"]
        matches = [m for i in self.intercepts if (m := i.match(version)) is not None]
        rules += [f"{m} tproxy to {target} meta mark set {mark} accept" for m in matches]
        body = "\n".join(f"    {rule}" for rule in rules)
        family, name = _FAMILY[version], _table(self.table)
        return (
            f"table {family} {name} {{}}\ndelete table {family} {name}\n"  # replace atomically
            f"table {family} {name} {{\n  chain prerouting {{\n"
            "    type filter hook prerouting priority mangle; policy accept;\n"
            f"{body}\n  }}\n}}\n"
        )


@dataclass(frozen=True)
class Installed:
    """What ``install`` created (the state file's content)."""

    table: str
    mark: int
    route_table: int


class Runner:
    """Runs nft and ip, in a named network namespace if given (else the current one)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def run(self, cmd: Sequence[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        full = ["ip", "netns", "exec", self.netns, *cmd] if self.netns else list(cmd)
        return subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=30)

    def check(self, cmd: Sequence[str], stdin: str | None = None) -> str:
        done = self.run(cmd, stdin)
        if done.returncode != 0:
            raise TproxyError(f"{' '.join(cmd[:3])}: {done.stderr.strip() or done.returncode}")
        return done.stdout


def install(setup: TproxySetup, runner: Runner, state_file: Path | None = None) -> None:
    """Install (or replace) the table and its routing; record them in ``state_file``."""
    if state_file is not None:
        state_file.parent.mkdir(parents=True, exist_ok=True)
        installed = Installed(setup.table, setup.mark, setup.route_table)
        state_file.write_text(json.dumps(asdict(installed)) + "\n")
    _ensure_routing(setup.mark, setup.route_table, runner, 4)
    if setup.has_ipv6:
        _ensure_routing(setup.mark, setup.route_table, runner, 6)
    runner.check(["nft", "-f", "-"], stdin=setup.script())
    log.info("TPROXY rules installed", table=setup.table, port=setup.port, mark=hex(setup.mark))


def remove(installed: Installed, runner: Runner) -> None:
    """Remove the tables and their routing (both IP versions); absent parts are fine."""
    rule = ["fwmark", f"{installed.mark:#x}", "lookup", str(installed.route_table)]
    for version in (4, 6):
        runner.run(["nft", "delete", "table", _FAMILY[version], _table(installed.table)])
        ip = ["ip", f"-{version}"]
        while runner.run([*ip, "rule", "del", *rule]).returncode == 0:
            pass  # the same rule may have been added more than once
        runner.run([*ip, "route", "flush", "table", str(installed.route_table)])


def cleanup(state_file: Path, runner: Runner) -> Installed | None:
    """Remove what a previous ``install`` recorded (e.g. before a crash), then the record."""
    try:
        installed = Installed(**json.loads(state_file.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        log.warning("unreadable TPROXY state file; removing it", path=str(state_file), error=exc)
        state_file.unlink()
        return None
    remove(installed, runner)
    state_file.unlink()
    log.info("removed TPROXY rules of a previous run", table=installed.table)
    return installed


def _ensure_routing(mark: int, route_table: int, runner: Runner, version: int) -> None:
    ip = ["ip", f"-{version}"]
    rules = runner.check([*ip, "rule", "show"])
    if f"fwmark {mark:#x} lookup {route_table}" not in rules:
        runner.check([*ip, "rule", "add", "fwmark", f"{mark:#x}", "lookup", str(route_table)])
    default = "0.0.0.0/0" if version == 4 else "::/0"
    runner.check(
        [*ip, "route", "replace", "local", default, "dev", "lo", "table", str(route_table)]
    )


def _set(items: Iterable[str]) -> str:
    return "{ " + ", ".join(items) + " }"


def _port(port: int) -> int:
    if not 0 < int(port) < 65536:
        raise ValueError(f"port {port} out of range")
    return int(port)


def _interface(name: str) -> str:
    if not name or len(name) > 15 or not all(c.isalnum() or c in "-_.@" for c in name):
        raise ValueError(f"bad interface name {name!r}")
    return name


def _table(name: str) -> str:
    if not name or not all(c.isalnum() or c == "_" for c in name):
        raise ValueError(f"bad nftables table name {name!r}")
    return name
