"""The path manager's settings: ``PM_*`` environment variables (docs/configuration.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from mec_common.bus.backlog import EXCHANGE as PEP_EXCHANGE
from mec_common.bus.rnis import EXCHANGE as RNIS_EXCHANGE
from mec_common.config import Port, ServiceSettings
from path_manager.control import ControlMode, ControlSettings
from path_manager.path_radio import RadioSettings

QueueMeasure = Literal["pep+rlc", "pep_unsent", "pep_backlog"]


class PmSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PM_", extra="ignore")

    http_port: Port = Field(8103, description="port of the REST API")
    rnis_exchange: str = Field(RNIS_EXCHANGE, description="RNIS AMQP exchange (if no Mp1)")
    rnis_feed: Literal["ue", "cell"] = Field(
        "ue",
        description="RNIS messages to consume: one per UE (the adapter's RNIS_AMQP_PUBLISH=ue "
        "or both) or one per cell (cell or both; cheaper for the broker at high poll rates)",
    )
    pep_exchange: str = Field(PEP_EXCHANGE, description="exchange of the PEP's per-UE backlog")
    flowrtt_exchange: str = Field(
        "",
        description="exchange of the flow-RTT observer's feed (flowrtt); each path then shows "
        "the observed RTT of its flows; empty = not consumed",
    )
    ues: str = Field(
        "",
        description='UEs at start, JSON: {"<ue ip>": ["<path ip>", ...]} (REST can add more)',
    )
    actuation: Literal["mptcp", "tunnel", "none"] = Field(
        "mptcp",
        description="mptcp: switch subflows; tunnel: enable/disable the multipath tunnel's "
        "paths (PM_TUNNEL_PATHS, docs/tunnel.md); none: decide and log only",
    )
    tunnel_paths: str = Field(
        "",
        description='with actuation=tunnel, JSON: {"<UE path ip>": {"api": '
        '"http://<tunnel end>:8105/tunnel/v1", "path": <id>}}',
    )
    tunnel_token: str | None = Field(None, description="bearer token of the tunnel's API")
    mptcp_netns: str | None = Field(None, description="network namespace of the PEP (MPTCP)")
    mode: ControlMode = Field(ControlMode.FPT_R, description="reactive, cdf, fpt, cdf+r or fpt+r")
    period: float = Field(0.150, description="predictive control period (s)")
    horizon: float = Field(0.200, description="prediction horizon (s)")
    q_high: float = Field(500.0, description="Q_HT (packets)")
    q_low: float = Field(250.0, description="Q_LT (packets)")
    p_high_bound: float = Field(0.99, description="ADD if P_H is below")
    p_low_bound: float = Field(0.99, description="REMOVE if P_L is above")
    reactive_guard: float = Field(0.050, description="T_R (s)")
    safety_max_paths: int = Field(5, description="remove-safety re-prediction up to this many")
    packet_bytes: int = Field(1500, description="bytes per packet (queue unit)")
    queue_measure: QueueMeasure = Field(
        "pep+rlc",
        description="the queue the control sees: pep+rlc = the PEP's unsent bytes + the UE's "
        "RLC queues in its cells (RNIS); pep_unsent = the PEP's unsent bytes only; "
        "pep_backlog = everything the PEP holds, in-flight bytes included",
    )
    los_cqi: int = Field(10, description="CQI at or above: LoS")
    nlos_cqi: int = Field(6, description="CQI at or below: NLoS")
    stale_after: float = Field(0.5, description="s without RNIS data: priors, last state")

    def control(self) -> ControlSettings:
        return ControlSettings(
            mode=self.mode, period=self.period, horizon=self.horizon, q_high=self.q_high,
            q_low=self.q_low, p_high_bound=self.p_high_bound, p_low_bound=self.p_low_bound,
            reactive_guard=self.reactive_guard, safety_max_paths=self.safety_max_paths,
        )  # fmt: skip

    def radio(self) -> RadioSettings:
        return RadioSettings(
            los_cqi=self.los_cqi, nlos_cqi=self.nlos_cqi, stale_after=self.stale_after,
            packet_bytes=self.packet_bytes,
        )  # fmt: skip
