"""Data-plane agent: an app's traffic rules become nftables TPROXY rules on the MEC host.

A rule with action ``FORWARD_DECAPSULATED`` to an ``IP`` ``dstInterface`` carrying
``dstIpAddress`` and ``dstPort`` (an extension: Mp1 has no port there) delivers matching
TCP connections to the app's transparent proxy at that address (default: the address the
packet arrived at) and port: the PEP's
interception rule. The rules are written by ``mec_common.tproxy`` (the PEP's module): one
table per app and target, ``mec_<app>_<n>``, replaced atomically on every change and
deleted at termination; the fwmark routing TPROXY needs is removed with the last table.

Not implemented (skipped, logged): other actions (DROP, PASSTHROUGH, encapsulation,
duplication), UDP, source ports and port ranges. IPv4 only.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from typing import Any

from mec_common import tproxy
from mec_common.logging import get_logger

log = get_logger(__name__)

# Our own mark and routing table: the PEP's interception in the same namespace (its own
# mark) is never touched when the platform removes an app's rules.
TPROXY_MARK = 0x4D45  # "ME"
TPROXY_TABLE = 4517
TABLE_PREFIX = "mec_"

Target = tuple[str | None, int]


class DataplaneError(RuntimeError):
    pass


def table_prefix(app_instance_id: str) -> str:
    return TABLE_PREFIX + "".join(c for c in app_instance_id if c.isalnum())[:20] + "_"


class DataplaneAgent:
    def __init__(self, runner: tproxy.Runner) -> None:
        self.runner = runner

    def sync(self, app_instance_id: str, rules: list[dict[str, Any]]) -> list[str]:
        """Make the app's tables match its ACTIVE rules; returns the table names. Raises
        DataplaneError if nft refuses any step (the caller then keeps the old rules)."""
        prefix = table_prefix(app_instance_id)
        targets = _intercepts_by_target(rules)
        wanted = [f"{prefix}{n}" for n in range(len(targets))]
        try:
            for table, ((address, port), intercepts) in zip(wanted, targets.items(), strict=True):
                setup = tproxy.TproxySetup(table=table, port=port, mark=TPROXY_MARK,
                                           route_table=TPROXY_TABLE, intercepts=tuple(intercepts),
                                           address=address)  # fmt: skip
                tproxy.install(setup, self.runner)
            for stale in set(self._tables(prefix)) - set(wanted):
                self.runner.check(["nft", "delete", "table", "ip", stale])
        except (tproxy.TproxyError, ValueError) as exc:
            raise DataplaneError(str(exc)) from None
        self._drop_routing_if_unused()
        return wanted

    def remove(self, app_instance_id: str) -> None:
        """Best effort (termination goes on): what cannot be removed is logged."""
        try:
            for table in self._tables(table_prefix(app_instance_id)):
                self.runner.check(["nft", "delete", "table", "ip", table])
        except tproxy.TproxyError as exc:
            log.error("cannot remove traffic rules", app_instance_id=app_instance_id,
                      error=str(exc))  # fmt: skip
        self._drop_routing_if_unused()

    def _tables(self, prefix: str) -> list[str]:
        listed = self.runner.check(["nft", "list", "tables", "ip"]).split()
        return [name for name in listed if name.startswith(prefix)]

    def _drop_routing_if_unused(self) -> None:
        try:
            unused = not self._tables(TABLE_PREFIX)
        except tproxy.TproxyError:
            return  # nft does not answer: leave the routing (harmless without tables)
        if unused:
            tproxy.remove(tproxy.Installed("mec_none", TPROXY_MARK, TPROXY_TABLE), self.runner)


def _intercepts_by_target(rules: list[dict[str, Any]]) -> dict[Target, list[tproxy.Intercept]]:
    targets: dict[Target, list[tproxy.Intercept]] = defaultdict(list)
    for rule in sorted(rules, key=lambda r: int(r.get("priority", 0))):
        if rule.get("state", "ACTIVE") != "ACTIVE":
            continue
        try:
            target = _target(rule)
            intercepts = [_intercept(f) for f in rule.get("trafficFilter") or [{}]]
        except ValueError as exc:
            log.warning("traffic rule not applied", rule=rule.get("trafficRuleId"), reason=str(exc))
            continue
        targets[target].extend(intercepts)
    return targets


def _target(rule: dict[str, Any]) -> Target:
    target = rule.get("dstInterface") or {}
    if rule.get("action") != "FORWARD_DECAPSULATED" or target.get("interfaceType") != "IP":
        raise ValueError(f"action {rule.get('action')} is not implemented")
    given = target.get("dstIpAddress")
    address = str(ipaddress.IPv4Address(given)) if given else None  # None: where it arrived
    port = int(target.get("dstPort") or 0)
    if not 0 < port < 65536:
        raise ValueError("dstInterface.dstPort (the proxy's port) is required")
    return address, port


def _intercept(flt: dict[str, Any]) -> tproxy.Intercept:
    protocols = {str(p).lower() for p in flt.get("protocol") or ["tcp"]}
    if not protocols <= {"tcp", "6"}:
        raise ValueError(f"only TCP is intercepted, not {sorted(protocols)}")
    if flt.get("srcPort"):
        raise ValueError("source ports are not supported")
    return tproxy.Intercept(
        sources=_networks(flt.get("srcAddress")),
        destinations=_networks(flt.get("dstAddress")),
        ports=tuple(int(p) for p in flt.get("dstPort") or []),
    )


def _networks(addresses: list[str] | None) -> tuple[ipaddress.IPv4Network, ...]:
    return tuple(ipaddress.IPv4Network(a, strict=False) for a in addresses or [])
