"""The flow-RTT feed on AMQP: the passive RTT of each flow the MEC host observes.

The flow-RTT service (``flowrtt serve``, ``l4s/``) reads the spin and delay bits of TCP at
the MEC host and publishes, every period (``FLOWRTT_AMQP_PERIOD_MS``, 200 ms by default),
one ``FlowRttSummary`` per flow that had new samples in it, on a topic exchange (default
``flowrtt``)::

    routing key  flowrtt.v1.flow.<client ipv4>.<server ipv4>   dots of an address become _
    headers      schema: 1

Why per flow per period and not one message per sample: the observer makes up to 8 samples
per round trip per flow (end to end and two half RTTs, per direction, in two rule sets), so
a 20 ms flow would be 400 messages/s and a thousand UEs' flows 400,000/s, more than one
broker carries; per period the rate is bounded by the flows (5 msg/s each), not their RTT.
No sample is lost: each message lists the end-to-end samples since the flow's previous one.

The client is the endpoint that sent the SYN. Consumers bind with ``bind_address`` (a UE's
flows whichever side it is) or ``bind_all``, and match flows with ``mec_common.flow_rtt_view``.
Units: milliseconds, Unix nanoseconds.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
"""Value of the ``schema`` AMQP header and of ``schema`` in every body."""

EXCHANGE = "flowrtt"
"""Default exchange (topic, durable); ``FLOWRTT_AMQP_EXCHANGE`` may change it."""

PREFIX = f"flowrtt.v{SCHEMA_VERSION}.flow"
MAX_NEW_SAMPLES = 512
"""At most this many new samples per rule set in one message (the oldest beyond are dropped)."""


class Rtt(BaseModel):
    """One measurement of one flow: the latest sample and percentiles of recent ones."""

    samples: int = Field(description="samples since the flow was first measured")
    current_ms: float = Field(description="the latest sample")
    p50_ms: float = Field(description="median of the latest samples (at most 512)")
    p90_ms: float
    p99_ms: float


class RulesRtt(BaseModel):
    """A flow's RTT under one rule set of the observer (raw or filtered)."""

    e2e: Rtt | None = Field(description="end-to-end RTT; null until measured")
    client_side: Rtt | None = Field(
        description="half RTT between the observer and the client (and back)"
    )
    server_side: Rtt | None = Field(
        description="half RTT between the observer and the server (and back)"
    )


class FlowRttSummary(BaseModel):
    """One flow's RTT at the end of a period (``flowrtt.v1.flow.<client>.<server>``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    schema_version: Literal[1] = Field(
        SCHEMA_VERSION, alias="schema", description="message schema version"
    )
    flow_id: str = Field(description="<client ip>:<port>-<server ip>:<port>")
    client: IPv4Address = Field(description="the endpoint that sent the SYN")
    client_port: int = Field(ge=0, le=65535)
    server: IPv4Address
    server_port: int = Field(ge=0, le=65535)
    method: Literal["spin", "delay"] = Field(description="the bit the endpoints agreed on")
    ts_ns: int = Field(ge=0, description="the observer's wall clock at publishing (Unix ns)")
    raw: RulesRtt = Field(description="Spindump's rules, as research 001 measured")
    filtered: RulesRtt = Field(description="with the reordering guard and minimum-gap rule")
    new_raw_e2e_ms: list[float] = Field(
        default_factory=list,
        description="raw end-to-end samples since the flow's previous message, oldest first",
    )
    new_filtered_e2e_ms: list[float] = Field(
        default_factory=list,
        description="filtered end-to-end samples since the flow's previous message",
    )

    def routing_key(self) -> str:
        return flow_routing_key(self.client, self.server)

    def to_json(self) -> bytes:
        """The body as the wire has it (``schema``, not ``schema_version``)."""
        return self.model_dump_json(by_alias=True).encode()


def _word(address: IPv4Address | str) -> str:
    return str(address).replace(".", "_")


def flow_routing_key(client: IPv4Address | str, server: IPv4Address | str) -> str:
    return f"{PREFIX}.{_word(client)}.{_word(server)}"


def bind_address(address: IPv4Address | str) -> list[str]:
    """The two bindings of every flow of one endpoint (a UE), client or server."""
    return [f"{PREFIX}.{_word(address)}.*", f"{PREFIX}.*.{_word(address)}"]


def bind_all() -> str:
    return f"{PREFIX}.#"


def json_schemas() -> dict[str, dict[str, object]]:
    """File name → JSON Schema of the message (as on the wire: by alias)."""
    return {
        f"flowrtt-summary.v{SCHEMA_VERSION}.json": FlowRttSummary.model_json_schema(by_alias=True)
    }
