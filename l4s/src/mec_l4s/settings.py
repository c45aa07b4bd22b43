"""The flow-RTT observer service's settings: ``FLOWRTT_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from mec_common.bus.flowrtt import EXCHANGE
from mec_common.config import CommaList, Port, ServiceSettings
from mec_l4s.observer import DELAY_CUTOFF_MS, MIN_GAP_PCT

REPO = Path(__file__).resolve().parents[3]


class FlowRttSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="FLOWRTT_", extra="ignore")

    http_port: Port = Field(8106, description="port of the REST API")
    interfaces: CommaList = Field(
        default_factory=list,
        description="interfaces to observe (comma-separated; packets arriving on them); "
        "empty: the API runs and /healthz says the observer is not attached",
    )
    netns: str | None = Field(
        None, description="network namespace of those interfaces (unset: the service's own)"
    )
    bpf_object: Path = Field(
        REPO / "build/bpf/efm_observer.bpf.o", description="the observer's BPF object"
    )
    instance: str = Field(
        "flowrtt", description="name of its pin directory under /sys/fs/bpf (one per instance)"
    )
    delay_cutoff_ms: float = Field(
        DELAY_CUTOFF_MS, gt=0, description="delay samples further apart are discarded (Spindump)"
    )
    min_gap_pct: int = Field(
        MIN_GAP_PCT,
        ge=0,
        le=100,
        description="filtered mode: an edge sooner than this % of the flow's RTT is set aside",
    )
    max_flows: int = Field(4096, ge=1, description="flows kept by the service (LRU beyond)")
    poll_ms: int = Field(50, ge=1, description="how often the ring buffer of samples is read")
    amqp_exchange: str = Field(
        EXCHANGE, description="topic exchange of the per-flow RTT feed (on FLOWRTT_AMQP_URL)"
    )
    amqp_period_ms: int = Field(
        200,
        ge=0,
        description="publish each flow with new samples every N ms (its new samples listed); "
        "0 = no feed",
    )
