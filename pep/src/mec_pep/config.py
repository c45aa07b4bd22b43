"""PEP settings (environment variables with the ``PEP_`` prefix)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import NoDecode, SettingsConfigDict

from mec_common.bus.backlog import EXCHANGE as BACKLOG_EXCHANGE
from mec_common.config import CommaList, Port, ServiceSettings, split_commas

MiB = 1024 * 1024

# Socket buffers. The research PEP forced 64 MiB per socket (128 MiB effective: the
# kernel doubles it) on all four buffers of a flow, for one flow at 3 Gbit/s on a 101 ms
# path; its buffer sweep plateaued from ~85 MB, about 2.25x that path's BDP (000 §1.6,
# §3.4). A MEC PEP serves many flows of UEs at up to ~1 Gbit/s over WAN RTTs up to
# ~100 ms: BDP <= 12.5 MB, x 2.25 = ~28 MB. So: 16 MiB forced = 32 MiB effective per
# buffer, 128 MiB per flow at most instead of 512 MiB, which keeps a few busy flows from
# pushing the host into TCP memory pressure (net.ipv4.tcp_mem) and measured as fast as
# or faster than 64 MiB in the relay benchmark (docs/results.md). The research value is
# one setting away, and TLV clients can ask for more per flow (BUFFER_SIZE).
DEFAULT_SOCKET_BUFFER = 16 * MiB

Networks = Annotated[
    list[ipaddress.IPv4Network | ipaddress.IPv6Network], NoDecode, BeforeValidator(split_commas)
]


class PepSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PEP_", extra="ignore")

    http_port: Port = Field(8102, description="port of the REST API")
    public_url: str | None = Field(
        None,
        description="base URL other MEC apps reach this API at (registered in Mp1); "
        "default http://<fqdn>:<http_port>",
    )

    # Listeners: a port of 0/unset turns a mode off.
    listen_host: str = Field("0.0.0.0", description="address the explicit modes listen on")
    listen_host6: str | None = Field(
        "::",
        description="IPv6 address every mode also listens on (the transparent one on ::); "
        "unset = IPv4 only. Where the namespace has no IPv6 the PEP logs it and runs IPv4 only",
    )
    socks5_port: Port | None = Field(None, description="SOCKS5 (no-auth CONNECT) port; unset = off")
    tlv_port: Port | None = Field(
        None, description="TFO opt-in TLV port (the research PEP used 8181); unset = off"
    )
    transparent_port: Port | None = Field(
        None, description="TPROXY listener port (transparent mode); unset = off"
    )

    # Access control: deny by default (no open relay).
    allowed_clients: Networks = Field(
        default_factory=list,
        description="client (UE) networks allowed to use the PEP; empty = nobody",
    )
    allowed_destinations: Networks = Field(
        default_factory=list,
        description="server networks the PEP may connect to (IPv4 and IPv6); empty = none. "
        "127.0.0.0/8 and ::1 need an explicit loopback entry even when 0.0.0.0/0 or ::/0 is "
        "listed",
    )

    # Transparent mode (nftables TPROXY in the PEP's network namespace).
    tproxy_install_rules: bool = Field(
        True,
        description="install (and remove at exit) the nftables TPROXY rules; false when the "
        "MEC platform installs them from the PEP app's traffic rules",
    )
    tproxy_interfaces: CommaList = Field(
        default_factory=list, description="intercept only on these input interfaces; empty = any"
    )
    tproxy_ports: Annotated[list[int], NoDecode, BeforeValidator(split_commas)] = Field(
        default_factory=list, description="intercept only these destination ports; empty = all"
    )
    tproxy_nft_table: str = Field(
        "mts_pep", pattern=r"^[A-Za-z0-9_]{1,32}$", description="nftables table the PEP owns"
    )
    tproxy_mark: int = Field(0x50, ge=1, le=0xFFFFFFFF, description="fwmark for TPROXY routing")
    tproxy_table: int = Field(
        150, ge=1, le=0xFFFFFFFF - 1, description="policy routing table for TPROXY"
    )
    keep_ue_source: bool = Field(
        False, description="transparent mode: use the UE's address as source on the WAN leg"
    )

    # Buffers, per leg and direction (bytes; 0 = leave the kernel's autotuning on).
    ran_rcvbuf: int = Field(DEFAULT_SOCKET_BUFFER, ge=0, description="RAN-leg SO_RCVBUF")
    ran_sndbuf: int = Field(DEFAULT_SOCKET_BUFFER, ge=0, description="RAN-leg SO_SNDBUF")
    wan_rcvbuf: int = Field(DEFAULT_SOCKET_BUFFER, ge=0, description="WAN-leg SO_RCVBUF")
    wan_sndbuf: int = Field(DEFAULT_SOCKET_BUFFER, ge=0, description="WAN-leg SO_SNDBUF")
    ran_mptcp: bool = Field(
        False,
        description="accept UE connections with MPTCP (IPPROTO_MPTCP listeners): a "
        "multi-homed UE adds one subflow per cell and a path manager chooses which carry "
        "data; a UE without MPTCP gets plain TCP (the kernel falls back)",
    )
    ran_congestion_control: str | None = Field(
        None,
        pattern=r"^[a-z0-9_]{1,15}$",
        description="TCP congestion control of the RAN leg (e.g. cubic); unset = the "
        "namespace default. MELD/RAPID set theirs per flow",
    )
    wan_congestion_control: str | None = Field(
        None,
        pattern=r"^[a-z0-9_]{1,15}$",
        description="TCP congestion control of the WAN leg; unset = the namespace default",
    )
    force_buffers: bool = Field(
        True, description="use SO_*BUFFORCE (needs CAP_NET_ADMIN) to exceed net.core.*mem_max"
    )
    relay_method: Literal["splice", "copy"] = Field(
        "splice",
        description="splice: socket → pipe → socket in the kernel (the compiled core: once "
        "a flow has relayed 64 KiB); copy: through a user-space buffer (see docs/results.md "
        "for which is faster where)",
    )
    pipe_size: int = Field(
        1 * MiB,
        ge=4096,
        description="splice pipe size (F_SETPIPE_SZ), or copy buffer size, per busy direction",
    )
    tlv_max_buffer: int = Field(
        256 * MiB, ge=0, description="largest BUFFER_SIZE a TLV client may request (bytes)"
    )

    ran_aware: bool = Field(
        True, description="load the MELD/RAPID extension (mec_pep.ran_aware) if installed"
    )

    relay_core: Literal["auto", "python", "uring"] = Field(
        "auto",
        description="auto: the compiled io_uring relay core (pep/core) where it can run (it "
        "carries the settings, build/lib/libmec_pep_core.so loads, io_uring and pidfd_getfd "
        "are allowed), else the Python relay; which one runs and why is logged at start and "
        "shown in /pep/v1/stats. python: the relay threads of mec_pep.relay. uring: the core, "
        "and the PEP refuses to start where it cannot run (docs/pep.md)",
    )

    # Relay threads: each has its own descriptor table (RLIMIT_NOFILE counts per table).
    relay_threads: int = Field(
        2, ge=1, le=64, description="relay threads (each holds up to RLIMIT_NOFILE/2 flows)"
    )
    relay_cpu_affinity: bool = Field(
        False,
        description="pin relay thread i to the i-th CPU the PEP may run on, and give each new "
        "connection to the relay thread of the CPU its SYN arrived on (SO_REUSEPORT selector); "
        "only when there are no more relay threads than those CPUs",
    )

    # Limits and timeouts.
    max_flows: int = Field(20000, ge=1, description="flows at once (all clients)")
    max_flows_per_client: int = Field(4096, ge=1, description="flows at once per client address")
    handshake_timeout: float = Field(
        10.0, gt=0, description="seconds for a SOCKS5/TLV header and for the WAN connect"
    )
    idle_timeout: float = Field(
        3600.0, gt=0, description="close a flow with no data either way for this long (s)"
    )
    half_open_timeout: float = Field(
        300.0, gt=0, description="close a half-closed flow idle for this long (s)"
    )
    tfo_queue: int = Field(
        64, ge=0, description="TCP Fast Open queue of the TLV listener; 0 = no TFO"
    )
    tfo_no_cookie: bool = Field(
        False,
        description="accept SYN data without a TFO cookie (0-RTT from the first connection; "
        "gives up TFO's protection against spoofed SYN floods)",
    )
    tfo_sysctl: bool = Field(
        True,
        description="set the server bit of net.ipv4.tcp_fastopen in the PEP's network "
        "namespace when the TLV mode is on (TFO is refused without it)",
    )

    # Backlog feed for the path manager.
    backlog_interval_ms: int = Field(
        50, ge=0, description="publish per-UE backlog toward the UE every N ms; 0 = off"
    )
    backlog_exchange: str = Field(
        BACKLOG_EXCHANGE, description="AMQP topic exchange of the backlog feed"
    )
    flowrtt_exchange: str = Field(
        "",
        description="AMQP topic exchange of the flow-RTT observer's feed (flowrtt); the flows' "
        "legs then show the observer's RTT; empty = not consumed",
    )
