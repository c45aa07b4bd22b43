"""Platform manager REST APIs (admin only): ``/app_pkgm/v1``, ``/app_lcm/v1``; OAuth2."""

from __future__ import annotations

import asyncio
import base64
from concurrent.futures import Executor
from typing import Annotated, Any
from urllib.parse import parse_qs, unquote

import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.types import ASGIApp, Receive, Scope, Send

from mec_common.api import ProblemError
from mec_common.auth import Principal
from mec_common.rest_policy import preconditions, tagged
from mec_platform.manager import LCM, PKGM, Manager
from mec_platform.mp1_api import CONDITIONAL, CONDITIONAL_GET, Caller, json_response
from mec_platform.security import Authority, LoginLimiter


async def admin(who: Caller) -> Principal:
    if not who.is_admin:
        raise ProblemError(403, "the platform manager APIs need admin credentials")
    return who


Admin = Annotated[Principal, Depends(admin)]


async def manager(request: Request) -> Manager:
    m: Manager = request.app.state.manager
    return m


Mgr = Annotated[Manager, Depends(manager)]


class PackageModification(BaseModel):
    operation_state: str = Field(alias="operationState")


class CreateAppInstance(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    app_d_id: str = Field(alias="appDId", min_length=1)
    app_instance_name: str | None = Field(None, alias="appInstanceName")
    app_instance_description: str | None = Field(None, alias="appInstanceDescription")


async def _optional_json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise ProblemError(400, "the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ProblemError(400, "the request body must be a JSON object")
    return body


def pkgm_router() -> APIRouter:
    r = APIRouter(prefix=PKGM, tags=["app_pkgm"])

    @r.post("/app_packages", status_code=201,
            summary="Onboard an AppD (YAML or JSON body)",
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/yaml": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}}}}})  # fmt: skip
    async def onboard(request: Request, mgr: Mgr, who: Admin) -> JSONResponse:
        created = mgr.onboard(await request.body())
        return json_response(created, 201, created["_links"]["self"]["href"])

    # MEC 010-2 v3.1.1 names the resources onboarded_app_packages/{appDId}; our earlier
    # app_packages/{appPkgId} stays. Either takes a package id or an appDId.
    for base in ("/app_packages", "/onboarded_app_packages"):
        _package_routes(r, base)
    _subscription_routes(r, "app_pkgm")
    return r


def _subscription_routes(r: APIRouter, api: str) -> None:
    """MEC 010-2 subscriptions of ``api`` (app_lcm: operation occurrences and instance
    states; app_pkgm: packages onboarded, changed, deleted)."""

    @r.post("/subscriptions", status_code=201, summary="Subscribe (MEC 010-2)")
    async def subscribe(request: Request, mgr: Mgr, who: Admin) -> Response:
        created = mgr.subscribe(api, await _optional_json(request))
        href = created["_links"]["self"]["href"]
        return tagged(request, created, 201, headers={"Location": href})

    @r.get("/subscriptions", summary="Subscriptions")
    def subscriptions(mgr: Mgr, who: Admin) -> JSONResponse:
        return json_response(mgr.subscriptions(api))

    @r.get("/subscriptions/{subscriptionId}", summary="One subscription",
           responses=CONDITIONAL_GET)  # fmt: skip
    def subscription(request: Request, mgr: Mgr, who: Admin,
                     subscriptionId: str) -> Response:  # noqa: N803  # fmt: skip
        return tagged(request, mgr.subscription(api, subscriptionId, delete=False))

    @r.delete("/subscriptions/{subscriptionId}", status_code=204, summary="Unsubscribe",
              responses=CONDITIONAL)  # fmt: skip
    def unsubscribe(request: Request, mgr: Mgr, who: Admin,
                    subscriptionId: str) -> Response:  # noqa: N803  # fmt: skip
        mgr.subscription(api, subscriptionId, delete=True, precondition=preconditions(request))
        return Response(status_code=204)


def _package_routes(r: APIRouter, base: str) -> None:
    item = base + "/{appPkgId}"

    @r.get(base, summary="Onboarded app packages")
    def packages(mgr: Mgr, who: Admin, appDId: str | None = None) -> JSONResponse:  # noqa: N803
        return json_response(mgr.packages(appDId))

    @r.get(item, summary="One app package (by id or appDId)", responses=CONDITIONAL_GET)
    def package(request: Request, mgr: Mgr, who: Admin, appPkgId: str) -> Response:  # noqa: N803
        return tagged(request, mgr.package(appPkgId))

    @r.get(item + "/appd", summary="The AppD of a package")
    def appd(mgr: Mgr, who: Admin, appPkgId: str) -> JSONResponse:  # noqa: N803
        return json_response(mgr.appd(appPkgId))

    @r.get(item + "/package_content", summary="The package's content: its AppD")
    def package_content(mgr: Mgr, who: Admin, appPkgId: str) -> JSONResponse:  # noqa: N803
        """A package here is one AppD (onboarded as YAML or JSON), not the ZIP that MEC 010-2
        fetches from ``appPkgPath``: its content is that AppD, as a JSON object (the type
        the v3.1.1 file gives this answer)."""
        return json_response(mgr.appd(appPkgId))

    @r.patch(item, summary="Enable or disable a package", responses=CONDITIONAL)
    def modify(request: Request, mgr: Mgr, who: Admin, appPkgId: str,  # noqa: N803
               body: PackageModification) -> Response:  # fmt: skip
        return tagged(request, mgr.set_package_state(appPkgId, body.operation_state,
                                                     preconditions(request)))  # fmt: skip

    @r.delete(item, status_code=204, summary="Delete a package", responses=CONDITIONAL)
    def delete(request: Request, mgr: Mgr, who: Admin, appPkgId: str) -> Response:  # noqa: N803
        mgr.delete_package(appPkgId, preconditions(request))
        return Response(status_code=204)


def lcm_router() -> APIRouter:
    r = APIRouter(prefix=LCM, tags=["app_lcm"])
    item = "/app_instances/{appInstanceId}"

    @r.post("/app_instances", status_code=201, summary="Create an app instance resource")
    def create(mgr: Mgr, who: Admin, body: CreateAppInstance) -> JSONResponse:
        created = mgr.create_instance(body.app_d_id, body.app_instance_name,
                                      body.app_instance_description)  # fmt: skip
        return json_response(created, 201, created["_links"]["self"]["href"])

    @r.get("/app_instances", summary="App instances")
    def instances(mgr: Mgr, who: Admin) -> JSONResponse:
        return json_response(mgr.instances())

    @r.get(item, summary="One app instance", responses=CONDITIONAL_GET)
    def instance(request: Request, mgr: Mgr, who: Admin,
                 appInstanceId: str) -> Response:  # noqa: N803  # fmt: skip
        return tagged(request, mgr.instance(appInstanceId))

    @r.delete(item, status_code=204, summary="Delete a NOT_INSTANTIATED app instance",
              responses=CONDITIONAL)  # fmt: skip
    def delete(request: Request, mgr: Mgr, who: Admin,
               appInstanceId: str) -> Response:  # noqa: N803  # fmt: skip
        mgr.delete_instance(appInstanceId, preconditions(request))
        return Response(status_code=204)

    @r.post(item + "/instantiate", status_code=202, summary="Instantiate (202 + op occurrence)")
    async def instantiate(request: Request, mgr: Mgr, who: Admin,
                          appInstanceId: str) -> JSONResponse:  # noqa: N803  # fmt: skip
        op = mgr.instantiate(appInstanceId, await _optional_json(request))
        return json_response(op, 202, op["_links"]["self"]["href"])

    @r.post(
        item + "/terminate",
        status_code=202,
        summary="Terminate: {terminationType: GRACEFUL|FORCEFUL, gracefulTerminationTimeout}",
    )
    async def terminate(request: Request, mgr: Mgr, who: Admin,
                        appInstanceId: str) -> JSONResponse:  # noqa: N803  # fmt: skip
        op = mgr.terminate(appInstanceId, await _optional_json(request))
        return json_response(op, 202, op["_links"]["self"]["href"])

    @r.post(item + "/operate", status_code=202,
            summary="Start or stop: {changeStateTo: STARTED|STOPPED, stopType, "
            "gracefulStopTimeout} (202 + op occurrence)")  # fmt: skip
    async def operate(request: Request, mgr: Mgr, who: Admin,
                      appInstanceId: str) -> JSONResponse:  # noqa: N803  # fmt: skip
        op = mgr.operate(appInstanceId, await _optional_json(request))
        return json_response(op, 202, op["_links"]["self"]["href"])

    @r.post(
        item + "/credentials",
        status_code=201,
        summary="New OAuth2 credentials for an app run outside the platform (extension)",
    )
    def credentials(mgr: Mgr, who: Admin, appInstanceId: str) -> JSONResponse:  # noqa: N803
        return json_response(mgr.credentials(appInstanceId), 201)

    _subscription_routes(r, "app_lcm")

    @r.get("/app_lcm_op_occs", summary="Lifecycle operation occurrences")
    def ops(mgr: Mgr, who: Admin, appInstanceId: str | None = None) -> JSONResponse:  # noqa: N803
        return json_response(mgr.ops(appInstanceId))

    @r.get("/app_lcm_op_occs/{opId}", summary="One operation occurrence",
           responses=CONDITIONAL_GET)  # fmt: skip
    def op(request: Request, mgr: Mgr, who: Admin, opId: str) -> Response:  # noqa: N803
        return tagged(request, mgr.op(opId))

    return r


def oauth_router(authority: Authority, hashing: Executor) -> APIRouter:
    """The token endpoint checks secrets (scrypt) in ``hashing``, never in the event loop;
    ``LoginAdmission`` in front of the app decides which requests get that far."""
    r = APIRouter(prefix="/oauth2", tags=["oauth2"])

    @r.post("/token", summary="OAuth 2.0 client credentials grant (RFC 6749 §4.4)")
    async def token(request: Request) -> JSONResponse:
        form = {
            k: v[0] for k, v in parse_qs((await request.body()).decode(errors="replace")).items()
        }
        if form.get("grant_type") != "client_credentials":
            return _oauth_error(400, "unsupported_grant_type")
        client_id, secret = _client_auth(request.headers.get("authorization", ""), form)
        if not client_id or secret is None:
            return _oauth_error(401, "invalid_client")
        loop = asyncio.get_running_loop()
        issued = await loop.run_in_executor(hashing, authority.issue, client_id, secret)
        if issued is None:
            return _oauth_error(401, "invalid_client")
        return JSONResponse(issued, headers={"Cache-Control": "no-store"})

    @r.get("/jwks", summary="Public keys that verify the platform's tokens")
    def jwks() -> JSONResponse:
        return JSONResponse(authority.jwks())

    @r.get("/revocations", summary="Revoked client ids whose tokens have not expired yet")
    def revocations() -> JSONResponse:
        """Public like the JWKS: every service refuses tokens whose ``sub`` is listed."""
        return JSONResponse(authority.revocations(), headers={"Cache-Control": "no-store"})

    return r


class LoginAdmission:
    """ASGI middleware, the token endpoint's front door: a request over ``limiter``'s
    budget gets 429 here, before its body is read, before routing, parsing and
    dependencies. Under a flood of logins the event loop then spends a few µs per refused
    request instead of the whole FastAPI path (~0.3 ms), so other requests (``/healthz``)
    are not queued behind hundreds of them (docs/security.md, make bench-security)."""

    def __init__(self, app: ASGIApp, limiter: LoginLimiter, path: str = "/oauth2/token") -> None:
        self.app, self.limiter, self.path = app, limiter, path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if not self.limiter.admit(client[0] if client else ""):
            await _oauth_error(429, "slow_down")(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.limiter.release()


def _client_auth(header: str, form: dict[str, str]) -> tuple[str | None, str | None]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic":
        try:
            user, _, password = base64.b64decode(value).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None, None
        return unquote(user), unquote(password)
    return form.get("client_id"), form.get("client_secret")


def _oauth_error(status: int, error: str) -> JSONResponse:
    headers = {401: {"WWW-Authenticate": 'Basic realm="mec-platform"'},
               429: {"Retry-After": "1"}}.get(status)  # fmt: skip
    return JSONResponse({"error": error}, status, headers=headers)
