"""Actuation through the multipath tunnel (docs/tunnel.md), the other data plane beside MPTCP.

Same contract as ``MptcpActuator``: a path is one of the UE's addresses (one per cell),
``set_active(ip, active)`` returns how many data-plane paths it changed, ``close()`` ends it.
Each UE address maps to a path of a tunnel end (``PM_TUNNEL_PATHS``); activating or
deactivating it is ``PATCH <tunnel>/paths/<id> {"enabled": ...}`` on that end's REST API,
which returns once the tunnel's scheduler uses (or stops using) the path. A tunnel that
cannot be reached changes nothing and shows as ``tunnel`` in ``/healthz``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from ipaddress import IPv4Address

import httpx

from mec_common.health import Health
from mec_common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class TunnelPath:
    """A path of one tunnel end: its API base (``.../tunnel/v1``) and the path id there."""

    api: str
    path_id: int


def parse_paths(raw: str) -> dict[IPv4Address, TunnelPath]:
    """``PM_TUNNEL_PATHS``: ``{"<UE path ip>": {"api": "<tunnel end>/tunnel/v1", "path": 1}}``."""
    try:
        entries = json.loads(raw)
        if not isinstance(entries, dict) or not entries:
            raise ValueError("a non-empty JSON object")
        return {
            IPv4Address(ip): TunnelPath(str(e["api"]).rstrip("/"), _path_id(e["path"]))
            for ip, e in entries.items()
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            'PM_TUNNEL_PATHS must be {"<UE path ip>": {"api": "<tunnel API base>",'
            f' "path": <1..255>}}}}: {exc}'
        ) from exc


def _path_id(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 255:
        raise ValueError(f"path id {value!r} is not an integer 1..255")
    return value


class TunnelActuator:
    """Enables and disables tunnel paths (see the module docstring)."""

    def __init__(
        self,
        paths: dict[IPv4Address, TunnelPath],
        token: str | None,
        health: Health | None = None,
        timeout: float = 2.0,
    ) -> None:
        self.paths = paths
        self._health = health
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self.errors = 0
        self._report(True, f"{len(paths)} tunnel path(s) configured")

    def start(self) -> None:
        """Nothing runs in the background (the MPTCP actuator follows events)."""

    def close(self) -> None:
        self._client.close()

    def set_active(self, path: IPv4Address, active: bool) -> int:
        """Enable or disable the tunnel path of UE address ``path``; 1 if done, else 0."""
        target = self.paths.get(path)
        if target is None:
            log.warning("no tunnel path for this UE address", path=str(path))
            return 0
        url = f"{target.api}/paths/{target.path_id}"
        try:
            response = self._client.patch(url, json={"enabled": active})
        except httpx.HTTPError as exc:
            return self._failed(f"{url}: {exc}")
        if response.status_code != 200:
            return self._failed(f"{url}: HTTP {response.status_code} {response.text[:200]}")
        self._report(True, f"path {target.path_id} at {target.api} enabled={active}")
        return 1

    def _failed(self, detail: str) -> int:
        self.errors += 1
        log.error("tunnel actuation failed", detail=detail)
        self._report(False, f"actuation failed, decision not applied: {detail}")
        return 0

    def _report(self, ok: bool, detail: str) -> None:
        if self._health is not None:
            self._health.set("tunnel", ok, detail, required=False)
