"""Data-plane agent: an app's traffic rules become nftables rules on the MEC host.

``FORWARD_DECAPSULATED`` to an IP ``dstInterface`` with a ``dstPort`` (extension) becomes a
TPROXY rule: matching packets are delivered to the app's transparent proxy at
``dstIpAddress:dstPort`` (the PEP's interception rule). ``DROP`` drops and ``PASSTHROUGH``
accepts. Each app gets its own table (``ip mec_<id>``), replaced atomically on every change
and deleted at termination. IPv4 only. Encapsulated and DUPLICATE_* actions are not
implemented: such rules are skipped and logged.

``mec_common.tproxy`` (the PEP's) did not exist when this was written; this module only
needs ``NftRunner.apply``/``delete`` and the fwmark routing below, and should adopt it when
it lands.
"""

from __future__ import annotations

import ipaddress
import subprocess
from typing import Any

from mec_common.logging import get_logger

log = get_logger(__name__)

TPROXY_MARK = 0x4D45  # "ME"
TPROXY_TABLE = 4517


class DataplaneError(RuntimeError):
    pass


class NftRunner:
    """Runs nft/ip in the MEC host's namespace (``ip netns exec`` when one is named)."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def _run(self, cmd: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        if self.netns:
            cmd = ["ip", "netns", "exec", self.netns, *cmd]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=30)

    def apply(self, script: str) -> None:
        done = self._run(["nft", "-f", "-"], stdin=script)
        if done.returncode != 0:
            raise DataplaneError(f"nft refused the rules: {done.stderr.strip()}")

    def delete_table(self, table: str) -> None:
        self._run(["nft", "delete", "table", "ip", table])  # absent is fine

    def list_table(self, table: str) -> str | None:
        done = self._run(["nft", "list", "table", "ip", table])
        return done.stdout if done.returncode == 0 else None

    def ensure_tproxy_routing(self) -> None:
        """Packets marked by TPROXY rules are delivered locally (ip rule + local route)."""
        rules = self._run(["ip", "rule", "show"]).stdout
        if f"fwmark {TPROXY_MARK:#x}" not in rules:
            self._run(["ip", "rule", "add", "fwmark", hex(TPROXY_MARK), "lookup",
                       str(TPROXY_TABLE)])  # fmt: skip
        self._run(["ip", "route", "replace", "local", "0.0.0.0/0", "dev", "lo", "table",
                   str(TPROXY_TABLE)])  # fmt: skip


def table_name(app_instance_id: str) -> str:
    return "mec_" + "".join(c for c in app_instance_id if c.isalnum())[:24]


class DataplaneAgent:
    def __init__(self, runner: NftRunner) -> None:
        self.runner = runner

    def sync(self, app_instance_id: str, rules: list[dict[str, Any]]) -> str:
        """Make the app's table match its ACTIVE traffic rules; returns the nft script."""
        table = table_name(app_instance_id)
        lines = []
        tproxy = False
        for rule in sorted(rules, key=lambda r: int(r.get("priority", 0))):
            if rule.get("state", "ACTIVE") != "ACTIVE":
                continue
            verdict = _verdict(rule)
            if verdict is None:
                log.warning("traffic rule action not implemented; skipped",
                            rule=rule.get("trafficRuleId"), action=rule.get("action"))  # fmt: skip
                continue
            tproxy |= verdict.startswith("meta mark")
            for flt in rule.get("trafficFilter") or [{}]:
                lines.append(f"    {_match(flt)} {verdict}".replace("  ", " ", 1))
        script = (
            f"table ip {table} {{}}\ndelete table ip {table}\n"  # replace atomically
            f"table ip {table} {{\n  chain prerouting {{\n"
            "    type filter hook prerouting priority mangle; policy accept;\n"
            + "\n".join(lines) + "\n  }\n}\n"
        )  # fmt: skip
        if tproxy:
            self.runner.ensure_tproxy_routing()
        self.runner.apply(script)
        return script

    def remove(self, app_instance_id: str) -> None:
        self.runner.delete_table(table_name(app_instance_id))


def _verdict(rule: dict[str, Any]) -> str | None:
    action = rule.get("action")
    if action == "DROP":
        return "drop"
    if action == "PASSTHROUGH":
        return "accept"
    target = rule.get("dstInterface") or {}
    if action == "FORWARD_DECAPSULATED" and target.get("interfaceType") == "IP":
        address = str(ipaddress.IPv4Address(target.get("dstIpAddress") or "127.0.0.1"))
        port = int(target.get("dstPort") or 0)
        if not 0 < port < 65536:
            return None
        return f"meta mark set {TPROXY_MARK:#x} tproxy to {address}:{port} accept"
    return None


def _set(values: list[str]) -> str:
    return "{ " + ", ".join(values) + " }"


def _match(flt: dict[str, Any]) -> str:
    parts = []
    for key, field in (("srcAddress", "saddr"), ("dstAddress", "daddr")):
        if flt.get(key):
            nets = [str(ipaddress.IPv4Network(a, strict=False)) for a in flt[key]]
            parts.append(f"ip {field} {_set(nets)}")
    protocols = [_protocol(p) for p in flt.get("protocol") or []] or ["tcp"]
    parts.append(f"meta l4proto {_set(protocols)}")
    for key, field in (("srcPort", "sport"), ("dstPort", "dport")):
        if flt.get(key):
            parts.append(f"th {field} {_set([_port(p) for p in flt[key]])}")
    return " ".join(parts)


def _protocol(value: str) -> str:
    names = {"6": "tcp", "17": "udp", "tcp": "tcp", "udp": "udp"}
    try:
        return names[str(value).lower()]
    except KeyError:
        raise DataplaneError(f"protocol {value!r} is not tcp or udp") from None


def _port(value: str) -> str:
    low, _, high = str(value).partition("-")
    ports = [int(p) for p in (low, high) if p]
    if not ports or not all(0 < p < 65536 for p in ports):
        raise DataplaneError(f"port {value!r} is not a port or range")
    return "-".join(str(p) for p in ports)
