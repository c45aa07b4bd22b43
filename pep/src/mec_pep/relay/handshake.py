"""The explicit modes' handshakes as state machines that yield the flow's destination.

No sockets here: the relay feeds what the client sent (``receive``), sends back what the
machine answers (``advance``) and, once the destination is known, connects the WAN leg.
What the client sent after its handshake (``inbox``) goes to the server first.

- SOCKS5 (RFC 1928, ``mec_pep.socks5``): greeting, then a CONNECT request; the client may
  send both at once. Its final reply waits for the WAN connect (the relay sends it).
- TLV (the research PEP's opt-in, ``mec_pep.tlv``): one header, no reply.

A refused handshake raises ``HandshakeError`` with the bytes to answer (if any) and
whether the connection is to be reset (an RST) or closed after the answer.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from mec_pep import socks5, tlv
from mec_pep.flows import Address, ProxyMode
from mec_pep.relay.conn import Stage

HANDSHAKE_LIMIT = 512  # bytes a SOCKS5 or TLV header may take; more is an error


class HandshakeError(Exception):
    """The client's handshake is invalid or asks for what the PEP does not do."""

    def __init__(self, message: str, answer: bytes = b"", *, reset: bool = True) -> None:
        super().__init__(message)
        self.answer = answer  # sent to the client before its connection ends
        self.reset = reset  # end with an RST (else a FIN after the answer)


@dataclass(frozen=True)
class Destination:
    address: Address
    buffer_size: int | None = None  # TLV BUFFER_SIZE: the client's buffer size for this flow


class Handshake(ABC):
    """Bytes from the client until the destination is known (SOCKS5 or TLV below)."""

    first_stage: ClassVar[Stage]

    def __init__(self) -> None:
        self.inbox = b""  # received, not consumed yet; after the handshake the client's data
        self.stage = self.first_stage
        self._answer = b""  # to send before anything else (also when refused)

    @property
    def room(self) -> int:
        """Bytes to read at most now: one beyond the limit tells a header that is too long."""
        return HANDSHAKE_LIMIT + 1 - len(self.inbox)

    def receive(self, data: bytes) -> None:
        self.inbox += data

    def advance(self) -> tuple[bytes, Destination | None]:
        """(bytes to answer now, the destination once the handshake is complete).

        Raises ``HandshakeError``, whose answer includes what was due before the error.
        """
        try:
            destination = self._parse()
        except HandshakeError as exc:
            exc.answer = self._answer + exc.answer
            raise
        answer, self._answer = self._answer, b""
        return answer, destination

    @abstractmethod
    def _parse(self) -> Destination | None:
        """The destination once the handshake is complete, None while it needs more bytes."""


class SocksHandshake(Handshake):
    first_stage = Stage.SOCKS_GREETING

    def _parse(self) -> Destination | None:
        try:
            return self._parse_socks()
        except socks5.Socks5Error as exc:
            if exc.reply is None:
                raise HandshakeError(str(exc)) from exc
            raise HandshakeError(str(exc), socks5.reply(exc.reply), reset=False) from exc

    def _parse_socks(self) -> Destination | None:
        if self.stage is Stage.SOCKS_GREETING:
            greeting = socks5.parse_greeting(self.inbox)
            if greeting is None:
                return None
            if socks5.NO_AUTH not in greeting.methods:
                raise HandshakeError(
                    "client offers no 'no authentication' method",
                    socks5.method_reply(socks5.NO_ACCEPTABLE_METHOD),
                )
            self._answer += socks5.method_reply(socks5.NO_AUTH)
            self.inbox = self.inbox[greeting.length :]
            self.stage = Stage.SOCKS_REQUEST
        request = socks5.parse_request(self.inbox)
        if request is None:
            if len(self.inbox) > HANDSHAKE_LIMIT:
                raise socks5.Socks5Error("request too long", socks5.GENERAL_FAILURE)
            return None
        self.inbox = self.inbox[request.length :]
        return Destination(request.destination)


class TlvHandshake(Handshake):
    first_stage = Stage.TLV_HEADER

    def _parse(self) -> Destination | None:
        try:
            request = tlv.parse(self.inbox)
        except tlv.TlvError as exc:
            raise HandshakeError(str(exc)) from exc
        if request is None:
            if len(self.inbox) > HANDSHAKE_LIMIT:
                raise HandshakeError("header too long")
            return None
        self.inbox = self.inbox[request.length :]
        return Destination(request.destination, request.buffer_size)


HANDSHAKES: dict[ProxyMode, type[Handshake]] = {
    ProxyMode.SOCKS5: SocksHandshake,
    ProxyMode.TLV: TlvHandshake,
}
