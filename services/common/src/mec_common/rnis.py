"""The RNIS feed on AMQP: message schema (versioned) and routing keys.

The RNIS adapter (Go, ``rnis-adapter/``) publishes one ``RnisMeasurement`` per UE per poll of
the RAN (FlexRAN ``GET /stats``) and an ``RnisEvent`` when a UE attaches, detaches or changes
cell. Consumers (PEP, path manager) bind a queue to the topic exchange with the helpers below
and parse bodies with ``RnisMeasurement.model_validate_json``. The JSON Schema of both models
is exported to ``docs/schemas/`` (``python -m mec_common.rnis --export docs/schemas``) and the
adapter's output is tested against it.

Units: bytes, PRBs, milliseconds for RLC delays, bits/s for capacities, Unix nanoseconds for
times. ``None`` means "the RAN source did not report it" (old FlexRAN builds, a UE not yet
scheduled): a consumer must treat it as unknown, never as zero.

Routing keys (dots separate words; ``-`` is an unknown part)::

    rnis.v1.meas.<cell>.<imsi>.<ipv4>                       one per UE per poll
    rnis.v1.event.<attach|detach|cell_change>.<cell>.<imsi>.<ipv4>

``<cell>`` is ``<bs_id>-<phyCellId>`` (``10000-0``); dots of the IPv4 address become ``_``.
"""

from __future__ import annotations

import argparse
import json
from ipaddress import IPv4Address
from pathlib import Path
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


class RnisMeasurement(BaseModel):
    """Radio state of one UE in one cell at one poll (``rnis.v1.meas.*``).

    MELD uses ``dl_tbs_bytes`` (D_TBS), ``rlc_queue_bytes`` (S_TxQueue), ``harq_processes``
    (N_HARQ), ``best_cqi_tbs_bytes`` / ``cell_best_cqi_tbs_bytes`` (for Q_th) and
    ``source_time_ns``/``observed_ns`` (staleness). RAPID uses ``dl_prbs`` (Pa_i),
    ``cell_prbs`` (N_PRB), ``cell_allocated_prbs`` (ΣPa), ``dl_mcs`` (MCS_i), ``cell_ues`` (M)
    and ``rapid_capacity_bps`` (C_i). The path manager uses the per-cell ``dl_tbs_bytes``,
    ``wb_cqi`` and ``cqi_capacity_bps`` of each of a UE's cells (paths).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="message schema version")
    cell: str = Field(..., description="cell key <bs_id>-<phyCellId>, e.g. 10000-0")
    bs_id: int = Field(..., ge=0, description="FlexRAN bs_id (eNB id; agent_id on old builds)")
    phy_cell_id: int | None = Field(None, ge=0, description="physical cell id")
    rnti: int = Field(..., ge=0, le=65535, description="C-RNTI of the UE in this cell")
    imsi: str | None = Field(None, description="IMSI (from eNB_config UE.ueConfig[].imsi)")
    ue_ipv4: IPv4Address | None = Field(None, description="UE IPv4 address (mapping source)")
    wb_cqi: int | None = Field(None, ge=0, le=15, description="wideband DL CQI (P10 CSI)")
    dl_mcs: int | None = Field(None, ge=0, le=31, description="DL MCS of the last TB (mcs1Dl)")
    dl_tbs_bytes: int | None = Field(None, ge=0, description="DL TBS of the last TTI (tbsDl), B")
    dl_prbs: int | None = Field(None, ge=0, description="DL PRBs allocated last TTI (Pa_i)")
    cell_prbs: int | None = Field(None, ge=0, description="cell DL bandwidth in PRBs (N_PRB)")
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
        None, ge=0, description="FlexRAN sfn_sf of the report: frame << 4 | subframe"
    )
    frame: int | None = Field(None, ge=0, le=1023, description="system frame number")
    subframe: int | None = Field(None, ge=0, le=9, description="subframe")
    source_time_ns: int | None = Field(
        None, ge=0, description="time the RAN source stamped the report (Unix ns)"
    )
    observed_ns: int = Field(..., ge=0, description="adapter wall clock at the poll (Unix ns)")
    tti_us: int = Field(1000, gt=0, description="TTI length (µs); 1000 for LTE")
    best_cqi_tbs_bytes: int | None = Field(
        None, ge=0, description="TBS at CQI 15 (OAI CQI→MCS map) on dl_prbs PRBs, bytes"
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
    rapid_prbs: int | None = Field(
        None, ge=0, description="RAPID expected PRBs Pe_i = Pa_i + N_PRB - ΣPa"
    )
    rapid_capacity_bps: int | None = Field(
        None, ge=0, description="RAPID C_i = TBS(Pe_i, MCS_i) / TTI (bits/s)"
    )
    cqi_capacity_bps: int | None = Field(
        None, ge=0, description="TBS(MCS(wb_cqi), cell_prbs) / TTI: the cell's rate for this UE"
    )

    def routing_key(self) -> str:
        return meas_routing_key(self.cell, self.imsi, self.ue_ipv4)


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


def bind_all(kind: Literal["meas", "event"] | None = None) -> str:
    return f"{PREFIX}.{kind}.#" if kind else f"{PREFIX}.#"


def cell_key(bs_id: int, phy_cell_id: int | None) -> str:
    return f"{bs_id}-{UNKNOWN if phy_cell_id is None else phy_cell_id}"


def json_schemas() -> dict[str, dict[str, object]]:
    """File name → JSON Schema of each message type."""
    return {
        f"rnis-measurement.v{SCHEMA_VERSION}.json": RnisMeasurement.model_json_schema(),
        f"rnis-event.v{SCHEMA_VERSION}.json": RnisEvent.model_json_schema(),
    }


def export_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in json_schemas().items():
        path = directory / name
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="Export the RNIS feed's JSON Schemas.")
    parser.add_argument("--export", type=Path, required=True, metavar="DIR")
    for path in export_schemas(parser.parse_args().export):
        print(path)


if __name__ == "__main__":
    main()
