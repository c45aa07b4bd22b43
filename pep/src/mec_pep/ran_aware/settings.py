"""Settings of MELD/RAPID (environment variables ``PEP_MELD_*``, ``PEP_RAPID_*``, ``PEP_RNIS_*``).

They live beside the PEP's own settings (same ``PEP_`` prefix, read separately) so that
the relay and the RAN-aware part can evolve independently.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mec_common.bus.rnis import cell_routing_key
from mec_common.config import split_commas
from mec_pep.ran_aware.kernel import CcaMode

Networks = Annotated[list[ipaddress.IPv4Network], NoDecode, BeforeValidator(split_commas)]


def _routing_word(cell: str) -> str:
    cell_routing_key(cell)  # refuses what cannot be a word of a routing key
    return cell


Cells = Annotated[
    list[Annotated[str, AfterValidator(_routing_word)]], NoDecode, BeforeValidator(split_commas)
]


class RanAwareSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PEP_", extra="ignore")

    meld_mode: str = Field(
        "meld-me",
        description="global mode: off, meld-de, meld-me, meld-overflow, ignore-loss or rapid "
        "(per UE via the API)",
    )
    meld_cca: Literal["cubic", "reno"] = Field(
        "cubic", description="growth function of the RAN leg: the kernel's CUBIC or Reno"
    )
    meld_stale_ms: float = Field(
        50.0, gt=0, description="radio state older than this means 'notify' (≈6 RNIS polls of 8 ms)"
    )
    meld_harq_processes: int = Field(
        8, ge=1, le=32, description="N_HARQ when the RAN does not report it"
    )
    # No RAN we read reports its RLC buffer size (FlexRAN: the queue only); OAI's LTE RLC
    # holds 1,000,000 B per DRB (rlc_v2, add_drb_um/add_drb_am), the live capture's
    # saturated queue was ~950 kB (docs/meld-rapid.md).
    meld_rlc_buffer_bytes: int = Field(
        1_000_000,
        ge=0,
        description="RLC buffer per UE bearer, bytes, for MELD-overflow's full-buffer test; "
        "not reported by the RAN, set it per deployment (0 = unknown: MELD-overflow notifies)",
    )
    meld_rlc_full_pct: int = Field(
        90, ge=1, le=100, description="a queue at this % of the RLC buffer counts as full"
    )
    meld_pin_root: Path = Field(
        Path("/sys/fs/bpf/mts-pep"), description="bpffs directory for the pinned maps and links"
    )
    meld_instance: str | None = Field(
        None, description="instance name (pins, congestion control suffix); default: app instance"
    )
    meld_bpf_object: Path | None = Field(
        None, description="BPF object; default: build/bpf/meld.bpf.o of the source tree"
    )
    meld_loader: Path | None = Field(
        None, description="loader binary; default: build/bin/meld-loader of the source tree"
    )

    rnis_exchange: str = Field(
        "rnis", description="RNIS AMQP exchange; with a platform, found through Mp1 unless set"
    )
    rnis_amqp_url: str | None = Field(
        None,
        description="broker of the RNIS feed; with a platform, found through Mp1 (with the "
        "credentials of PEP_AMQP_URL) unless set; else PEP_AMQP_URL",
    )
    rnis_feed: Literal["ue", "cell"] = Field(
        "ue",
        description="RNIS messages to consume: one per UE (the adapter's RNIS_AMQP_PUBLISH=ue "
        "or both) or one per cell (cell or both; what a broker carries at 1 ms polling)",
    )
    # Two or more MEC-host nodes (docs/kubernetes.md#two-or-more-mec-host-nodes): each PEP
    # consumes the batches of its own node's cells only.
    rnis_cells: Cells = Field(
        default_factory=list,
        description="cell feed: the cells (<bs_id>-<phyCellId>) whose batches to consume; "
        "empty = every cell",
    )
    rnis_cells_by_node: dict[str, Cells] = Field(
        default_factory=dict,
        description='cell feed: the cells of each node, JSON {"<node>": ["<cell>", ...]}; '
        "the PEP on PEP_NODE_NAME consumes its entry (a node without one: PEP_RNIS_CELLS)",
    )
    node_name: str | None = Field(
        None, description="the node the PEP runs on (the Helm chart sets the Pod's node)"
    )
    rnis_ue_networks: Networks = Field(
        default_factory=list,
        description="bind to every UE of these networks; empty = bind to the UEs with flows",
    )
    rnis_unbind_after_s: float = Field(
        30.0, ge=0, description="keep a UE's binding this long after its last flow closed"
    )

    rapid_init_cwnd: int = Field(
        40, ge=2, description="RAN-leg cwnd (segments) of a RAPID flow before its RTT is known"
    )
    rapid_min_cwnd: int = Field(4, ge=2, description="smallest RAPID cwnd on the RAN leg")
    # Above 100 %: HARQ retransmissions stretch the RAN RTT above its minimum, and one
    # minimum BDP leaves TTIs empty (docs/results.md: 12.5 of 15.9 Mbit/s at 100 %).
    rapid_gain_pct: int = Field(
        150, ge=10, le=1000, description="RAN-leg cwnd = gain% · rate · smoothed RTT_min"
    )
    rapid_rtt_extra_us: int = Field(
        0, ge=0, description="added to the RAN RTT_min (e.g. an uplink scheduling period)"
    )
    rapid_rtt_period_ms: float = Field(
        100.0, gt=0, description="shortest period of the RAN RTT_min tracking (≥ 2 RTTs)"
    )
    rapid_slow_threshold: float = Field(
        0.8, gt=0, lt=1, description="a flow below this fraction of its expected rate is slow"
    )
    rapid_alpha: float = Field(
        0.125, ge=0, lt=1, description="EWMA weight of the previous arrival-rate estimate"
    )
    rapid_tick_ms: float = Field(5.0, gt=0, description="RAPID controller period")

    @field_validator("meld_mode")
    @classmethod
    def _known_mode(cls, value: str) -> str:
        return CcaMode.parse(value).label

    @model_validator(mode="after")
    def _cells_need_the_cell_feed(self) -> RanAwareSettings:
        if (self.rnis_cells or self.rnis_cells_by_node) and self.rnis_feed != "cell":
            raise ValueError("PEP_RNIS_CELLS and PEP_RNIS_CELLS_BY_NODE choose cell batches: "
                             "they need PEP_RNIS_FEED=cell (the per-UE feed binds the UEs "
                             "the PEP relays, whatever their cell)")  # fmt: skip
        return self

    def feed_cells(self) -> list[str]:
        """The cells whose batches this PEP consumes (empty: every cell)."""
        if self.node_name is not None and self.node_name in self.rnis_cells_by_node:
            return self.rnis_cells_by_node[self.node_name]
        return self.rnis_cells
