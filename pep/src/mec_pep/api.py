"""The PEP's REST API (``/pep/v1``): flows, UEs, stats, configuration."""

from __future__ import annotations

import ipaddress
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query
from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from pydantic import ValidationError

from mec_common.api import ProblemError, create_app, service_access
from mec_common.auth import TokenVerifier
from mec_common.mp1 import termination_router
from mec_common.tproxy import TproxyError
from mec_pep import __version__
from mec_pep.core import CoreSettingsError
from mec_pep.flows import Flow, ProxyMode
from mec_pep.models import (
    BufferSizes,
    ConfigPatch,
    ConfigView,
    FlowList,
    FlowState,
    Stats,
    UeList,
    UeState,
)
from mec_pep.service import SER_NAME, PepService

BASE = "/pep/v1"
TERMINATION_PATH = "/pep/v1/notifications/app_termination"

DESCRIPTION = """Split-connection TCP PEP: every TCP connection from a UE is split into a RAN
leg (PEP ↔ UE) and a WAN leg (PEP ↔ server), each with its own congestion control and
large buffers. This API shows the flows, per-UE aggregates and counters, and changes the
configuration at run time. Every endpoint but `/healthz` and `/metrics` needs a bearer
token."""


def build_app(service: PepService, verifier: TokenVerifier) -> FastAPI:
    app = create_app(
        title="MEC Transport Suite — PEP",
        version=__version__,
        description=DESCRIPTION,
        settings=service.settings,
        health=service.health,
        token_verifier=verifier,
        openapi_tags=[
            {"name": "flows", "description": "split connections and their state"},
            {"name": "stats", "description": "per-UE aggregates and global counters"},
            {"name": "config", "description": "configuration, read and changed at run time"},
        ],
    )
    access = [
        Depends(service_access(SER_NAME))
    ]  # apps with pep in their AppD read; operators change
    app.include_router(_router(service), prefix=BASE, dependencies=access)
    for ext in service.extensions:
        router = ext.router()
        if router is not None:
            app.include_router(router, prefix=f"{BASE}/{ext.name}", dependencies=access)
    if service.registration is not None:
        app.include_router(termination_router(service.registration, verifier, TERMINATION_PATH))
    return app


def _router(service: PepService) -> APIRouter:
    router = APIRouter()
    dp = service.dataplane

    @router.get("/flows", tags=["flows"], summary="Flows, optionally of one UE")
    def list_flows(
        ue: Annotated[str | None, Query(description="only this UE (IPv4 or IPv6 address)")] = None,
        mode: Annotated[ProxyMode | None, Query(description="only this mode")] = None,
        tcp_info: Annotated[bool, Query(description="include both legs' TCP_INFO")] = True,
        limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
        offset: Annotated[int, Query(ge=0)] = 0,
    ) -> FlowList:
        if ue is not None:
            _check_address(ue, "ue")
        chosen = _select(service.flows.by_ue(ue) if ue else list(service.flows), mode)
        page = sorted(chosen, key=lambda f: f.id)[offset : offset + limit]
        return FlowList(count=len(chosen), flows=_states(service, page, tcp=tcp_info))

    @router.get("/flows/{flow_id}", tags=["flows"], summary="One flow")
    def get_flow(flow_id: int) -> FlowState:
        states = _states(service, [_flow(service, flow_id)], tcp=True)
        if not states:
            raise ProblemError(404, f"flow {flow_id} has closed")
        return states[0]

    @router.delete(
        "/flows/{flow_id}", tags=["flows"], status_code=204, summary="Reset a flow (RST both legs)"
    )
    def reset_flow(flow_id: int) -> None:
        dp.reset(_flow(service, flow_id), "reset by API")

    @router.get("/ues", tags=["stats"], summary="Per-UE aggregates")
    def list_ues() -> UeList:
        return UeList(ues=_ue_states(service, service.flows.ues()))

    @router.get("/ues/{ue}", tags=["stats"], summary="One UE's aggregate")
    def get_ue(ue: str) -> UeState:
        _check_address(ue, "ue")
        states = _ue_states(service, [ue])
        if not states:
            raise ProblemError(404, f"no flow of UE {ue}")
        return states[0]

    @router.get("/stats", tags=["stats"], summary="Global counters")
    def stats() -> Stats:
        c = dp.counters()
        by_mode = Counter(str(f.mode) for f in service.flows)
        return Stats(
            flows=len(service.flows),
            flows_by_mode=dict(by_mode),
            accepted=c.accepted,
            established=c.established,
            closed=c.closed,
            refused=c.refused,
            aborted=c.aborted,
            bytes_to_ue=c.bytes_to_ue,
            bytes_from_ue=c.bytes_from_ue,
            pipes_in_use=dp.pipes_in_use(),
            relay=service.relay,
            relay_reason=service.relay_reason,
            relay_threads=dp.thread_count,
            descriptor_limit=service.descriptor_limit(),
            private_descriptor_tables=dp.private_descriptor_tables,
            listeners=_listeners(service),
            tfo_server_enabled=service.tfo_server_enabled(),
        )

    @router.get("/config", tags=["config"], summary="Current configuration")
    def get_config() -> ConfigView:
        return _config_view(service)

    @router.patch("/config", tags=["config"], summary="Change settings at run time")
    def patch_config(patch: ConfigPatch) -> ConfigView:
        changes = {name: getattr(patch, name) for name in patch.model_fields_set}
        if not changes:
            raise ProblemError(400, "no setting given")
        try:
            service.reconfigure(changes)
        except ValidationError as exc:
            raise ProblemError(400, _validation_detail(exc)) from None
        except (OSError, TproxyError, CoreSettingsError) as exc:  # the relay cannot follow
            raise ProblemError(409, f"not applied: {exc}") from None
        return _config_view(service)

    return router


