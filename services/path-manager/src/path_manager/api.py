"""REST API ``/pm/v1``: UEs, paths, decisions, prediction statistics, control settings."""

from __future__ import annotations

from dataclasses import asdict
from ipaddress import IPv4Address
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from mec_common.api import AuthenticatedPrincipal, ProblemError
from path_manager.control import ControlSettings, Mode
from path_manager.service import PathManager, Ue

router = APIRouter(prefix="/pm/v1", tags=["path manager"])


class UeSpec(BaseModel):
    paths: list[IPv4Address] = Field(
        ..., min_length=1, max_length=16, description="the UE's address in each cell (a path)"
    )


class ControlUpdate(BaseModel):
    """Any subset of the control settings; applied to every UE at once."""

    mode: Mode | None = None
    period: float | None = Field(None, description="s")
    horizon: float | None = Field(None, description="s")
    q_high: float | None = Field(None, description="Q_HT, packets")
    q_low: float | None = Field(None, description="Q_LT, packets")
    p_high_bound: float | None = None
    p_low_bound: float | None = None
    reactive_guard: float | None = Field(None, description="T_R, s")
    safety_max_paths: int | None = None


def _manager(request: Request) -> PathManager:
    manager: PathManager = request.app.state.manager
    return manager


def _ue(request: Request, ue: IPv4Address) -> Ue:
    found = _manager(request).ues.get(ue)
    if found is None:
        raise ProblemError(404, f"no UE {ue}; create it with PUT /pm/v1/ues/{ue}")
    return found


def _ue_summary(ue: Ue, manager: PathManager) -> dict[str, Any]:
    control = ue.control
    assert control is not None
    c = control.counters
    return {
        "ue": str(ue.id),
        "paths": [str(p) for p in ue.paths],
        "active_paths": [str(p) for p, on in ue.active.items() if on],
        "queue_packets": ue.queue_bytes / manager.settings.packet_bytes,
        "arrival_rate_pps": ue.arrival_pps,
        "mode": control.settings.mode.value,
        "counters": {
            "predictive_controls": c.predictive_controls,
            "predictive_changes": c.predictive_changes,
            "reactive_changes": c.reactive_changes,
            "discarded_predictions": c.discarded_predictions,
            "safety_vetoes": c.safety_vetoes,
        },
    }


@router.get("/ues", summary="UEs under control")
def list_ues(request: Request, _: AuthenticatedPrincipal) -> list[dict[str, Any]]:
    manager = _manager(request)
    return [_ue_summary(ue, manager) for ue in list(manager.ues.values())]


@router.put("/ues/{ue}", summary="Put a UE under control (its paths: one address per cell)")
def put_ue(
    request: Request, ue: IPv4Address, spec: UeSpec, _: AuthenticatedPrincipal
) -> dict[str, Any]:
    if len(set(spec.paths)) != len(spec.paths):
        raise ProblemError(400, "paths must be distinct addresses")
    manager = _manager(request)
    return _ue_summary(manager.put_ue(ue, list(spec.paths)), manager)


@router.delete("/ues/{ue}", status_code=204, summary="Stop controlling a UE")
def delete_ue(request: Request, ue: IPv4Address, _: AuthenticatedPrincipal) -> Response:
    if not _manager(request).delete_ue(ue):
        raise ProblemError(404, f"no UE {ue}")
    return Response(status_code=204)


@router.get("/ues/{ue}", summary="One UE")
def get_ue(request: Request, ue: IPv4Address, _: AuthenticatedPrincipal) -> dict[str, Any]:
    return _ue_summary(_ue(request, ue), _manager(request))


@router.get("/ues/{ue}/paths", summary="Paths: capacity, LoS state, dwell estimates, active")
def get_paths(request: Request, ue: IPv4Address, _: AuthenticatedPrincipal) -> list[dict[str, Any]]:
    import time

    found, manager = _ue(request, ue), _manager(request)
    s, now = manager.radio, time.monotonic()
    out = []
    for ip, radio in found.paths.items():
        to_los, to_nlos = radio.rates(now, s)
        out.append({
            "path": str(ip),
            "cell": radio.cell,
            "active": found.active[ip],
            "in_los": radio.in_los,
            "capacity_los_bps": radio.capacity_los,
            "capacity_nlos_bps": radio.capacity_nlos,
            "mean_los_s": 1 / to_nlos,
            "mean_nlos_s": 1 / to_los,
            "samples": radio.samples,
            "stale": radio.stale(now, s),
            "last_sample_age_s": None if radio.measured_at is None else now - radio.measured_at,
        })  # fmt: skip
    return out


@router.get("/ues/{ue}/decisions", summary="Decision log, newest last, with reasons")
def get_decisions(
    request: Request,
    ue: IPv4Address,
    _: AuthenticatedPrincipal,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    changes_only: bool = False,
) -> list[dict[str, Any]]:
    control = _ue(request, ue).control
    assert control is not None
    log = [d for d in list(control.log) if not changes_only or d.action.value != "none"]
    return [d.as_dict() for d in log[-limit:]]


@router.get("/prediction-stats", summary="Prediction wall time and control intervals")
def prediction_stats(request: Request, _: AuthenticatedPrincipal) -> dict[str, Any]:
    per_ue, all_ms, intervals = {}, [], []
    for ue in list(_manager(request).ues.values()):
        assert ue.control is not None
        ms = [x * 1e3 for x in ue.control.counters.prediction_seconds]
        per_ue[str(ue.id)] = _stats(ms)
        all_ms += ms
        intervals += [x * 1e3 for x in ue.control.counters.control_intervals]
    return {
        "prediction_ms": _stats(all_ms),
        "per_ue": per_ue,
        "control_interval_ms": _stats(intervals),
    }


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "p50": None, "p90": None, "p99": None, "max": None, "min": None}
    a = np.array(values)
    return {
        "count": len(values),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "max": float(a.max()),
        "min": float(a.min()),
    }


@router.get("/control", summary="Mode, thresholds, bounds and timing")
def get_control(request: Request, _: AuthenticatedPrincipal) -> dict[str, Any]:
    return asdict(_manager(request).control_settings)


@router.put("/control", summary="Change mode, thresholds, bounds or timing at run time")
def put_control(
    request: Request, update: ControlUpdate, _: AuthenticatedPrincipal
) -> dict[str, Any]:
    changes = update.model_dump(exclude_none=True)
    if not changes:
        raise ProblemError(400, "nothing to change: give at least one field")
    try:
        new: ControlSettings = _manager(request).update_control(**changes)
    except ValueError as exc:
        raise ProblemError(400, str(exc)) from exc
    return asdict(new)
