"""The TLV parser (PEP side) against the client library's encoder and hostile input."""

from __future__ import annotations

import pep_support  # noqa: F401 - puts the client library on sys.path
import pep_tlv
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mec_pep import tlv


def test_connect_tlv_is_12_bytes_with_the_documented_byte_order() -> None:
    wire = pep_tlv.encode(("10.201.2.2", 5201))
    # version 1, 1 option, magic 0xBEEF little-endian | CONNECT, length 6, port BE, IPv4 BE
    assert wire == bytes.fromhex("0101efbe") + bytes.fromhex("0a06 1451 0ac90202")
    parsed = tlv.parse(wire)
    assert parsed == tlv.TlvRequest(("10.201.2.2", 5201), None, 12)


def test_buffer_size_option_and_application_bytes_after_it() -> None:
    wire = pep_tlv.encode(("10.0.0.1", 80), buffer_size=64 << 20)
    assert wire[12:] == bytes.fromhex("0b06 0000") + (64 << 20).to_bytes(4, "little")
    parsed = tlv.parse(wire + b"GET / HTTP/1.1\r\n")
    assert parsed is not None
    assert parsed.buffer_size == 64 << 20 and parsed.length == 20


def test_unknown_options_are_skipped() -> None:
    info = bytes([tlv.TYPE_INFO, 2, 0, 7, 0, 0, 0, 0])
    wire = bytes([1, 2, 0xEF, 0xBE]) + info + pep_tlv.encode(("10.0.0.1", 80))[4:]
    parsed = tlv.parse(wire)
    assert parsed is not None and parsed.destination == ("10.0.0.1", 80)


@pytest.mark.parametrize("cut", range(12))
def test_truncated_input_asks_for_more(cut: int) -> None:
    assert tlv.parse(pep_tlv.encode(("10.0.0.1", 80))[:cut]) is None


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (bytes([2, 1, 0xEF, 0xBE]), "version"),
        (bytes([1, 1, 0xBE, 0xEF]), "magic"),  # big-endian magic: wrong
        (bytes([1, 0, 0xEF, 0xBE]), "0 options"),
        (bytes([1, 33, 0xEF, 0xBE]), "33 options"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0A, 7, 0, 80, 10, 0, 0, 1]), "length 7"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0A, 2, 0, 80, 0, 0, 0, 0]), "CONNECT needs length 6"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0A, 6, 0, 0, 10, 0, 0, 1]), "CONNECT to"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0A, 6, 0, 80, 0, 0, 0, 0]), "CONNECT to"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0B, 6, 0, 0, 0, 0, 0, 1]), "no CONNECT"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0B, 2, 0, 0, 0, 0, 0, 1]), "BUFFER_SIZE needs length 6"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0C, 6, 0, 80, 0xFD, 0, 0, 0]), "two ADDRESS6"),
        (bytes([1, 1, 0xEF, 0xBE, 0x0D, 6, 0, 0, 0, 0, 0, 1]), "without CONNECT6"),
        (pep_tlv.encode(("fd00::1", 80))[:20].replace(b"\x03", b"\x02", 1), "two ADDRESS6"),
        (pep_tlv.encode(("::", 80)), "CONNECT to"),
    ],
)
def test_invalid_tlvs_are_rejected(wire: bytes, message: str) -> None:
    with pytest.raises(tlv.TlvError, match=message):
        tlv.parse(wire)


def test_two_connects_are_rejected() -> None:
    one = pep_tlv.encode(("10.0.0.1", 80))[4:]
    with pytest.raises(tlv.TlvError, match="more than one"):
        tlv.parse(bytes([1, 2, 0xEF, 0xBE]) + one + one)


@given(st.binary(max_size=300))
def test_any_input_parses_needs_more_or_is_rejected(data: bytes) -> None:
    try:
        result = tlv.parse(data)
    except tlv.TlvError:
        return
    assert result is None or 12 <= result.length <= len(data)


@given(
    st.tuples(st.integers(1, 255), st.integers(0, 255), st.integers(0, 255), st.integers(1, 254)),
    st.integers(1, 65535),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)
def test_encode_parse_round_trip(octets: tuple[int, ...], port: int, size: int | None) -> None:
    host = ".".join(map(str, octets))
    parsed = tlv.parse(pep_tlv.encode((host, port), buffer_size=size))
    assert parsed is not None
    assert parsed.destination == (host, port) and parsed.buffer_size == size


def test_ipv6_connect_is_three_options_in_network_order() -> None:
    wire = pep_tlv.encode(("fd00:201:2::2", 5201))
    assert wire == bytes.fromhex("0103efbe0c06 1451 fd0002010d06 0002 000000000d06 0000 00000002")
    assert tlv.parse(wire + b"app") == tlv.TlvRequest(("fd00:201:2::2", 5201), None, 28)
    for cut in range(len(wire)):
        assert tlv.parse(wire[:cut]) is None
    with pytest.raises(tlv.TlvError, match="more than one"):
        tlv.parse(bytes([1, 4, 0xEF, 0xBE]) + wire[4:] + pep_tlv.encode(("10.0.0.1", 80))[4:])


@given(st.ip_addresses(v=6).filter(lambda a: not a.is_unspecified), st.integers(1, 65535))
def test_ipv6_round_trip(address, port: int) -> None:  # type: ignore[no-untyped-def]
    parsed = tlv.parse(pep_tlv.encode((str(address), port), buffer_size=1 << 20))
    assert parsed is not None
    assert parsed.destination == (str(address), port) and parsed.buffer_size == 1 << 20
