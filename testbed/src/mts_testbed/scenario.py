"""Testbed scenarios: the YAML files in testbed/configs/ (cells, UEs, channels, delays).

A scenario says what the radio and the WAN do; `testbed up` turns it into namespaces,
links and the emulator's JSON configuration (addresses, RNTIs, IMSIs, TUN names).
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

CQI = Annotated[int, Field(ge=0, le=15)]
Probability = Annotated[float, Field(ge=0, lt=1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HarqConfig(Strict):
    processes: int = Field(8, ge=1, le=16)
    rtt_ttis: int = Field(8, ge=1)
    max_retx: int = Field(4, ge=0, le=16, description="retransmissions after the first attempt")


class RlcConfig(Strict):
    mode: Literal["um", "am"] = "um"
    am_retx_delay_ms: float = Field(20, gt=0)


class Uplink(Strict):
    """The cell's uplink MAC (per-TTI grants, HARQ, the UE's modem buffer): ran-emulator.md."""

    prb: int = Field(0, ge=0, le=275, description="uplink PRBs; 0 = the cell's")
    scheduler: Literal["", "rr", "pf"] = Field("", description="'' = the cell's")


class Cell(Strict):
    bs_id: int = Field(
        ge=1000, description="FlexRAN base station id (>= 1000: below is an agent id)"
    )
    phy_cell_id: int = 0
    rat: Literal["lte", "nr"] = "lte"
    numerology: int = Field(0, ge=0, le=3)
    prb: int = Field(25, ge=1, le=275)
    scheduler: Literal["rr", "pf"] = "rr"
    pf_window_ttis: int = Field(100, ge=1)
    harq: HarqConfig = HarqConfig()
    rlc: RlcConfig = RlcConfig()
    band: int = 7
    dl_freq_mhz: float = 2680
    ul_freq_mhz: float = 2560
    uplink: Uplink | None = Field(None, description="an uplink MAC; None: a rate per UE")


class MarkovState(Strict):
    cqi: CQI
    capacity_mbps: float = Field(0, ge=0)
    bler: Probability = 0
    mean_dwell_ms: float = Field(gt=0)


class GilbertElliott(Strict):
    """Bursty radio loss: a two-state chain stepped per TTI (mean burst 1/p_bad_good TTIs)."""

    p_good_bad: float = Field(gt=0, le=1, description="per TTI, Good -> Bad")
    p_bad_good: float = Field(gt=0, le=1, description="per TTI, Bad -> Good")
    bad_bler: Probability = 0
    bad_loss: Probability = Field(0, description="residual loss after HARQ/RLC in Bad")
    bad_cqi: CQI = Field(0, description="CQI in Bad; 0 = the model's CQI")


# (time s, CQI) or (time s, CQI, capacity Mbit/s): the capacity, when given, is what the
# cell carries from that time on (a TBS trace; 0 = the TBS table of the CQI)
TracePoint = tuple[float, int] | tuple[float, int, float]


class Channel(Strict):
    model: Literal["fixed", "trace", "markov"] = "fixed"
    cqi: CQI = 15
    bler: Probability = 0
    loss: Probability = Field(0, description="residual packet loss after HARQ/RLC")
    capacity_mbps: float = Field(0, ge=0, description="if set, replaces the TBS table")
    trace: list[TracePoint] | None = None
    trace_file: str | None = Field(
        None, description="CSV 'time_s,cqi[,capacity_mbps]', relative to the scenario"
    )
    trace_loop: bool = False
    los: MarkovState | None = None
    nlos: MarkovState | None = None
    start_nlos: bool = False
    blocked_cqi: CQI = 0
    gilbert_elliott: GilbertElliott | None = None

    @model_validator(mode="after")
    def _model_fields(self) -> Channel:
        if self.model == "trace" and not (self.trace or self.trace_file):
            raise ValueError("trace model needs trace or trace_file")
        if self.model == "markov" and not (self.los and self.nlos):
            raise ValueError("markov model needs los and nlos states")
        return self


class Queue(Strict):
    discipline: Literal["fifo", "codel", "fq_codel", "dualpi2"] = "fifo"
    limit_bytes: int = Field(1 << 20, gt=0)
    target_ms: float = Field(5, gt=0)
    interval_ms: float = Field(100, gt=0)
    flows: int = Field(1024, gt=0)
    quantum: int = Field(1400, gt=0)


class Attachment(Strict):
    """A UE's bearer on one cell: one path, with its own interface and address."""

    bs_id: int
    delay_ms: float = Field(5, ge=0, description="RAN one-way delay, downlink")
    ul_delay_ms: float = Field(5, ge=0, description="RAN one-way delay, uplink")
    ul_rate_mbps: float = Field(0, ge=0, description="uplink rate; 0 = unlimited")
    phr: int = Field(40, ge=0, le=63)
    queue: Queue = Queue()
    channel: Channel = Channel()
    # with the cell's uplink MAC
    ul_buffer_bytes: int = Field(10 << 20, ge=1500, description="the UE's modem buffer")
    ul_channel: Channel | None = Field(None, description="uplink channel; None = the downlink's")
    grant_feed: str = Field("", description="pin dir of the UE's SIGMA maps ('' = none)")


