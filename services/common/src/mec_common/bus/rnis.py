"""The RNIS feed on AMQP: message schema (versioned) and routing keys.

The RNIS adapter (Go, ``rnis-adapter/``) publishes one ``RnisMeasurement`` per UE per poll of
the RAN (FlexRAN ``GET /stats``), or one ``RnisCellMeasurements`` per cell per poll with every
UE of the cell (``RNIS_AMQP_PUBLISH=ue|cell|both``), and an ``RnisEvent`` when a UE attaches,
detaches or changes cell. Consumers (PEP, path manager) bind a queue to the topic exchange
with the helpers below and read a measurement body of either kind with ``measurements()``.
The JSON Schema of the three message types is exported to ``docs/schemas/`` (``python -m
mec_common.bus --export docs/schemas``) and the adapter's output is tested against it.

Units: bytes, PRBs, milliseconds for RLC delays, bits/s for capacities, Unix nanoseconds for
times. ``None`` means "the RAN source did not report it" (old FlexRAN builds, a UE not yet
scheduled): a consumer must treat it as unknown, never as zero.

Routing keys (dots separate words; ``-`` is an unknown part)::

    rnis.v1.meas.<cell>.<imsi>.<ipv4>                       one per UE per poll
    rnis.v1.cell.<cell>                                     one per cell per poll
    rnis.v1.event.<attach|detach|cell_change>.<cell>.<imsi>.<ipv4>

``<cell>`` is ``<bs_id>-<phyCellId>`` (``10000-0``); dots of the IPv4 address become ``_``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
"""Value of the ``schema`` AMQP header and of ``schema_version`` in every body."""

EXCHANGE = "rnis"
"""Default exchange (topic, durable); the adapter's ``RNIS_AMQP_EXCHANGE`` may change it."""

PREFIX = f"rnis.v{SCHEMA_VERSION}"
UNKNOWN = "-"
EventKind = Literal["attach", "detach", "cell_change"]


class RlcQueue(BaseModel):
    """One logical channel's RLC transmission queue at the eNB (FlexRAN ``rlcReport[]``)."""

    model_config = ConfigDict(frozen=True)

    lcid: int = Field(..., ge=0, le=32, description="logical channel id (1-2 SRB, >=3 DRB)")
    tx_queue_bytes: int = Field(..., ge=0, description="bytes waiting (txQueueSize)")
    hol_delay_ms: int | None = Field(None, ge=0, description="head-of-line delay (ms)")
    retx_queue_bytes: int | None = Field(None, ge=0, description="RLC AM retransmission bytes")


