"""Mp1 REST APIs: ``/mec_service_mgmt/v1`` and ``/mec_app_support/v1`` (MEC 011 v2.1.1, and
v3.1.1's app registration)."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel
from starlette.datastructures import QueryParams

from mec_common.api import ProblemDetails, ProblemError
from mec_common.auth import Principal
from mec_common.rest_policy import boolean_param, enum_param, preconditions, tagged
from mec_platform.models import (
    AppInfo,
    AppReadyConfirmation,
    AppTerminationConfirmation,
    AppTerminationSubscription,
    DnsRule,
    Locality,
    SerAvailabilitySubscription,
    ServiceInfo,
    ServiceInfoPost,
    TrafficRule,
    timestamp,
)
from mec_platform.registrations import Registrations
from mec_platform.registry import APP_SUPPORT, SERVICE_MGMT, Registry

_bearer = HTTPBearer(auto_error=False, description="OAuth2 access token from /oauth2/token")


async def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> Principal:
    """Async twin of ``mec_common.api.require_token`` (no thread hop on the hot path)."""
    principal: Principal | None = None
    if credentials is not None:
        principal = request.app.state.token_verifier.verify(credentials.credentials)
    if principal is None:
        raise ProblemError(
            401,
            "a valid bearer token is required" if credentials else "missing bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    # Ownership before anything else (body validation included): an app's token reaches
    # only its own /applications/{appInstanceId}/... resources.
    app_instance_id = request.path_params.get("appInstanceId")
    if app_instance_id is not None and not principal.may_act_for(app_instance_id):
        raise ProblemError(403, "this token may only access its own application instance")
    return principal


Caller = Annotated[Principal, Depends(authenticated)]


async def registry(request: Request) -> Registry:
    reg: Registry = request.app.state.registry
    return reg


Reg = Annotated[Registry, Depends(registry)]


async def registrations(request: Request) -> Registrations:
    book: Registrations = request.app.state.registrations
    return book


AppRegistrations = Annotated[Registrations, Depends(registrations)]


def json_response(body: Any, status: int = 200, location: str | None = None) -> JSONResponse:
    headers = {"Location": location} if location else None
    return JSONResponse(body, status, headers=headers)


def _split(values: list[str] | None) -> list[str] | None:
    """Array query parameters, repeated (a=1&a=2) or comma-separated (a=1,2)."""
    if not values:
        return None
    return [v for value in values for v in value.split(",") if v]


def discovery_query(params: QueryParams) -> dict[str, Any]:
    """The spec's discovery filters, parsed by hand: this is the hot path, and FastAPI's
    per-parameter dependency machinery costs more than the lookup itself."""
    return {
        "ser_instance_id": _split(params.getlist("ser_instance_id")),
        "ser_name": _split(params.getlist("ser_name")),
        "ser_category_id": params.get("ser_category_id") or None,
        "consumed_local_only": boolean_param(params, "consumed_local_only"),
        "is_local": boolean_param(params, "is_local"),
        "scope_of_locality": enum_param(params, "scope_of_locality", Locality),
    }


def _param(name: str, schema: dict[str, Any], doc: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": doc}


_ARRAY = {"type": "array", "items": {"type": "string"}}
DISCOVERY_PARAMS = {"parameters": [
    _param("ser_instance_id", _ARRAY, "service instance ids (at most one of the first three)"),
    _param("ser_name", _ARRAY, "service names"),
    _param("ser_category_id", {"type": "string"}, "a service category id"),
    _param("consumed_local_only", {"type": "boolean"}, "only services consumed locally"),
    _param("is_local", {"type": "boolean"}, "only services local to the caller"),
    _param("scope_of_locality", {"type": "string", "enum": list(Locality)}, "a locality"),
]}  # fmt: skip


# Individual resources that can be changed carry an ETag and honour If-Match (MEC 011 lists
# 412 on their PUT); 304 answers a GET whose If-None-Match matches.
CONDITIONAL: dict[int | str, dict[str, Any]] = {
    412: {"model": ProblemDetails, "description": "Precondition Failed (If-Match)"},
}
CONDITIONAL_GET: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not Modified (If-None-Match matches the ETag)"},
}


class LivenessUpdate(BaseModel):
    state: str


def service_mgmt_router() -> APIRouter:
    r = APIRouter(prefix=SERVICE_MGMT, tags=["mec_service_mgmt"])

    @r.get("/services", summary="Discover MEC services (filters per MEC 011)",
           openapi_extra={**DISCOVERY_PARAMS, "security": [{"HTTPBearer": []}]})  # fmt: skip
    async def services(request: Request) -> Response:
        # The hottest path: no FastAPI dependencies (their resolution cost more than the
        # lookup); the same checks as `Caller`, called directly.
        await authenticated(request, await _bearer(request))
        reg: Registry = request.app.state.registry
        body = reg.discover(None, discovery_query(request.query_params))
        return Response(body, media_type="application/json")

    @r.get("/services/{serviceId}", summary="One MEC service", responses=CONDITIONAL_GET)
    def service(request: Request, reg: Reg, who: Caller, serviceId: str) -> Response:  # noqa: N803
        return tagged(request, reg.get_service(serviceId))

    @r.get("/applications/{appInstanceId}/services", summary="Services of an app instance",
           openapi_extra=DISCOVERY_PARAMS)  # fmt: skip
    def app_services(request: Request, reg: Reg, who: Caller,
                     appInstanceId: str) -> Response:  # noqa: N803  # fmt: skip
        _check_app(reg, who, appInstanceId)
        body = reg.discover(appInstanceId, discovery_query(request.query_params))
        return Response(body, media_type="application/json")

    @r.post("/applications/{appInstanceId}/services", status_code=201,
            summary="Register a service (ServiceInfoPost)")  # fmt: skip
    def register(reg: Reg, who: Caller, appInstanceId: str, body: ServiceInfoPost  # noqa: N803
                 ) -> JSONResponse:  # fmt: skip
        created = reg.register(who, appInstanceId, body)
        return json_response(created, 201, created["_links"]["self"]["href"])

    @r.get("/applications/{appInstanceId}/services/{serviceId}", summary="One service of an app",
           responses=CONDITIONAL_GET)  # fmt: skip
    def app_service(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                    serviceId: str) -> Response:  # noqa: N803  # fmt: skip
        _check_app(reg, who, appInstanceId)
        return tagged(request, reg.get_service(serviceId, appInstanceId))

    @r.put("/applications/{appInstanceId}/services/{serviceId}", summary="Update a service",
           responses=CONDITIONAL)  # fmt: skip
    def update(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
               serviceId: str, body: ServiceInfo) -> Response:  # noqa: N803  # fmt: skip
        updated = reg.update(who, appInstanceId, serviceId, body, preconditions(request))
        return tagged(request, updated)

    @r.delete("/applications/{appInstanceId}/services/{serviceId}", status_code=204,
              summary="Deregister a service", responses=CONDITIONAL)  # fmt: skip
    def deregister(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                   serviceId: str) -> Response:  # noqa: N803  # fmt: skip
        reg.deregister(who, appInstanceId, serviceId, preconditions(request))
        return Response(status_code=204)

    _subscription_routes(r, SERVICE_MGMT, SerAvailabilitySubscription)

    @r.get("/transports", summary="Transports the platform offers")
    def transports(reg: Reg, who: Caller) -> JSONResponse:
        return json_response(list(reg.transports.values()))

    @r.get("/liveness/{serviceId}", summary="Liveness of a service (MEC 011 v2.2 extension)")
    def liveness(reg: Reg, who: Caller, serviceId: str) -> JSONResponse:  # noqa: N803
        return json_response(reg.liveness(who, serviceId))

    @r.patch("/liveness/{serviceId}", summary='Heartbeat: {"state": "ACTIVE"}')
    def heartbeat(reg: Reg, who: Caller, serviceId: str, body: LivenessUpdate  # noqa: N803
                  ) -> JSONResponse:  # fmt: skip
        return json_response(reg.heartbeat(who, serviceId, body.state))

    return r


def _check_app(reg: Registry, who: Principal, app_instance_id: str) -> None:
    with reg.db.session() as s:
        reg.app_for(s, who, app_instance_id)


def _subscription_routes(r: APIRouter, api: str, model: type[Any]) -> None:
    path = "/applications/{appInstanceId}/subscriptions"

    @r.get(path, summary="Subscriptions of an app instance")
    def subscriptions(reg: Reg, who: Caller, appInstanceId: str) -> JSONResponse:  # noqa: N803
        return json_response(reg.subscriptions(who, api, appInstanceId))

    def subscribe(reg: Reg, who: Caller, appInstanceId: str, body: Any) -> JSONResponse:  # noqa: N803
        created, location = reg.subscribe(who, api, appInstanceId, body)
        return json_response(created, 201, location)

    subscribe.__annotations__["body"] = model  # a runtime type, so FastAPI parses the body
    r.post(path, status_code=201, summary=f"Subscribe ({model.__name__})")(subscribe)

    @r.get(path + "/{subscriptionId}", summary="One subscription", responses=CONDITIONAL_GET)
    def subscription(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                     subscriptionId: str) -> Response:  # noqa: N803  # fmt: skip
        return tagged(
            request, reg.subscription(who, api, appInstanceId, subscriptionId, delete=False)
        )

    @r.delete(path + "/{subscriptionId}", status_code=204, summary="Unsubscribe",
              responses=CONDITIONAL)  # fmt: skip
    def unsubscribe(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                    subscriptionId: str) -> Response:  # noqa: N803  # fmt: skip
        reg.subscription(who, api, appInstanceId, subscriptionId, delete=True,
                         precondition=preconditions(request))  # fmt: skip
        return Response(status_code=204)


async def _no_null_body(request: Request, who: Caller) -> None:
    """MEC 011 v2.1.1 makes the confirmation bodies optional: none at all is accepted, but
    a body that is the JSON ``null`` (which FastAPI reads as "none") is not an object.
    Depends on ``Caller`` so that a request without a valid token is a 401 first."""
    if (await request.body()).strip() == b"null":
        raise ProblemError(400, "the body must be a JSON object (or absent), not null")


def app_support_router() -> APIRouter:
    r = APIRouter(prefix=APP_SUPPORT, tags=["mec_app_support"])
    app_path = "/applications/{appInstanceId}"

    for kind, model, id_name in (("traffic", TrafficRule, "trafficRuleId"),
                                 ("dns", DnsRule, "dnsRuleId")):  # fmt: skip
        _rule_routes(r, kind, model, id_name)

    _subscription_routes(r, APP_SUPPORT, AppTerminationSubscription)

    @r.post(app_path + "/confirm_ready", status_code=204, summary="The app is ready",
            dependencies=[Depends(_no_null_body)])  # fmt: skip
    def confirm_ready(reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                      body: AppReadyConfirmation | None = None) -> Response:  # fmt: skip
        reg.confirm_ready(who, appInstanceId)
        return Response(status_code=204)

    @r.post(app_path + "/confirm_termination", status_code=204,
            summary="The app has finished its termination work",
            dependencies=[Depends(_no_null_body)])  # fmt: skip
    def confirm_termination(reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                            body: AppTerminationConfirmation | None = None  # the spec: optional
                            ) -> Response:  # fmt: skip
        reg.confirm_termination(who, appInstanceId, body.operation_action if body else None)
        return Response(status_code=204)

    _registration_routes(r)

    @r.get("/timing/timing_caps", summary="Timing capabilities")
    def timing_caps(who: Caller) -> JSONResponse:
        return json_response({"timeStamp": timestamp(time.time())})

    @r.get("/timing/current_time", summary="Current time of the platform")
    def current_time(who: Caller) -> JSONResponse:
        # NONTRACEABLE: the host clock is not known to be traceable to a primary reference.
        return json_response({**timestamp(time.time()), "timeSourceStatus": "NONTRACEABLE"})

    return r


def _registration_routes(r: APIRouter) -> None:
    """MEC 011 v3.1.1 app registration (``mec_platform.registrations`` says who may)."""
    item = "/registrations/{appInstanceId}"

    @r.post("/registrations", status_code=201, summary="Register this app instance (v3.1.1)")
    def register(book: AppRegistrations, who: Caller, body: AppInfo) -> JSONResponse:
        created = book.register(who, body)
        return json_response(created, 201, book.location(str(who.app_instance_id)))

    @r.get(item, summary="This app instance's registration", responses=CONDITIONAL_GET)
    def registration(request: Request, book: AppRegistrations, who: Caller,
                     appInstanceId: str) -> Response:  # noqa: N803  # fmt: skip
        return tagged(request, book.get(appInstanceId))

    @r.put(item, status_code=204, summary="Update the registration", responses=CONDITIONAL)
    def update(request: Request, book: AppRegistrations, who: Caller, appInstanceId: str,  # noqa: N803
               body: AppInfo) -> Response:  # fmt: skip
        book.update(appInstanceId, body, preconditions(request))
        return Response(status_code=204)

    @r.delete(item, status_code=204, summary="Deregister", responses=CONDITIONAL)
    def deregister(request: Request, book: AppRegistrations, who: Caller,
                   appInstanceId: str) -> Response:  # noqa: N803  # fmt: skip
        book.deregister(appInstanceId, preconditions(request))
        return Response(status_code=204)


def _rule_routes(r: APIRouter, kind: str, model: type[Any], id_name: str) -> None:
    base = "/applications/{appInstanceId}/" + (
        "traffic_rules" if kind == "traffic" else "dns_rules"
    )
    item = base + "/{ruleId}"

    @r.get(base, summary=f"{kind} rules of an app instance")
    def rules(reg: Reg, who: Caller, appInstanceId: str) -> JSONResponse:  # noqa: N803
        return json_response(reg.rules(who, appInstanceId, kind))

    @r.get(item, summary=f"One {kind} rule", responses=CONDITIONAL_GET)
    def rule(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
             ruleId: str) -> Response:  # noqa: N803  # fmt: skip
        return tagged(request, reg.rule(who, appInstanceId, kind, ruleId))

    def put_rule(request: Request, reg: Reg, who: Caller, appInstanceId: str,  # noqa: N803
                 ruleId: str, body: Any) -> Response:  # noqa: N803  # fmt: skip
        return tagged(
            request, reg.put_rule(who, appInstanceId, ruleId, body, preconditions(request))
        )

    put_rule.__annotations__["body"] = model  # a runtime type, so FastAPI parses the body
    r.put(item, summary=f"Update a {kind} rule (e.g. its state)", responses=CONDITIONAL)(put_rule)
