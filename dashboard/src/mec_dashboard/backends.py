"""The services the dashboard reads, each with its state as the page shows it.

A backend is one REST API (RNIS, PEP, path manager, platform). Its base URL is configured
or found through Mp1 discovery; every read records whether it worked, so a lost backend
shows on the page as lost (with since when and why) instead of as a frozen chart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from mec_common.mp1 import Mp1Client

TokenSource = Callable[[], Awaitable[str | None]]


@dataclass
class BackendState:
    """What the page shows about one backend."""

    url: str | None = None
    ok: bool | None = None  # None: not found yet (not registered on Mp1, not configured)
    detail: str = "not discovered yet"
    since: float = field(default_factory=time.time)
    last_ok: float | None = None
    health: dict[str, Any] | None = None  # the service's own /healthz report

    def record(self, ok: bool | None, detail: str) -> None:
        if ok != self.ok:
            self.since = time.time()
        self.ok, self.detail = ok, detail
        if ok:
            self.last_ok = time.time()

    def view(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ok": self.ok,
            "detail": self.detail,
            "since": self.since,
            "last_ok": self.last_ok,
            "health": self.health,
        }


class Backend:
    """One service's REST API: ``get`` answers the JSON body, or None when it failed."""

    def __init__(
        self,
        name: str,
        ser_name: str | None,
        configured_url: str | None,
        http: httpx.AsyncClient,
        token: TokenSource,
    ) -> None:
        self.name, self.ser_name = name, ser_name
        self.http, self.token = http, token
        self.state = BackendState(url=configured_url.rstrip("/") if configured_url else None)
        self.configured = configured_url is not None
        if not self.configured and ser_name is None:
            self.state.detail = "not configured"

    @property
    def url(self) -> str | None:
        return self.state.url

    async def get(self, path: str, **params: Any) -> Any:
        """GET ``<base><path>``; failures are recorded in the state and answer None."""
        if self.url is None:
            return None
        try:
            r = await self.http.get(self.url + path, params=params, headers=await self._auth())
        except httpx.HTTPError as exc:
            self.state.record(False, f"unreachable: {type(exc).__name__} {exc}".strip())
            return None
        if r.status_code >= 400:
            self.state.record(False, f"{r.status_code} on {path}: {_problem(r)}")
            return None
        self.state.record(True, "ok")
        return r.json()

    async def get_optional(self, path: str, **params: Any) -> tuple[Any, str | None]:
        """GET a part that may be absent (409/404: e.g. RAPID not loaded): (body, why not)."""
        if self.url is None:
            return None, "not found"
        try:
            r = await self.http.get(self.url + path, params=params, headers=await self._auth())
        except httpx.HTTPError as exc:
            return None, f"unreachable: {exc}"
        if r.status_code in (404, 409):
            return None, _problem(r)
        if r.status_code >= 400:
            return None, f"{r.status_code}: {_problem(r)}"
        return r.json(), None

    async def check_health(self) -> None:
        """The service's own /healthz (no auth): its broker, RAN source, kernel program..."""
        if self.url is None:
            return
        parts = urlsplit(self.url)
        try:
            r = await self.http.get(f"{parts.scheme}://{parts.netloc}/healthz")
            self.state.health = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            self.state.health = None
            self.state.record(False, f"unreachable: {type(exc).__name__} {exc}".strip())

    async def discover(self, mp1: Mp1Client | None) -> None:
        """Find (again) the base URL through Mp1 unless it was configured."""
        if self.configured or self.ser_name is None:
            return
        if mp1 is None:
            self.state.record(None, "no URL configured and no platform to discover it")
            return
        try:
            uri = await asyncio.to_thread(_rest_uri, mp1, self.ser_name)
        except Exception as exc:  # the platform is a backend too; its loss shows there
            if self.url is None:
                self.state.record(None, f"discovery failed: {exc}")
            return
        if uri is None:
            self.state.url = None
            if self.state.last_ok is None:
                self.state.record(None, f"service {self.ser_name!r} is not registered on Mp1")
            else:  # it answered before: leaving discovery (app stopped or died) is a loss
                self.state.record(False, f"service {self.ser_name!r} left Mp1 discovery")
        elif uri != self.url:
            self.state.url = uri

    async def _auth(self) -> dict[str, str]:
        token = await self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}


def _rest_uri(mp1: Mp1Client, ser_name: str) -> str | None:
    transport = mp1.find_transport(ser_name, "REST_HTTP")
    uris = (transport or {}).get("endpoint", {}).get("uris") or []
    return str(uris[0]).rstrip("/") if uris else None


def _problem(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text[:200] or r.reason_phrase