class _CellFields(BaseModel):
    """What every UE of a cell shares at one poll (``CELL_FIELDS``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="message schema version")
    cell: str = Field(..., description="cell key <bs_id>-<phyCellId>, e.g. 10000-0")
    bs_id: int = Field(..., ge=0, description="FlexRAN bs_id (eNB id; agent_id on old builds)")
    phy_cell_id: int | None = Field(None, ge=0, description="physical cell id")
    cell_prbs: int | None = Field(None, ge=0, description="cell DL bandwidth in PRBs (N_PRB)")
    source_time_ns: int | None = Field(
        None,
        ge=0,
        description="when the RAN measured the report (Unix ns): the first poll that saw its"
        " frame (sfnSn); use it for staleness",
    )
    source_time_uncertainty_ns: int | None = Field(
        None, ge=0, description="uncertainty of source_time_ns: the RAN's report period (ns)"
    )
    observed_ns: int = Field(..., ge=0, description="adapter wall clock at the poll (Unix ns)")
    tti_us: int = Field(
        1000,
        gt=0,
        description="TTI length (µs) measured from the frame numbers; 1000 for a real-time LTE"
        " RAN, longer or shorter for a simulated one. Bytes per TTI / tti_us = the rate",
    )
    cell_best_cqi_tbs_bytes: int | None = Field(
        None, ge=0, description="TBS at CQI 15 on all cell_prbs PRBs (MELD S_TBm), bytes"
    )
    cell_ues: int = Field(..., ge=1, description="UEs reported in this cell at this poll (M)")
    cell_allocated_prbs: int | None = Field(
        None, ge=0, description="DL PRBs allocated to all UEs of the cell (ΣPa)"
    )
    cell_prb_usage: float | None = Field(
        None, ge=0, description="cell_allocated_prbs / cell_prbs (0..1, >1 if over-reported)"
    )


class RnisCellUe(BaseModel):
    """One UE's own values in a cell message (``RnisCellMeasurements.ues``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    rnti: int = Field(..., ge=0, le=65535, description="C-RNTI of the UE in this cell")
    imsi: str | None = Field(None, description="IMSI (from eNB_config UE.ueConfig[].imsi)")
    ue_ipv4: IPv4Address | None = Field(None, description="UE IPv4 address (mapping source)")
    wb_cqi: int | None = Field(None, ge=0, le=15, description="wideband DL CQI (P10 CSI)")
    dl_mcs: int | None = Field(None, ge=0, le=31, description="DL MCS of the last TB (mcs1Dl)")
    dl_tbs_bytes: int | None = Field(None, ge=0, description="DL TBS of the last TTI (tbsDl), B")
    dl_prbs: int | None = Field(None, ge=0, description="DL PRBs allocated last TTI (Pa_i)")
    rlc_queue_bytes: int | None = Field(
        None, ge=0, description="RLC tx queue bytes summed over the DRBs (lcid >= 3)"
    )
    rlc_hol_delay_ms: int | None = Field(
        None, ge=0, description="largest head-of-line delay over the DRBs (ms)"
    )
    rlc: list[RlcQueue] = Field(default_factory=list, description="per logical channel")
    harq_processes: int | None = Field(None, ge=0, description="DL HARQ processes (N_HARQ)")
    phr: int | None = Field(None, description="power headroom report (raw index)")
    sfn_sf: int | None = Field(
        None,
        ge=0,
        description="sfnSn of the report as the source writes it (OAI: frame * 10 + subframe)",
    )
    frame: int | None = Field(None, ge=0, le=1023, description="system frame number")
    subframe: int | None = Field(None, ge=0, le=9, description="subframe")
    best_cqi_tbs_bytes: int | None = Field(
        None, ge=0, description="TBS at CQI 15 (OAI CQI→MCS map) on dl_prbs PRBs, bytes"
    )
    rapid_prbs: int | None = Field(
        None, ge=0, description="RAPID expected PRBs Pe_i = Pa_i + N_PRB - ΣPa"
    )
    rapid_capacity_bps: int | None = Field(
        None, ge=0, description="RAPID C_i = TBS(Pe_i, MCS_i) / TTI (bits/s)"
    )
    cqi_capacity_bps: int | None = Field(
        None, ge=0, description="TBS(MCS(wb_cqi), cell_prbs) / TTI: the cell's rate for this UE"
    )
    radio_tbs_bytes: int | None = Field(
        None,
        ge=0,
        description="MELD's D_TBS: TBS(MCS(wb_cqi), rapid_prbs), the transport block the UE gets"
        " per TTI when it has data (dl_tbs_bytes is 0 when it had none)",
    )
    dl_tbs_bps: int | None = Field(
        None, ge=0, description="dl_tbs_bytes / TTI: the rate the UE got in its last TTI (bit/s)"
    )


class RnisMeasurement(RnisCellUe, _CellFields):
    """Radio state of one UE in one cell at one poll (``rnis.v1.meas.*``).

    MELD uses ``radio_tbs_bytes`` (D_TBS), ``rlc_queue_bytes`` (S_TxQueue), ``harq_processes``
    (N_HARQ), ``best_cqi_tbs_bytes`` / ``cell_best_cqi_tbs_bytes`` (for Q_th) and
    ``source_time_ns`` (staleness; ``observed_ns`` when null). RAPID uses ``dl_prbs`` (Pa_i),
    ``cell_prbs`` (N_PRB), ``cell_allocated_prbs`` (ΣPa), ``dl_mcs`` (MCS_i), ``cell_ues`` (M)
    and ``rapid_capacity_bps`` (C_i). The path manager uses the per-cell ``dl_tbs_bps``,
    ``wb_cqi`` and ``cqi_capacity_bps`` of each of a UE's cells (paths). Every bit/s value is
    the adapter's one conversion of bytes per TTI at the measured TTI; consumers never
    convert TBS themselves.
    """

    def routing_key(self) -> str:
        return meas_routing_key(self.cell, self.imsi, self.ue_ipv4)


class RnisCellMeasurements(_CellFields):
    """Every UE of one cell at one poll, in one message (``rnis.v1.cell.<cell>``).

    The adapter sends these instead of (``RNIS_AMQP_PUBLISH=cell``) or besides (``both``) the
    per-UE messages: at 1 ms polling one message per cell instead of one per UE is what a
    broker can carry. The cell's fields are written once; ``ues`` holds each UE's own fields
    (UEs whose report did not change since the last poll are left out, as in the per-UE
    feed). ``measurements()`` gives the same ``RnisMeasurement`` objects as the per-UE feed.
    """

    ues: list[RnisCellUe] = Field(..., description="the UEs of the cell with a new report")

    def routing_key(self) -> str:
        return cell_routing_key(self.cell)

    def measurements(self) -> list[RnisMeasurement]:
        cell = self.model_dump(include=set(CELL_FIELDS))
        return [RnisMeasurement.model_validate(cell | ue.model_dump()) for ue in self.ues]


CELL_FIELDS = tuple(_CellFields.model_fields)
"""Fields a cell message carries once for all its UEs."""


