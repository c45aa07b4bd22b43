"""REST models of the PEP API (they document the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mec_common.flow_rtt_view import ObservedRtt


class TcpInfo(BaseModel):
    """A leg's ``TCP_INFO`` (times in µs, rates in bytes/s, windows in bytes)."""

    state: str
    ca_state: str = Field(description="congestion avoidance state: open, disorder, cwr, ...")
    congestion_control: str
    fast_open: bool = Field(description="the SYN carried data that was accepted (TFO)")
    rtt_us: int
    rttvar_us: int
    min_rtt_us: int
    rto_us: int
    snd_cwnd: int = Field(description="congestion window, segments")
    snd_ssthresh: int
    snd_mss: int
    unacked: int
    lost: int
    retrans: int = Field(description="segments being retransmitted now")
    total_retrans: int = Field(description="segments retransmitted over the connection")
    pacing_rate: int
    delivery_rate: int
    bytes_acked: int
    bytes_received: int
    bytes_sent: int
    bytes_retrans: int
    notsent_bytes: int
    snd_wnd: int
    rcv_wnd: int
    busy_time_us: int
    rwnd_limited_us: int
    sndbuf_limited_us: int


class LegState(BaseModel):
    local: str | None
    peer: str | None
    tcp: TcpInfo | None = None
    observed_rtt: ObservedRtt | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="this connection's RTT as the MEC host's flow-RTT observer measured it "
        "passively (spin/delay bit; PEP_FLOWRTT_EXCHANGE); absent when not known",
    )


class TowardUe(BaseModel):
    wan_receive_queue: int = Field(description="received from the server, not relayed yet")
    pipe: int = Field(description="in the splice pipe")
    ran_send_queue: int = Field(description="in the UE leg's send queue (unsent + unacked)")
    ran_send_unsent: int = Field(description="the part of ran_send_queue not sent yet")
    total: int = Field(description="wan_receive_queue + pipe + ran_send_queue")


class TowardServer(BaseModel):
    ran_receive_queue: int
    pipe: int
    wan_send_queue: int
    wan_send_unsent: int
    total: int


class Buffered(BaseModel):
    """Bytes held in the PEP, per direction."""

    toward_ue: TowardUe
    toward_server: TowardServer


class FlowState(BaseModel):
    id: int
    mode: str = Field(description="transparent, socks5 or tlv")
    ue: str = Field(description="the UE (client) address")
    stage: str = Field(
        description="socks_greeting, socks_request, tlv_header, connecting, relaying"
    )
    destination: str | None
    created_at: float = Field(description="Unix time")
    established_at: float | None
    age_s: float
    idle_s: float
    bytes_to_ue: int
    bytes_from_ue: int
    buffered: Buffered
    ran: LegState = Field(description="PEP ↔ UE")
    wan: LegState | None = Field(description="PEP ↔ server (absent before the connect)")
    ext: dict[str, Any] = Field(description="per-flow state of extensions (MELD/RAPID)")


class FlowList(BaseModel):
    count: int = Field(description="flows matching the filter (before limit/offset)")
    flows: list[FlowState]


class UeState(BaseModel):
    ue: str
    flows: int
    bytes_to_ue: int
    bytes_from_ue: int
    buffered_toward_ue: int
    unsent_toward_ue: int
    buffered_toward_server: int


class UeList(BaseModel):
    ues: list[UeState]


class Stats(BaseModel):
    flows: int
    flows_by_mode: dict[str, int]
    accepted: int
    established: int
    closed: int = Field(description="flows that ended with both directions finished")
    refused: dict[str, int] = Field(description="connections refused, by reason")
    aborted: dict[str, int] = Field(description="flows reset, by reason")
    bytes_to_ue: int
    bytes_from_ue: int
    pipes_in_use: int
    relay: Literal["python", "uring"] = Field(
        description="the relay that runs: the Python relay or the compiled io_uring core"
    )
    relay_reason: str = Field(
        description="why that relay (PEP_RELAY_CORE and, for auto, what the core could not "
        "carry or that io_uring was refused; for the core, why its relay threads share the "
        "process's descriptor table)"
    )
    relay_threads: int
    descriptor_limit: int = Field(
        description="RLIMIT_NOFILE per relay thread (per process if the tables are shared)"
    )
    private_descriptor_tables: bool = Field(
        description="each relay thread has its own descriptor table (false: unshare, or for "
        "the core pidfd_getfd, refused, e.g. by a seccomp profile; all flows share one "
        "RLIMIT_NOFILE)"
    )
    listeners: dict[str, str]
    tfo_server_enabled: bool


class BufferSizes(BaseModel):
    rcvbuf: int
    sndbuf: int


class ConfigView(BaseModel):
    listeners: dict[str, str] = Field(description="mode → listening address")
    socks5_port: int | None
    tlv_port: int | None
    transparent_port: int | None
    keep_ue_source: bool
    tproxy_rules_installed: bool
    allowed_clients: list[str]
    allowed_destinations: list[str]
    ran_rcvbuf: int
    ran_sndbuf: int
    wan_rcvbuf: int
    wan_sndbuf: int
    force_buffers: bool
    effective_ran_buffers: BufferSizes | None = Field(
        description="what the kernel granted on the listeners (it doubles the request)"
    )
    pipe_size: int
    tlv_max_buffer: int
    max_flows: int
    max_flows_per_client: int
    handshake_timeout: float
    idle_timeout: float
    half_open_timeout: float
    relay_threads: int
    backlog_interval_ms: int


class ConfigPatch(BaseModel):
    """Settings that can change at run time. New flows use them; existing flows keep theirs.

    A port of ``null`` turns that explicit mode off.
    """

    model_config = ConfigDict(extra="forbid")

    socks5_port: int | None = None
    tlv_port: int | None = None
    allowed_clients: list[str] | None = None
    allowed_destinations: list[str] | None = None
    ran_rcvbuf: int | None = None
    ran_sndbuf: int | None = None
    wan_rcvbuf: int | None = None
    wan_sndbuf: int | None = None
    force_buffers: bool | None = None
    tlv_max_buffer: int | None = None
    max_flows: int | None = None
    max_flows_per_client: int | None = None
    handshake_timeout: float | None = None
    idle_timeout: float | None = None
    half_open_timeout: float | None = None
