"""REST API ``/flowrtt/v1``: the passive RTT of each flow the MEC host sees (spin/delay bit).

The platform's REST style: the service as an ``Annotated`` dependency, a response model per
resource, ProblemDetails errors.
"""

from __future__ import annotations

import time
from ipaddress import IPv4Address
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from mec_common.api import AuthenticatedPrincipal, ProblemError
from mec_l4s.observer import FlowRtt, Rules, Series
from mec_l4s.service import FlowRttService

router = APIRouter(prefix="/flowrtt/v1", tags=["flow RTT"])


def _service(request: Request) -> FlowRttService:
    service: FlowRttService = request.app.state.service
    return service


Service = Annotated[FlowRttService, Depends(_service)]


class Rtt(BaseModel):
    samples: int = Field(description="samples since the flow was first measured")
    current_ms: float = Field(description="the latest sample")
    p50_ms: float = Field(description="median of the latest samples (at most 512)")
    p90_ms: float
    p99_ms: float


class RulesRtt(BaseModel):
    e2e: Rtt | None = Field(description="end-to-end RTT; null until measured")
    client_side: Rtt | None = Field(
        description="half RTT between the observer and the client (and back)"
    )
    server_side: Rtt | None = Field(
        description="half RTT between the observer and the server (and back)"
    )


class FlowRttInfo(BaseModel):
    flow_id: str = Field(description="<client ip>:<port>-<server ip>:<port>")
    client: str = Field(description="the endpoint that sent the SYN")
    server: str
    method: Literal["spin", "delay"] = Field(description="the bit the endpoints agreed on")
    last_sample_age_s: float
    raw: RulesRtt = Field(description="Spindump's rules, as the research measured")
    filtered: RulesRtt = Field(description="with the reordering guard and minimum-gap rule")


class ObserverInfo(BaseModel):
    attached: bool
    interfaces: list[str]
    flows: int = Field(description="flows with samples in the service's table")
    evicted_flows: int = Field(description="flows the service's table dropped at its cap")
    counters: dict[str, int] = Field(
        description="the kernel program's counters: packets, tcp, malformed, flows, no_flow, "
        "disagreed, samples, ring_full, reordered, too_soon"
    )


def _rtt(series: Series | None) -> Rtt | None:
    if series is None or not series.count:
        return None
    p = series.percentiles()
    return Rtt(
        samples=series.count,
        current_ms=series.last_ms,
        p50_ms=p["p50"],
        p90_ms=p["p90"],
        p99_ms=p["p99"],
    )


def _under(rules: Rules, flow: FlowRtt) -> RulesRtt:
    def get(measurement: str) -> Rtt | None:
        return _rtt(flow.series.get((rules, measurement)))

    return RulesRtt(e2e=get("e2e"), client_side=get("client_side"), server_side=get("server_side"))


def _info(flow: FlowRtt) -> FlowRttInfo:
    return FlowRttInfo(
        flow_id=flow.flow_id,
        client=flow.client,
        server=flow.server,
        method="spin" if flow.method == "spin" else "delay",
        last_sample_age_s=max(0.0, (time.monotonic_ns() - flow.last_t_ns) / 1e9),
        raw=_under(Rules.RAW, flow),
        filtered=_under(Rules.FILTERED, flow),
    )


@router.get("/flows", summary="RTT of every measured flow (current and percentiles)")
def list_flows(
    service: Service,
    _: AuthenticatedPrincipal,
    address: Annotated[
        IPv4Address | None, Query(description="only flows with this endpoint (e.g. a UE)")
    ] = None,
) -> list[FlowRttInfo]:
    flows = service.table.flows()
    if address is not None:
        prefix = f"{address}:"
        flows = [f for f in flows if f.client.startswith(prefix) or f.server.startswith(prefix)]
    return [_info(f) for f in flows]


@router.get("/flows/{flow_id}", summary="RTT of one flow")
def get_flow(service: Service, flow_id: str, _: AuthenticatedPrincipal) -> FlowRttInfo:
    flow = service.table.get(flow_id)
    if flow is None:
        raise ProblemError(404, f"no measured flow {flow_id!r} (see GET /flowrtt/v1/flows)")
    return _info(flow)


@router.get("/observer", summary="The observer: interfaces, table sizes, kernel counters")
def get_observer(service: Service, _: AuthenticatedPrincipal) -> ObserverInfo:
    return ObserverInfo(
        attached=service.observer is not None,
        interfaces=list(service.settings.interfaces),
        flows=len(service.table.flows()),
        evicted_flows=service.table.evicted,
        counters=service.counters(),
    )
