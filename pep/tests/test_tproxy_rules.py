"""mec_common.tproxy: the ruleset it writes (the PEP's transparent tests apply it for real)."""

from __future__ import annotations

import ipaddress

import pytest

from mec_common.tproxy import Intercept, TproxySetup
from mec_pep.config import PepSettings
from mec_pep.transparent import tproxy_setup


def test_script_intercepts_only_what_is_allowed() -> None:
    setup = TproxySetup(
        "mts_pep",
        5999,
        0x50,
        150,
        (
            Intercept(
                sources=(ipaddress.IPv4Network("10.30.0.0/16"),),
                destinations=(ipaddress.IPv4Network("10.10.0.0/24"),),
                ports=(80, 443),
                interfaces=("ran0",),
            ),
        ),
    )
    script = setup.script()
    assert "table ip mts_pep {}\ndelete table ip mts_pep\n" in script  # atomic replace
    assert "meta l4proto tcp socket transparent 1 meta mark set 0x50 accept" in script
    assert (
        'iifname { "ran0" } ip saddr { 10.30.0.0/16 } ip daddr { 10.10.0.0/24 } '
        "meta l4proto tcp tcp dport { 80, 443 } tproxy to :5999 meta mark set 0x50 accept"
    ) in script


def test_nothing_is_intercepted_without_allowed_clients_and_destinations() -> None:
    settings = PepSettings(allowed_clients="10.30.0.0/16", _env_file=None)
    assert tproxy_setup(settings, 5999).intercepts == ()


@pytest.mark.parametrize(
    "bad",
    [
        lambda: TproxySetup("bad name", 1, 1, 1, ()).script(),
        lambda: TproxySetup("t", 70000, 1, 1, ()).script(),
        lambda: Intercept(interfaces=('x" accept; drop',)).match(),
    ],
)
def test_injection_and_nonsense_are_refused(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        bad()
