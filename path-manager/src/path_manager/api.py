"""REST API ``/pm/v1``: UEs, paths, decisions, prediction statistics, control settings.

The platform's REST style: the manager and the UE as ``Annotated`` dependencies, a response
model per resource, ProblemDetails errors.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from ipaddress import IPv4Address
from typing import Annotated

import numpy as np
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from mec_common.api import AuthenticatedPrincipal, ProblemError
from mec_common.flow_rtt_view import ObservedRtt
from path_manager.control import ControlMode, ControlSettings
from path_manager.manager import PathManager, Ue

router = APIRouter(prefix="/pm/v1", tags=["path manager"])


def _manager(request: Request) -> PathManager:
    manager: PathManager = request.app.state.service
    return manager


Manager = Annotated[PathManager, Depends(_manager)]


def _ue(manager: Manager, ue: IPv4Address) -> Ue:
    found = manager.ues.get(ue)
    if found is None:
        raise ProblemError(404, f"no UE {ue}; create it with PUT /pm/v1/ues/{ue}")
    return found


KnownUe = Annotated[Ue, Depends(_ue)]


class UeSpec(BaseModel):
    paths: list[IPv4Address] = Field(
        ..., min_length=1, max_length=16, description="the UE's address in each cell (a path)"
    )


class ControlCounters(BaseModel):
    predictive_controls: int
    predictive_changes: int
    reactive_changes: int
    discarded_predictions: int
    safety_vetoes: int


class UeSummary(BaseModel):
    ue: str = Field(description="the UE's address (its identity here)")
    paths: list[str] = Field(description="the UE's address in each cell")
    active_paths: list[str]
    queue_packets: float = Field(description="the queue the control sees (PM_QUEUE_MEASURE)")
    arrival_rate_pps: float
    mode: ControlMode
    counters: ControlCounters


class PathInfo(BaseModel):
    path: str
    cell: str | None
    active: bool
    in_los: bool
    capacity_los_bps: float | None = Field(description="None until the path was seen")
    capacity_nlos_bps: float | None
    mean_los_s: float = Field(description="estimated mean LoS dwell time")
    mean_nlos_s: float = Field(description="estimated mean NLoS dwell time")
    samples: int
    stale: bool
    last_sample_age_s: float | None
    flow_rtt: list[ObservedRtt] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="the path address's flows as the flow-RTT observer measures them "
        "(PM_FLOWRTT_EXCHANGE); absent when none is known",
    )


class DecisionRecord(BaseModel):
    """One control decision (``control.Decision``); ``time`` on the monotonic clock, s."""

    time: float
    trigger: str = Field(description="predictive or reactive")
    action: str = Field(description="add, remove or none")
    path: str | None
    reason: str
    queue: float = Field(description="packets")
    active_paths: int
    p_high: float | None = None
    p_low: float | None = None
    prediction_ms: float | None = None


class Percentiles(BaseModel):
    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None
    min: float | None


class PredictionStats(BaseModel):
    prediction_ms: Percentiles
    per_ue: dict[str, Percentiles]
    control_interval_ms: Percentiles


class ControlView(BaseModel):
    """The control settings every UE runs with. Times in seconds, queues in packets."""

    mode: ControlMode
    period: float
    horizon: float
    q_high: float = Field(description="Q_HT")
    q_low: float = Field(description="Q_LT")
    p_high_bound: float
    p_low_bound: float
    reactive_guard: float = Field(description="T_R")
    safety_max_paths: int


class ControlUpdate(BaseModel):
    """Any subset of the control settings; applied to every UE at once."""

    mode: ControlMode | None = None
    period: float | None = Field(None, description="s")
    horizon: float | None = Field(None, description="s")
    q_high: float | None = Field(None, description="Q_HT, packets")
    q_low: float | None = Field(None, description="Q_LT, packets")
    p_high_bound: float | None = None
    p_low_bound: float | None = None
    reactive_guard: float | None = Field(None, description="T_R, s")
    safety_max_paths: int | None = None


def _summary(ue: Ue, manager: PathManager) -> UeSummary:
    control = ue.control
    assert control is not None
    c = control.counters
    return UeSummary(
        ue=str(ue.id),
        paths=[str(p) for p in ue.paths],
        active_paths=[str(p) for p, on in ue.active.items() if on],
        queue_packets=ue.queue_bytes / manager.settings.packet_bytes,
        arrival_rate_pps=ue.arrival_pps,
        mode=control.settings.mode,
        counters=ControlCounters(
            predictive_controls=c.predictive_controls,
            predictive_changes=c.predictive_changes,
            reactive_changes=c.reactive_changes,
            discarded_predictions=c.discarded_predictions,
            safety_vetoes=c.safety_vetoes,
        ),
    )


@router.get("/ues", summary="UEs under control")
def list_ues(manager: Manager, _: AuthenticatedPrincipal) -> list[UeSummary]:
    return [_summary(ue, manager) for ue in list(manager.ues.values())]


@router.put("/ues/{ue}", summary="Put a UE under control (its paths: one address per cell)")
def put_ue(manager: Manager, ue: IPv4Address, spec: UeSpec, _: AuthenticatedPrincipal
           ) -> UeSummary:  # fmt: skip
    if len(set(spec.paths)) != len(spec.paths):
        raise ProblemError(400, "paths must be distinct addresses")
    return _summary(manager.put_ue(ue, list(spec.paths)), manager)


@router.delete("/ues/{ue}", status_code=204, summary="Stop controlling a UE")
def delete_ue(manager: Manager, ue: IPv4Address, _: AuthenticatedPrincipal) -> Response:
    if not manager.delete_ue(ue):
        raise ProblemError(404, f"no UE {ue}")
    return Response(status_code=204)


@router.get("/ues/{ue}", summary="One UE")
def get_ue(manager: Manager, found: KnownUe, _: AuthenticatedPrincipal) -> UeSummary:
    return _summary(found, manager)


@router.get("/ues/{ue}/paths", summary="Paths: capacity, LoS state, dwell estimates, active")
def get_paths(manager: Manager, found: KnownUe, _: AuthenticatedPrincipal) -> list[PathInfo]:
    s, now = manager.radio, time.monotonic()
    out = []
    for ip, radio in found.paths.items():
        to_los, to_nlos = radio.rates(now, s)
        out.append(PathInfo(
            path=str(ip), cell=radio.cell, active=found.active[ip], in_los=radio.in_los,
            capacity_los_bps=radio.capacity_los, capacity_nlos_bps=radio.capacity_nlos,
            mean_los_s=1 / to_nlos, mean_nlos_s=1 / to_los, samples=radio.samples,
            stale=radio.stale(now, s),
            last_sample_age_s=None if radio.measured_at is None else now - radio.measured_at,
            flow_rtt=_flow_rtt(manager, ip),
        ))  # fmt: skip
    return out


def _flow_rtt(manager: PathManager, path: IPv4Address) -> list[ObservedRtt] | None:
    if manager.flow_rtt is None:
        return None
    return manager.flow_rtt.of_address(str(path)) or None


@router.get("/ues/{ue}/decisions", summary="Decision log, newest last, with reasons")
def get_decisions(
    found: KnownUe,
    _: AuthenticatedPrincipal,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    changes_only: bool = False,
) -> list[DecisionRecord]:
    assert found.control is not None
    log = [d for d in list(found.control.log) if not changes_only or d.action.value != "none"]
    return [DecisionRecord.model_validate(d.as_dict()) for d in log[-limit:]]


@router.get("/prediction-stats", summary="Prediction wall time and control intervals")
def prediction_stats(manager: Manager, _: AuthenticatedPrincipal) -> PredictionStats:
    per_ue, all_ms, intervals = {}, [], []
    for ue in list(manager.ues.values()):
        assert ue.control is not None
        ms = [x * 1e3 for x in ue.control.counters.prediction_seconds]
        per_ue[str(ue.id)] = _percentiles(ms)
        all_ms += ms
        intervals += [x * 1e3 for x in ue.control.counters.control_intervals]
    return PredictionStats(prediction_ms=_percentiles(all_ms), per_ue=per_ue,
                           control_interval_ms=_percentiles(intervals))  # fmt: skip


def _percentiles(values: list[float]) -> Percentiles:
    if not values:
        return Percentiles(count=0, p50=None, p90=None, p99=None, max=None, min=None)
    a = np.array(values)
    p50, p90, p99 = (float(np.percentile(a, q)) for q in (50, 90, 99))
    return Percentiles(count=len(values), p50=p50, p90=p90, p99=p99,
                       max=float(a.max()), min=float(a.min()))  # fmt: skip


@router.get("/control", summary="Mode, thresholds, bounds and timing")
def get_control(manager: Manager, _: AuthenticatedPrincipal) -> ControlView:
    return ControlView.model_validate(asdict(manager.control_settings))


@router.put("/control", summary="Change mode, thresholds, bounds or timing at run time")
def put_control(manager: Manager, update: ControlUpdate, _: AuthenticatedPrincipal
                ) -> ControlView:  # fmt: skip
    changes = update.model_dump(exclude_none=True)
    if not changes:
        raise ProblemError(400, "nothing to change: give at least one field")
    try:
        new: ControlSettings = manager.update_control(**changes)
    except ValueError as exc:
        raise ProblemError(400, str(exc)) from exc
    return ControlView.model_validate(asdict(new))