# ---- helpers --------------------------------------------------------------------------------


def _flow(service: PepService, flow_id: int) -> Flow:
    flow = service.flows.get(flow_id)
    if flow is None:
        raise ProblemError(404, f"no flow {flow_id}")
    return flow


def _select(flows: list[Flow], mode: ProxyMode | None) -> list[Flow]:
    return [f for f in flows if mode is None or f.mode is mode]


def _states(service: PepService, flows: list[Flow], *, tcp: bool) -> list[FlowState]:
    """Flow states, read in each flow's relay thread (the sockets live there)."""
    raw = service.dataplane.flow_states(flows, tcp=tcp)
    states = [FlowState.model_validate(s) for s in raw]
    if service.flow_rtt is not None:
        for state in states:
            for leg in (state.ran, state.wan):
                if leg is not None:
                    leg.observed_rtt = service.flow_rtt.lookup(leg.local, leg.peer)
    return states


def _ue_states(service: PepService, ues: list[str]) -> list[UeState]:
    flows = [f for ue in ues for f in service.flows.by_ue(ue)]
    totals: dict[str, dict[str, int]] = {}
    for flow, b in service.dataplane.buffered(flows):
        t = totals.setdefault(flow.ue, Counter())
        t["flows"] += 1
        t["bytes_to_ue"] += flow.bytes_to_ue
        t["bytes_from_ue"] += flow.bytes_from_ue
        t["buffered_toward_ue"] += b["toward_ue"]["total"]
        t["unsent_toward_ue"] += b["toward_ue"]["ran_send_unsent"]
        t["buffered_toward_server"] += b["toward_server"]["total"]
    return [UeState(ue=ue, **totals[ue]) for ue in sorted(totals, key=_ip_key)]


def _listeners(service: PepService) -> dict[str, str]:
    return {str(m): f"{a[0]}:{a[1]}" for m, a in service.dataplane.addresses.items()}


