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
from mec_common.bus.flowrtt import RulesRtt
from mec_l4s.observer import FlowRtt, Rules
from mec_l4s.service import FlowRttService

router = APIRouter(prefix="/flowrtt/v1", tags=["flow RTT"])


def _service(request: Request) -> FlowRttService:
    service: FlowRttService = request.app.state.service
    return service


Service = Annotated[FlowRttService, Depends(_service)]


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
        "disagreed, samples, ring_full, reordered, too_soon, run_continued"
    )


def _info(flow: FlowRtt) -> FlowRttInfo:
    return FlowRttInfo(
        flow_id=flow.flow_id,
        client=flow.client,
        server=flow.server,
        method="spin" if flow.method == "spin" else "delay",
        last_sample_age_s=max(0.0, (time.monotonic_ns() - flow.last_t_ns) / 1e9),
        raw=flow.under(Rules.RAW),
        filtered=flow.under(Rules.FILTERED),
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
