"""The PEP backlog feed on AMQP: what the PEP holds for each UE, a few times per 10 ms.

The path manager's reactive trigger watches how much the PEP holds for a UE. Polling REST
for that would cost an HTTP round trip per UE per period; instead the PEP publishes one
small ``PepBacklog`` per UE per period on a topic exchange (default ``pep``)::

    routing key  pep.v1.backlog.<ue ipv4 with _ for .>      e.g. pep.v1.backlog.10_30_1_1
    headers      schema: 2

Only UEs with something buffered are sampled, plus one final message with a zero backlog
when a UE's backlog has drained, so consumers see the drop. Units: bytes, Unix ns.
"""

from __future__ import annotations

from ipaddress import IPv4Address
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION: Literal[2] = 2
"""Value of the ``schema`` AMQP header and of ``schema`` in every body."""

EXCHANGE = "pep"
"""Default exchange (topic); ``PEP_BACKLOG_EXCHANGE`` / ``PM_PEP_EXCHANGE`` may change it."""

PREFIX = "pep.v1.backlog"


class PepBacklog(BaseModel):
    """One UE's backlog at the PEP at one sample (``pep.v1.backlog.<ue>``)."""

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    schema_version: Literal[2] = Field(
        SCHEMA_VERSION, alias="schema", description="message schema version"
    )
    ue: IPv4Address = Field(..., description="the UE's IPv4 address")
    ts_ns: int = Field(..., ge=0, description="PEP wall clock at the sample (Unix ns)")
    backlog_bytes: int = Field(
        ..., ge=0, description="held toward the UE: server-leg queue + pipe + UE-leg send queue"
    )
    unsent_bytes: int = Field(..., ge=0, description="the part not yet sent on the UE leg")
    received_bytes: int = Field(
        ...,
        ge=0,
        description="taken from servers for this UE since the PEP started, over all its "
        "flows (cumulative: its growth is the arrival rate)",
    )
    flows: int = Field(..., ge=0, description="flows holding bytes toward the UE")

    def routing_key(self) -> str:
        return backlog_routing_key(self.ue)

    def to_json(self) -> bytes:
        """The body as the wire has it (``schema``, not ``schema_version``)."""
        return self.model_dump_json(by_alias=True).encode()


def backlog_routing_key(ue: IPv4Address | str) -> str:
    """The key of one UE's messages, which is also the binding for them."""
    return f"{PREFIX}.{str(ue).replace('.', '_')}"


def json_schemas() -> dict[str, dict[str, object]]:
    """File name → JSON Schema of the message (as on the wire: by alias)."""
    return {f"pep-backlog.v{SCHEMA_VERSION}.json": PepBacklog.model_json_schema(by_alias=True)}
