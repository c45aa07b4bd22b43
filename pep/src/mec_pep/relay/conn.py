"""The relay's state of one flow (``Conn``) and the stages of its life."""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING

from mec_pep.flows import Flow

if TYPE_CHECKING:
    from mec_pep.relay.handshake import Handshake
    from mec_pep.relay.loop import Relay
    from mec_pep.relay.pump import Pump


class Stage(IntEnum):
    """Where a flow is; the API shows the name in lower case."""

    SOCKS_GREETING = 1
    SOCKS_REQUEST = 2
    TLV_HEADER = 3
    CONNECTING = 4
    RELAYING = 5
    CLOSED = 6


class Conn:
    """The relay's state of one flow (the public part is its ``Flow``)."""

    __slots__ = (
        "buffer_size",
        "deadline",
        "down",
        "flow",
        "handshake",
        "inbox",
        "last_active",
        "ran_fd",
        "ran_readable",
        "relay",
        "stage",
        "up",
        "wan_fd",
    )

    def __init__(
        self, relay: Relay, flow: Flow, handshake: Handshake | None, now: float, deadline: float
    ) -> None:
        self.relay = relay
        self.flow = flow
        self.ran_fd = flow.ran.fileno()
        self.wan_fd = -1
        self.handshake = handshake  # explicit modes, until the destination is known
        self.stage = handshake.stage if handshake is not None else Stage.CONNECTING
        self.inbox = b""  # the client's bytes after its handshake, sent once connected
        self.buffer_size: int | None = None  # both legs' buffers, if the client asked (TLV)
        self.last_active = now
        self.deadline = deadline
        self.up: Pump | None = None
        self.down: Pump | None = None
        # The UE may have sent bytes the relay has not read (reported while connecting,
        # or left behind a handshake): pump toward the server once established.
        self.ran_readable = handshake is not None

    @property
    def alive(self) -> bool:
        return self.stage is not Stage.CLOSED

    def pipe_bytes(self) -> tuple[int, int]:
        """Bytes in the pipes: (toward the server, toward the UE)."""
        if self.up is not None:
            up = self.up.fill + len(self.up.pending)
        else:
            up = len(self.inbox) + (len(self.handshake.inbox) if self.handshake else 0)
        return up, self.down.fill if self.down else 0
