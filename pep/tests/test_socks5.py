"""The SOCKS5 subset: greeting, CONNECT request, replies."""

from __future__ import annotations

import pytest

from mec_pep import socks5


def test_greeting() -> None:
    assert socks5.parse_greeting(b"\x05") is None
    assert socks5.parse_greeting(b"\x05\x02\x00") is None
    greeting = socks5.parse_greeting(b"\x05\x02\x00\x02rest")
    assert greeting == socks5.Greeting(b"\x00\x02", 4)
    for bad in (b"\x04", b"\x04\x01\x00", b"\x05\x00"):
        with pytest.raises(socks5.Socks5Error):
            socks5.parse_greeting(bad)


def test_connect_request() -> None:
    wire = b"\x05\x01\x00\x01\x0a\x00\x00\x02\x01\xbb"
    for cut in range(len(wire)):
        assert socks5.parse_request(wire[:cut]) is None
    assert socks5.parse_request(wire + b"data") == socks5.Request(("10.0.0.2", 443), 10)


@pytest.mark.parametrize(
    ("wire", "reply"),
    [
        (b"\x05\x02\x00\x01", socks5.COMMAND_NOT_SUPPORTED),  # BIND
        (b"\x05\x01\x00\x03", socks5.ADDRESS_TYPE_NOT_SUPPORTED),  # domain name
        (b"\x05\x01\x00\x05", socks5.ADDRESS_TYPE_NOT_SUPPORTED),  # no such type
        (b"\x05\x01\x00\x04" + bytes(16) + b"\x00\x50", socks5.HOST_UNREACHABLE),  # [::]
        (b"\x05\x01\x01\x01", socks5.GENERAL_FAILURE),  # reserved byte set
        (b"\x05\x01\x00\x01\x00\x00\x00\x00\x00\x50", socks5.HOST_UNREACHABLE),  # 0.0.0.0
    ],
)
def test_bad_requests_carry_their_reply_code(wire: bytes, reply: int) -> None:
    with pytest.raises(socks5.Socks5Error) as caught:
        socks5.parse_request(wire)
    assert caught.value.reply == reply


def test_ipv6_connect_request() -> None:
    wire = b"\x05\x01\x00\x04" + bytes.fromhex("fd000201000200000000000000000002") + b"\x01\xbb"
    for cut in range(len(wire)):
        assert socks5.parse_request(wire[:cut]) is None
    assert socks5.parse_request(wire + b"data") == socks5.Request(("fd00:201:2::2", 443), 22)


def test_reply_encoding() -> None:
    assert socks5.reply(0, ("10.0.0.1", 8080)) == b"\x05\x00\x00\x01\x0a\x00\x00\x01\x1f\x90"
    v6 = socks5.reply(0, ("fd00::1", 8080))
    assert (
        v6 == b"\x05\x00\x00\x04" + bytes.fromhex("fd000000000000000000000000000001") + b"\x1f\x90"
    )
    assert socks5.reply_for_errno(111) == socks5.CONNECTION_REFUSED
