"""The dashboard's HTTP interface: the page, sign-in, the live stream, one control.

- ``GET /`` and ``/assets/*``: the page and its scripts (no data in them);
- ``/dashboard/v1/session``: sign in with a suite token (kept in an HttpOnly cookie),
  who is signed in, sign out;
- ``GET /dashboard/v1/state``: everything at once; ``GET /dashboard/v1/stream``: the same,
  live (server-sent events: ``snapshot`` once, then a ``tick`` per sample and a ``platform``
  view every slow interval);
- ``GET /dashboard/v1/platform``: packages and instances, read with the viewer's own token
  (only an admin token may list them on the platform);
- ``PUT /dashboard/v1/pep/mode``: MELD/RAPID mode, forwarded with the viewer's token;
  refused for a read-only viewer.

Deny by default: everything under ``/dashboard/v1`` but sign-in needs a valid token
(``Authorization: Bearer`` or the session cookie).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from mec_common.api import ProblemError
from mec_common.auth import Principal, TokenVerifier
from mec_dashboard.collector import Collector

BASE = "/dashboard/v1"
COOKIE = "mts_dashboard"
PAGE_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
LIBRARY_FILES = {"uPlot.iife.min.js": "text/javascript", "uPlot.min.css": "text/css"}

_bearer = HTTPBearer(auto_error=False, description="a suite token (static or platform-issued)")


@dataclass(frozen=True)
class Viewer:
    principal: Principal
    token: str

    @property
    def read_only(self) -> bool:
        """Only operator tokens (admin) may change anything; every other one only looks."""
        return not self.principal.is_operator


SERVICE = "dashboard"


def _verify(request: Request, token: str | None) -> Viewer | None:
    """The viewer behind a valid token; 403 for a valid token not meant for the dashboard
    (an app's, unless its AppD lists the service ``dashboard``)."""
    verifier: TokenVerifier = request.app.state.token_verifier
    principal = verifier.verify(token) if token else None
    if principal is None or not token:
        return None
    if not principal.may_consume(SERVICE):
        raise ProblemError(
            403, "this token is not for the dashboard: sign in with an admin token, or one of "
            "an app whose AppD lists the service 'dashboard'")  # fmt: skip
    return Viewer(principal, token)


def require_viewer(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Viewer:
    """A signed-in viewer (bearer header or session cookie); 401 otherwise."""
    token = credentials.credentials if credentials else request.cookies.get(COOKIE)
    viewer = _verify(request, token)
    if viewer is None:
        raise ProblemError(
            401,
            "sign in with a valid token" if token else "not signed in: a token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return viewer


SignedIn = Annotated[Viewer, Depends(require_viewer)]


def _collector(request: Request) -> Collector:
    collector: Collector = request.app.state.collector
    return collector


# ---- models -----------------------------------------------------------------------------------


class SignIn(BaseModel):
    token: str = Field(..., min_length=1, description="a suite token: platform-issued or static")


class Session(BaseModel):
    subject: str = Field(..., description="who the token belongs to")
    admin: bool
    read_only: bool = Field(..., description="true: the page shows no controls")


class ModeChange(BaseModel):
    mode: Literal["off", "meld-de", "meld-me", "rapid", "meld-overflow", "ignore-loss"]


def _session(viewer: Viewer) -> Session:
    p = viewer.principal
    return Session(subject=p.subject, admin=p.is_operator, read_only=viewer.read_only)


# ---- page -------------------------------------------------------------------------------------

page = APIRouter(include_in_schema=False)


@page.get("/")
def index(request: Request) -> FileResponse:
    return FileResponse(request.app.state.web_dir / "index.html", media_type="text/html")


@page.get("/assets/{name}")
def asset(request: Request, name: str) -> FileResponse:
    if name in PAGE_FILES:
        return FileResponse(request.app.state.web_dir / name, media_type=PAGE_FILES[name])
    if name in LIBRARY_FILES:
        return FileResponse(request.app.state.assets_dir / name, media_type=LIBRARY_FILES[name])
    raise ProblemError(404, f"no asset {name!r}")


# ---- session ----------------------------------------------------------------------------------

session = APIRouter(prefix=f"{BASE}/session", tags=["session"])


@session.post("", summary="Sign in with a suite token (sets the session cookie)")
def sign_in(request: Request, body: SignIn, response: Response) -> Session:
    viewer = _verify(request, body.token)
    if viewer is None:
        raise ProblemError(401, "the token was refused", headers={"WWW-Authenticate": "Bearer"})
    response.set_cookie(
        COOKIE, body.token, httponly=True, samesite="strict", path=BASE,
        secure=request.url.scheme == "https",
    )  # fmt: skip
    return _session(viewer)


@session.get("", summary="Who is signed in")
def who(viewer: SignedIn) -> Session:
    return _session(viewer)


@session.delete("", status_code=204, summary="Sign out (clears the session cookie)")
def sign_out() -> Response:
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path=BASE)
    return response


# ---- live state -------------------------------------------------------------------------------

live = APIRouter(prefix=BASE, tags=["live"])


@live.get("/state", summary="Everything the page shows, with the chart histories")
def state(request: Request, _: SignedIn) -> dict[str, Any]:
    return _collector(request).snapshot()


@live.get(
    "/stream",
    summary="The same, live (text/event-stream: snapshot, then tick and platform events)",
    response_class=StreamingResponse,
)
def stream(request: Request, viewer: SignedIn) -> StreamingResponse:
    return StreamingResponse(
        _events(request, viewer),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _events(request: Request, viewer: Viewer) -> AsyncIterator[str]:
    collector = _collector(request)
    yield _event("snapshot", json.dumps(collector.snapshot(), separators=(",", ":")))
    yield _event("platform", json.dumps(await _platform_view(request, viewer)))
    next_slow = time.monotonic() + collector.settings.slow_interval_s
    async for tick in collector.ticks():
        if await request.is_disconnected():
            return
        yield _event("tick", tick)
        if time.monotonic() >= next_slow:
            next_slow = time.monotonic() + collector.settings.slow_interval_s
            if _verify(request, viewer.token) is None:  # expired or revoked: stop serving
                yield _event("signed_out", '{"detail": "the token is no longer valid"}')
                return
            yield _event("platform", json.dumps(await _platform_view(request, viewer)))


def _event(kind: str, data: str) -> str:
    return f"event: {kind}\ndata: {data}\n\n"


# ---- platform, with the viewer's own token ----------------------------------------------------

platform = APIRouter(prefix=f"{BASE}/platform", tags=["platform"])


@platform.get("", summary="Onboarded packages and app instances (the viewer's token)")
async def platform_view(request: Request, viewer: SignedIn) -> dict[str, Any]:
    return await _platform_view(request, viewer)


async def _platform_view(request: Request, viewer: Viewer) -> dict[str, Any]:
    """Read with the viewer's token, so the platform decides what this viewer may see."""
    collector = _collector(request)
    base = collector.platform.url
    if base is None:
        return {"packages": [], "instances": [], "absent": "no platform configured"}
    headers = {"Authorization": f"Bearer {viewer.token}"}
    try:
        packages, instances = await asyncio.gather(
            collector.http.get(f"{base}/app_pkgm/v1/app_packages", headers=headers),
            collector.http.get(f"{base}/app_lcm/v1/app_instances", headers=headers),
        )
    except httpx.HTTPError as exc:
        return {"packages": [], "instances": [], "absent": f"platform unreachable: {exc}"}
    refused = next((r for r in (packages, instances) if r.status_code >= 400), None)
    if refused is not None:
        why = f"the platform answered {refused.status_code} for this token"
        return {"packages": [], "instances": [], "absent": why}
    return {
        "packages": [
            {"name": p.get("appName"), "appDId": p.get("appDId"),
             "version": p.get("appSoftwareVersion"), "state": p.get("operationalState"),
             "onboarding": p.get("onboardingState")}
            for p in packages.json()
        ],
        "instances": [
            {"id": i.get("id"), "name": i.get("appName"), "appDId": i.get("appDId"),
             "state": i.get("instantiationState")}
            for i in instances.json()
        ],
        "absent": None,
    }  # fmt: skip


# ---- the one control --------------------------------------------------------------------------

control = APIRouter(prefix=f"{BASE}/pep", tags=["control"])


@control.put("/mode", summary="Set the PEP's global MELD/RAPID mode (not for read-only viewers)")
async def put_mode(request: Request, change: ModeChange, viewer: SignedIn) -> dict[str, Any]:
    if viewer.read_only:
        raise ProblemError(403, "this token may only look: changing the mode needs an admin token")
    pep = _collector(request).pep
    if pep.url is None:
        raise ProblemError(503, f"the PEP is not reachable: {pep.state.detail}")
    r = await pep.http.put(
        f"{pep.url}/ran_aware/mode",
        json=change.model_dump(),
        headers={"Authorization": f"Bearer {viewer.token}"},
    )
    if r.status_code >= 400:
        raise ProblemError(r.status_code if r.status_code < 500 else 502, f"PEP: {r.text[:300]}")
    body: dict[str, Any] = r.json()
    await _collector(request).slow_round()  # the page shows the new mode at the next tick
    return body


routers = [page, session, live, platform, control]