def _config_view(service: PepService) -> ConfigView:
    s = service.settings
    effective = service.dataplane.listener_buffers()
    return ConfigView(
        listeners=_listeners(service),
        socks5_port=s.socks5_port,
        tlv_port=s.tlv_port,
        transparent_port=s.transparent_port,
        keep_ue_source=s.keep_ue_source,
        tproxy_rules_installed=bool(service.transparent and service.transparent.installed),
        allowed_clients=[str(n) for n in s.allowed_clients],
        allowed_destinations=[str(n) for n in s.allowed_destinations],
        ran_rcvbuf=s.ran_rcvbuf,
        ran_sndbuf=s.ran_sndbuf,
        wan_rcvbuf=s.wan_rcvbuf,
        wan_sndbuf=s.wan_sndbuf,
        force_buffers=s.force_buffers,
        effective_ran_buffers=BufferSizes(rcvbuf=effective[0], sndbuf=effective[1])
        if effective
        else None,
        pipe_size=service.dataplane.pipe_size,
        tlv_max_buffer=s.tlv_max_buffer,
        max_flows=s.max_flows,
        max_flows_per_client=s.max_flows_per_client,
        handshake_timeout=s.handshake_timeout,
        idle_timeout=s.idle_timeout,
        half_open_timeout=s.half_open_timeout,
        relay_threads=service.dataplane.thread_count,
        backlog_interval_ms=s.backlog_interval_ms,
    )


def _check_address(value: str, name: str) -> None:
    """A UE address as the PEP writes it: dotted IPv4 or compressed IPv6."""
    try:
        parsed = ipaddress.ip_address(value)
    except ValueError:
        raise ProblemError(400, f"{name}: {value!r} is not an IPv4 or IPv6 address") from None
    if str(parsed) != value:
        raise ProblemError(400, f"{name}: write {value!r} as {str(parsed)!r}")


def _ip_key(ue: str) -> tuple[int, int]:
    """IPv4 addresses first, each version in numeric order."""
    address = ipaddress.ip_address(ue)
    return address.version, int(address)


def _validation_detail(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
    ) or str(exc)


class PepCollector(Collector):
    """Prometheus metrics read at scrape time (no per-byte metric updates on the fast path)."""

    def __init__(self, service: PepService) -> None:
        self.service = service

    def collect(self) -> Any:
        dp = self.service.dataplane
        c = dp.counters()
        flows = GaugeMetricFamily("pep_flows", "Open flows", labels=["mode"])
        for mode in ProxyMode:
            flows.add_metric([str(mode)], sum(1 for f in self.service.flows if f.mode is mode))
        yield flows
        yield CounterMetricFamily("pep_flows_accepted", "Connections accepted", value=c.accepted)
        yield CounterMetricFamily(
            "pep_flows_established", "Flows with both legs connected", value=c.established
        )
        refused = CounterMetricFamily("pep_flows_refused", "Refused", labels=["reason"])
        for reason, n in c.refused.items():
            refused.add_metric([reason], n)
        yield refused
        aborted = CounterMetricFamily("pep_flows_aborted", "Reset flows", labels=["reason"])
        for reason, n in c.aborted.items():
            aborted.add_metric([reason], n)
        yield aborted
        relayed = CounterMetricFamily("pep_relayed_bytes", "Bytes relayed", labels=["direction"])
        relayed.add_metric(["to_ue"], c.bytes_to_ue)
        relayed.add_metric(["from_ue"], c.bytes_from_ue)
        yield relayed
        yield GaugeMetricFamily("pep_pipes_in_use", "Splice pipes holding data", dp.pipes_in_use())
        yield GaugeMetricFamily(
            "pep_private_descriptor_tables",
            "1: each relay thread has its own descriptor table; 0: unshare was refused (a "
            "seccomp profile) and all flows share the process's RLIMIT_NOFILE",
            int(dp.private_descriptor_tables),
        )
        # Totals only: /metrics needs no token, so it names no UE (per UE: GET /pep/v1/ues).
        latest = list(self.service.backlog.latest.values()) if self.service.backlog else []
        yield GaugeMetricFamily("pep_ue_backlog_bytes", "Bytes held toward all UEs (last samples)",
                                sum(b.backlog_bytes for b in latest))  # fmt: skip
        yield GaugeMetricFamily("pep_ues_with_backlog_samples", "UEs with a backlog sample",
                                len(latest))  # fmt: skip


def register_metrics(service: PepService) -> PepCollector:
    collector = PepCollector(service)
    REGISTRY.register(collector)
    return collector


def unregister_metrics(collector: PepCollector) -> None:
    REGISTRY.unregister(collector)
