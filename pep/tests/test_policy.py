from __future__ import annotations

import ipaddress

from mec_pep.policy import AccessPolicy


def nets(*cidrs: str) -> list[ipaddress.IPv4Network]:
    return [ipaddress.IPv4Network(c) for c in cidrs]


def test_deny_by_default() -> None:
    policy = AccessPolicy([], [])
    assert not policy.client_allowed("10.0.0.1")
    assert not policy.destination_allowed("8.8.8.8")


def test_ranges() -> None:
    policy = AccessPolicy(nets("10.30.0.0/16"), nets("10.10.0.0/24", "192.0.2.7/32"))
    assert policy.client_allowed("10.30.255.1") and not policy.client_allowed("10.31.0.1")
    assert policy.destination_allowed("10.10.0.255") and policy.destination_allowed("192.0.2.7")
    assert not policy.destination_allowed("192.0.2.8")
    assert not policy.client_allowed("not an address")


def test_loopback_needs_an_explicit_entry() -> None:
    assert not AccessPolicy([], nets("0.0.0.0/0")).destination_allowed("127.0.0.1")
    assert AccessPolicy([], nets("0.0.0.0/0")).destination_allowed("8.8.8.8")
    assert AccessPolicy([], nets("127.0.0.0/8")).destination_allowed("127.0.0.1")


def test_ipv6_ranges_and_loopback() -> None:
    v6 = [ipaddress.IPv6Network("fd00:30::/64")]
    policy = AccessPolicy(v6, [ipaddress.IPv6Network("::/0"), *nets("10.10.0.0/24")])
    assert policy.client_allowed("fd00:30::1") and not policy.client_allowed("fd00:31::1")
    assert not policy.client_allowed("10.30.0.1")  # families do not mix
    assert policy.destination_allowed("2001:db8::1") and policy.destination_allowed("10.10.0.1")
    assert not policy.destination_allowed("::1")  # loopback needs its own entry
    assert AccessPolicy([], [ipaddress.IPv6Network("::1/128")]).destination_allowed("::1")
