"""The explicit modes' handshakes as state machines (``mec_pep.relay.handshake``), no sockets;
and the compiled core's parse of them held to the same answers."""

from __future__ import annotations

import ctypes
import ipaddress
import socket
from typing import Any

import pep_support  # noqa: F401 - puts the client library on sys.path
import pep_tlv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mec_pep import socks5
from mec_pep.core import PARSE_MORE, PARSE_REFUSED, CoreHandshake, load
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


# ---- the compiled core's parse (pep/core/pep_handshake.c) gives the same answers ---------
#
# The core cannot call Python per connection, so its handshakes are parsed in C; this
# module's Python machines own the contract, and the C parse must answer every input as
# they do: need more, or the destination (and BUFFER_SIZE, and where the client's data
# starts), or a refusal with the same bytes owed and the same RST-or-FIN.

STAGES = {Stage.SOCKS_GREETING: 4, Stage.SOCKS_REQUEST: 5, Stage.TLV_HEADER: 6}  # pep_stage
MACHINES = {"socks5": SocksHandshake, "tlv": TlvHandshake}


@pytest.fixture(scope="module")
def core() -> Any:
    return load()  # make build (make test-pep builds it first)


def python_answers(mode: str, pieces: list[bytes]) -> list[tuple[Any, ...]]:
    h, answers = MACHINES[mode](), []
    for piece in pieces:
        h.receive(piece)
        try:
            answer, destination = h.advance()
        except HandshakeError as exc:
            return [*answers, ("refused", exc.answer, exc.reset)]
        if destination is None:
            answers.append(("more", answer, STAGES[h.stage]))
            continue
        buffer_size = destination.buffer_size or 0
        return [*answers, ("done", answer, destination.address, buffer_size, h.inbox)]
    return answers


def core_answers(lib: Any, mode: str, pieces: list[bytes]) -> list[tuple[Any, ...]]:
    """The core's way: the whole input so far each time, its stage and taken kept."""
    first = STAGES[MACHINES[mode].first_stage]
    h, data, answers = CoreHandshake(stage=first), b"", []
    for piece in pieces:
        data += piece
        parsed = lib.pep_core_handshake(ctypes.byref(h), data, len(data))
        answer = bytes(h.answer[: h.answer_len])
        if parsed == PARSE_REFUSED:
            return [*answers, ("refused", answer, bool(h.reset))]
        if parsed == PARSE_MORE:
            answers.append(("more", answer, h.stage))
            continue
        size = 16 if h.family == socket.AF_INET6 else 4
        address = (str(ipaddress.ip_address(bytes(h.address[:size]))), h.port)
        return [*answers, ("done", answer, address, h.buffer_size, data[h.taken :])]
    return answers


def agree(lib: Any, mode: str, pieces: list[bytes]) -> None:
    assert core_answers(lib, mode, pieces) == python_answers(mode, pieces), (mode, pieces)