class UEGroup(Strict):
    count: int = Field(1, ge=1, le=250)
    cells: list[Attachment] = Field(min_length=1)


class Wan(Strict):
    delay_ms: float = Field(0, ge=0, description="one-way server <-> MEC delay")
    rate_mbps: float = Field(0, ge=0, description="0 = unlimited")


class Scenario(Strict):
    description: str = ""
    stats_period_ms: int = Field(1, ge=1)
    seed: int = Field(1, ge=0, description="seed of the channel models' random draws")
    wan: Wan = Wan()
    cells: list[Cell] = Field(min_length=1, max_length=16)
    ues: list[UEGroup] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        ids = [c.bs_id for c in self.cells]
        if len(set(ids)) != len(ids):
            raise ValueError("cell bs_id values must be unique")
        for group in self.ues:
            used = [a.bs_id for a in group.cells]
            if len(set(used)) != len(used):
                raise ValueError("a UE attaches to a cell once")
            for bs in used:
                if bs not in ids:
                    raise ValueError(f"UE attached to unknown cell {bs}")
            uplink = {c.bs_id for c in self.cells if c.uplink is not None}
            for att in group.cells:
                if att.bs_id not in uplink and (att.ul_channel or att.grant_feed):
                    raise ValueError("ul_channel and grant_feed need the cell's uplink MAC")
        if sum(g.count for g in self.ues) > 250:
            raise ValueError("at most 250 UEs")
        return self

    @classmethod
    def load(cls, path: Path) -> Scenario:
        raw: Any = yaml.safe_load(path.read_text())
        scenario = cls.model_validate(raw)
        scenario._inline_traces(path.parent)
        return scenario

    def _inline_traces(self, base: Path) -> None:
        for group in self.ues:
            for att in group.cells:
                for ch in (att.channel, att.ul_channel):
                    if ch is not None and ch.trace_file:
                        ch.trace = read_trace(base / ch.trace_file)
                        ch.trace_file = None


def read_trace(path: Path) -> list[TracePoint]:
    """A CQI or CQI/TBS trace: CSV rows 'time_s,cqi' or 'time_s,cqi,capacity_mbps' (a
    header row and '#' comments are allowed)."""
    points: list[TracePoint] = []
    with path.open() as f:
        for row in csv.reader(f):
            if not row or row[0].startswith("#"):
                continue
            try:
                if len(row) >= 3:
                    points.append((float(row[0]), int(row[1]), float(row[2])))
                else:
                    points.append((float(row[0]), int(row[1])))
            except (ValueError, IndexError):
                if points:
                    raise ValueError(f"{path}: bad trace row {row}") from None
    if not points:
        raise ValueError(f"{path}: empty trace")
    return points
