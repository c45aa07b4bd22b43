"""The explicit modes' handshakes as state machines (``mec_pep.relay.handshake``), no sockets."""

from __future__ import annotations

import pytest

from mec_pep import socks5
from mec_pep.relay.conn import Stage
from mec_pep.relay.handshake import (
    HANDSHAKE_LIMIT,
    Destination,
    HandshakeError,
    SocksHandshake,
    TlvHandshake,
)

GREETING = b"\x05\x01\x00"
CONNECT = b"\x05\x01\x00\x01" + bytes((10, 201, 2, 2)) + (5201).to_bytes(2, "big")
TLV = bytes.fromhex("0101EFBE0A0614510AC90202")


def test_socks_in_pieces_answers_the_greeting_then_yields_the_destination() -> None:
    h = SocksHandshake()
    h.receive(GREETING[:2])
    assert h.advance() == (b"", None) and h.stage is Stage.SOCKS_GREETING
    h.receive(GREETING[2:] + CONNECT[:5])
    assert h.advance() == (b"\x05\x00", None) and h.stage is Stage.SOCKS_REQUEST
    h.receive(CONNECT[5:] + b"data")
    assert h.advance() == (b"", Destination(("10.201.2.2", 5201)))
    assert h.inbox == b"data"  # the client's first bytes, relayed once connected


def test_socks_pipelined_answers_and_yields_at_once() -> None:
    h = SocksHandshake()
    h.receive(GREETING + CONNECT)
    assert h.advance() == (b"\x05\x00", Destination(("10.201.2.2", 5201)))
    assert h.inbox == b""


def test_socks_refusals_carry_what_the_client_is_owed() -> None:
    h = SocksHandshake()
    h.receive(b"\x05\x01\x02")  # username/password only
    with pytest.raises(HandshakeError) as no_method:
        h.advance()
    assert no_method.value.answer == b"\x05\xff" and no_method.value.reset
    h = SocksHandshake()
    h.receive(GREETING + b"\x05\x02\x00\x01" + bytes(6))  # BIND
    with pytest.raises(HandshakeError) as bind:
        h.advance()
    # The greeting's answer first, then the reply code; closed without a reset.
    assert bind.value.answer == b"\x05\x00" + socks5.reply(socks5.COMMAND_NOT_SUPPORTED)
    assert not bind.value.reset


def test_tlv_yields_destination_and_buffer_size() -> None:
    h = TlvHandshake()
    assert h.stage is Stage.TLV_HEADER
    h.receive(TLV[:7])
    assert h.advance() == (b"", None)
    h.receive(TLV[7:] + b"GET")
    assert h.advance() == (b"", Destination(("10.201.2.2", 5201)))
    assert h.inbox == b"GET"
    sized = TlvHandshake()
    sized.receive(bytes.fromhex("0102EFBE0A0614510AC902020B06000000001000"))
    assert sized.advance()[1] == Destination(("10.201.2.2", 5201), 0x100000)


def test_a_header_past_the_limit_is_refused_with_a_reset() -> None:
    h = TlvHandshake()
    h.receive(bytes.fromhex("0120EFBE"))  # 32 options announced, never complete
    h.receive(bytes(HANDSHAKE_LIMIT))
    assert h.room <= 0
    with pytest.raises(HandshakeError) as exc:
        h.advance()
    assert exc.value.reset and exc.value.answer == b""