def measurements(
    body: bytes | str, ue_ipv4: IPv4Address | str | None = None
) -> Iterator[RnisMeasurement]:
    """The per-UE measurements of a measurement message of either kind: one for a
    ``rnis.v1.meas.*`` body, one per UE for a ``rnis.v1.cell.*`` body (the ``type`` header
    is ``meas`` or ``cell``; the body tells them apart too). With ``ue_ipv4``, only that
    UE's: the other UEs of a cell message are not validated, which is most of its cost.

    Raises ``pydantic.ValidationError`` (a ``ValueError``) on a body of neither schema.
    """
    data = json.loads(body)
    if not isinstance(data, dict) or "ues" not in data:
        m = RnisMeasurement.model_validate(data)
        if ue_ipv4 is None or m.ue_ipv4 == IPv4Address(str(ue_ipv4)):
            yield m
        return
    ues = data.pop("ues")
    if not isinstance(ues, list):
        RnisCellMeasurements.model_validate(data | {"ues": ues})  # raises, with the reason
        return
    cell = _CellFields.model_validate(data).model_dump()
    wanted = None if ue_ipv4 is None else str(ue_ipv4)
    for ue in ues:
        if wanted is None or (isinstance(ue, dict) and ue.get("ue_ipv4") == wanted):
            yield RnisMeasurement.model_validate(ue | cell if isinstance(ue, dict) else ue)


class RnisEvent(BaseModel):
    """A UE appeared in a cell, left it, or moved to another cell (``rnis.v1.event.*``)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="message schema version")
    event: EventKind = Field(..., description="attach, detach or cell_change")
    cell: str = Field(..., description="cell key of the UE now (its last cell on detach)")
    bs_id: int = Field(..., ge=0)
    phy_cell_id: int | None = Field(None, ge=0)
    rnti: int = Field(..., ge=0, le=65535)
    imsi: str | None = None
    ue_ipv4: IPv4Address | None = None
    previous_cell: str | None = Field(None, description="cell_change: the cell the UE left")
    time_ns: int = Field(..., ge=0, description="adapter wall clock when detected (Unix ns)")

    def routing_key(self) -> str:
        return event_routing_key(self.event, self.cell, self.imsi, self.ue_ipv4)


def _ip_word(ip: IPv4Address | str | None) -> str:
    return str(ip).replace(".", "_") if ip else UNKNOWN


def _word(value: str | None) -> str:
    if not value:
        return UNKNOWN
    if any(c in value for c in ".*#"):
        raise ValueError(f"{value!r} cannot be a routing key word")
    return value


def meas_routing_key(cell: str, imsi: str | None, ipv4: IPv4Address | str | None) -> str:
    return f"{PREFIX}.meas.{_word(cell)}.{_word(imsi)}.{_ip_word(ipv4)}"


def cell_routing_key(cell: str) -> str:
    return f"{PREFIX}.cell.{_word(cell)}"


def event_routing_key(
    kind: EventKind, cell: str, imsi: str | None, ipv4: IPv4Address | str | None
) -> str:
    return f"{PREFIX}.event.{kind}.{_word(cell)}.{_word(imsi)}.{_ip_word(ipv4)}"


def bind_ue_ip(ipv4: IPv4Address | str, kind: Literal["meas", "event"] = "meas") -> str:
    """Binding key for one UE address (all its cells)."""
    middle = "*.*" if kind == "meas" else "*.*.*"
    return f"{PREFIX}.{kind}.{middle}.{_ip_word(ipv4)}"


def bind_imsi(imsi: str, kind: Literal["meas", "event"] = "meas") -> str:
    """Binding key for one subscriber (all cells and addresses)."""
    middle = "*" if kind == "meas" else "*.*"
    return f"{PREFIX}.{kind}.{middle}.{_word(imsi)}.*"


def bind_cell(cell: str) -> str:
    """Binding key for every measurement of one cell."""
    return f"{PREFIX}.meas.{_word(cell)}.#"


def bind_cell_batch(cell: str) -> str:
    """Binding key for the cell messages of one cell (``RNIS_AMQP_PUBLISH=cell|both``)."""
    return cell_routing_key(cell)


def bind_all(kind: Literal["meas", "cell", "event"] | None = None) -> str:
    return f"{PREFIX}.{kind}.#" if kind else f"{PREFIX}.#"


def cell_key(bs_id: int, phy_cell_id: int | None) -> str:
    return f"{bs_id}-{UNKNOWN if phy_cell_id is None else phy_cell_id}"


def json_schemas() -> dict[str, dict[str, object]]:
    """File name → JSON Schema of each message type."""
    return {
        f"rnis-measurement.v{SCHEMA_VERSION}.json": RnisMeasurement.model_json_schema(),
        f"rnis-cell.v{SCHEMA_VERSION}.json": RnisCellMeasurements.model_json_schema(),
        f"rnis-event.v{SCHEMA_VERSION}.json": RnisEvent.model_json_schema(),
    }