KNOWN = [
    ("socks5", [GREETING[:2], GREETING[2:] + CONNECT[:5], CONNECT[5:] + b"data"]),
    ("socks5", [GREETING + CONNECT]),
    ("socks5", [b"\x05\x01\x02"]),  # no "no authentication"
    ("socks5", [b"\x04\x01\x00"]),  # SOCKS4
    ("socks5", [b"\x05\x00"]),  # no method offered
    ("socks5", [GREETING + b"\x05\x02\x00\x01" + bytes(6)]),  # BIND
    ("socks5", [GREETING + b"\x05\x01\x01\x01" + bytes(6)]),  # reserved byte set
    ("socks5", [GREETING + b"\x05\x01\x00\x03\x07example\x00\x50"]),  # a domain name
    ("socks5", [GREETING + b"\x05\x01\x00\x01" + bytes(6)]),  # 0.0.0.0 port 0
    ("socks5", [GREETING + b"\x05\x01\x00\x04" + bytes(15) + b"\x01\x00\x50" + b"x"]),  # ::1
    ("socks5", [GREETING, b"\x05\x01\x00\x01\x0a\xc9", bytes(HANDSHAKE_LIMIT)]),
    ("tlv", [TLV[:7], TLV[7:] + b"GET"]),
    ("tlv", [bytes.fromhex("0102EFBE0A0614510AC902020B06000000001000")]),
    ("tlv", [bytes.fromhex("0120EFBE"), bytes(HANDSHAKE_LIMIT)]),
    ("tlv", [b"GET / HTTP/1.1\r\n\r\n"]),
    ("tlv", [bytes([1, 1, 0xBE, 0xEF]) + bytes([0x0A, 6, 0, 80, 10, 201, 2, 2])]),
    ("tlv", [bytes([1, 0, 0xEF, 0xBE])]),
    ("tlv", [bytes([1, 1, 0xEF, 0xBE]) + bytes([0x0A, 9, 0, 80, 10, 201, 2, 2])]),
    ("tlv", [bytes([1, 1, 0xEF, 0xBE]) + bytes([0x0B, 6, 0, 0, 0, 0, 0, 1])]),
    ("tlv", [bytes([1, 2, 0xEF, 0xBE]) + bytes([0x0A, 6, 0, 80, 10, 201, 2, 2]) * 2]),
    ("tlv", [pep_tlv.encode(("fd00:201:2::2", 5201), buffer_size=1 << 20) + b"after"]),
    ("tlv", [pep_tlv.encode(("fd00:201:2::2", 5201))[:-8] + bytes([0x0D, 2]) + bytes(6)]),
    ("tlv", [bytes([1, 1, 0xEF, 0xBE]) + bytes([0x0D, 6]) + bytes(6)]),  # ADDRESS6 alone
    ("tlv", [bytes([1, 2, 0xEF, 0xBE]) + bytes([0x01, 2, 0, 0, 0, 0, 0, 0]) + TLV[4:]]),
]


@pytest.mark.parametrize(("mode", "pieces"), KNOWN)
def test_the_core_parses_known_handshakes_as_python_does(
    core: Any, mode: str, pieces: list[bytes]
) -> None:
    agree(core, mode, pieces)


@settings(max_examples=400, deadline=None)
@given(mode=st.sampled_from(["socks5", "tlv"]), data=st.binary(max_size=80), cut=st.integers(0, 80))
def test_the_core_parses_any_bytes_as_python_does(
    core: Any, mode: str, data: bytes, cut: int
) -> None:
    agree(core, mode, [data[:cut], data[cut:]] if 0 < cut < len(data) else [data])


def _options(draw: Any) -> bytes:
    """Plausible TLV options: known and unknown types, valid and invalid lengths."""
    kinds = st.sampled_from([0x01, 0x0A, 0x0B, 0x0C, 0x0D, 0x42])
    option = st.tuples(kinds, st.sampled_from([2, 6, 6, 6, 9]), st.binary(min_size=6, max_size=6))
    chosen = draw(st.lists(option, min_size=1, max_size=5))
    return b"".join(bytes((k, n)) + v for k, n, v in chosen)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_the_core_parses_near_valid_handshakes_as_python_does(core: Any, data: Any) -> None:
    options = _options(data.draw)
    count = data.draw(st.sampled_from([len(options) // 8, len(options) // 8 + 1, 0, 33]))
    agree(core, "tlv", [bytes((1, count % 256, 0xEF, 0xBE)) + options + b"app"])
    methods = data.draw(st.binary(min_size=0, max_size=4))
    request = data.draw(
        st.sampled_from([CONNECT, CONNECT[:3] + b"\x04" + bytes(15) + b"\x01\x00\x50"])
    )
    tail = data.draw(st.binary(max_size=6))
    agree(core, "socks5", [bytes((5, len(methods))) + methods + request[:-2], request[-2:] + tail])


@pytest.mark.parametrize(
    ("code", "bound"), [(0, ("10.201.2.1", 40000)), (5, ("0.0.0.0", 0)), (0, ("fd00::1", 443))]
)
def test_the_core_encodes_socks5_replies_as_python_does(
    core: Any, code: int, bound: tuple[str, int]
) -> None:
    family = socket.AF_INET6 if ":" in bound[0] else socket.AF_INET
    out = ctypes.create_string_buffer(22)
    n = core.pep_core_socks5_reply(out, code, family, socket.inet_pton(family, bound[0]), bound[1])
    assert out.raw[:n] == socks5.reply(code, bound)
