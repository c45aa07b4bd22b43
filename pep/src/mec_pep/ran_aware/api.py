"""REST API of MELD/RAPID, mounted by the PEP under ``/pep/v1/ran_aware`` (bearer auth).

- ``GET  /state``               kernel program, global mode, RNIS feed
- ``PUT  /mode``                change the global mode
- ``GET  /ues``, ``GET /ues/{ue}``  per-UE radio state (age), mode, kernel counters
- ``PUT  /ues/{ue}/mode``, ``DELETE /ues/{ue}/mode``  a UE's own mode / back to global
- ``GET  /rapid/flows``         RAPID per-flow windows, rates and classes
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, Field

from mec_common.api import ProblemError
from mec_pep.ran_aware.kernel import CcaMode, KernelUnavailableError

if TYPE_CHECKING:
    from mec_pep.ran_aware.extension import RanAwareExtension

ModeLabel = Literal["off", "meld-de", "meld-me", "rapid", "meld-overflow", "ignore-loss"]


class ModeChange(BaseModel):
    mode: ModeLabel = Field(
        ..., description="off, meld-de, meld-me, meld-overflow (ours), ignore-loss or rapid"
    )


class Counters(BaseModel):
    losses: int = Field(..., description="loss events (recovery episodes and RTOs)")
    notified: int = Field(..., description="loss events that reduced cwnd")
    suppressed: int = Field(..., description="loss events MELD/RAPID kept from the CCA")
    stale: int = Field(..., description="notified because the radio state was stale")
    no_data: int = Field(..., description="notified because there was no radio state")
    timeouts: int = Field(..., description="RTOs among the loss events")
    repaired: int = Field(
        ..., description="loss events whose impossible ssthresh (> 2^31 - 1) the kernel reset"
    )
    unlogged: int = Field(..., description="loss events the kernel's decision log had no room for")


class Radio(BaseModel):
    age_ms: float | None = Field(..., description="age of the measurement in the kernel")
    stale: bool
    d_tbs_bytes: int = Field(..., description="D_TBS: transport block of the last TTI")
    rlc_queue_bytes: int = Field(..., description="S_TxQueue (4294967295 = unknown)")
    q_th_bytes: int = Field(..., description="Q_th = TBS(best CQI, PRBs) · N_HARQ")
    full_bytes: int = Field(
        ..., description="S_TxQueue of a full RLC buffer (MELD-overflow; 0 = unknown)"
    )
    harq_processes: int
    capacity_bps: int = Field(..., description="RAPID C_i")


class UeState(BaseModel):
    ue: str
    mode: ModeLabel
    mode_source: Literal["ue", "global"]
    flows: int
    radio: Radio | None
    counters: Counters


class RapidFlowState(BaseModel):
    flow_id: int
    ue: str
    class_: Literal["init", "fast", "slow"] = Field(..., alias="class")
    window_bytes: int | None = Field(..., description="TCP_WINDOW_CLAMP on the WAN leg")
    allocated_bps: int = Field(..., description="the flow's share (also its RAN-leg rate)")
    arrival_bps: int | None = Field(..., description="smoothed arrival rate r̂")
    released_bps: int
    wan_rtt_min_ms: float
    wan_rtt_ms: float


UePath = Path(..., description="UE IPv4 address", examples=["10.30.1.1"])


def _ipv4(ue: str) -> str:
    try:
        return str(ipaddress.IPv4Address(ue))
    except ValueError:
        raise ProblemError(400, f"{ue!r} is not an IPv4 address") from None


def _unavailable(exc: KernelUnavailableError) -> ProblemError:
    return ProblemError(409, f"MELD/RAPID is not available on this PEP: {exc}")


def build_router(ext: RanAwareExtension) -> APIRouter:
    router = APIRouter(tags=["ran_aware"])

    @router.get("/state", summary="Kernel program, modes and RNIS feed")
    def state() -> dict[str, Any]:
        return ext.state()

    @router.put("/mode", summary="Change the global mode (UEs without their own mode)")
    def put_mode(change: ModeChange) -> dict[str, Any]:
        try:
            ext.set_global_mode(CcaMode.parse(change.mode))
        except KernelUnavailableError as exc:
            raise _unavailable(exc) from None
        return ext.state()

    @router.get("/ues", summary="Every UE the PEP knows: radio state, mode, counters")
    def ues() -> list[UeState]:
        try:
            return [UeState.model_validate(ext.ue_state(ue)) for ue in ext.known_ues()]
        except KernelUnavailableError as exc:
            raise _unavailable(exc) from None

    @router.get("/ues/{ue}", summary="One UE: radio state, mode, counters")
    def ue(ue: str = UePath) -> UeState:
        address = _ipv4(ue)
        try:
            return UeState.model_validate(ext.ue_state(address))
        except KernelUnavailableError as exc:
            raise _unavailable(exc) from None

    @router.put("/ues/{ue}/mode", summary="Give a UE its own mode")
    def put_ue_mode(change: ModeChange, ue: str = UePath) -> UeState:
        address = _ipv4(ue)
        try:
            ext.set_ue_mode(address, CcaMode.parse(change.mode))
            return UeState.model_validate(ext.ue_state(address))
        except KernelUnavailableError as exc:
            raise _unavailable(exc) from None

    @router.delete("/ues/{ue}/mode", status_code=204, summary="Return a UE to the global mode")
    def delete_ue_mode(ue: str = UePath) -> Response:
        address = _ipv4(ue)
        if address not in ext.modes.per_ue:
            raise ProblemError(404, f"UE {address} has no mode of its own")
        try:
            ext.set_ue_mode(address, None)
        except KernelUnavailableError as exc:
            raise _unavailable(exc) from None
        return Response(status_code=204)

    @router.get("/rapid/flows", summary="RAPID per-flow windows, rates and classes")
    def rapid_flows() -> list[RapidFlowState]:
        if ext.rapid is None:
            raise _unavailable(KernelUnavailableError(ext.kernel_error or "not loaded"))
        return [RapidFlowState.model_validate(f) for f in ext.rapid.snapshot()]

    return router
