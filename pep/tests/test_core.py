"""The compiled relay core (PEP_RELAY_CORE=uring) refuses what it does not carry, clearly.

Its relaying is tested by the mode, limit and API tests, which run against both relays
(their ``relay_settings`` fixture).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pep_support import RELAYS, PepProcess

from mec_pep.config import PepSettings
from mec_pep.core import check_core_settings


def test_settings_the_core_lacks_are_all_named() -> None:
    settings = PepSettings(
        transparent_port=5999, socks5_port=1080, tlv_port=8181, ran_mptcp=True,
        backlog_interval_ms=50,
    )  # fmt: skip
    with pytest.raises(ValueError) as refused:
        check_core_settings(settings, extensions=1)
    for name in ("PEP_SOCKS5_PORT", "PEP_TLV_PORT", "PEP_RAN_MPTCP", "PEP_BACKLOG_INTERVAL_MS",
                 "PEP_RAN_AWARE"):  # fmt: skip
        assert name in str(refused.value)
    check_core_settings(PepSettings(transparent_port=5999, backlog_interval_ms=0), extensions=0)


@pytest.mark.netns
def test_a_core_pep_with_socks5_does_not_start(start_pep: Callable[..., PepProcess]) -> None:
    with pytest.raises(RuntimeError, match="PEP_SOCKS5_PORT"):
        start_pep(**{**RELAYS["uring"], "socks5_port": 1080})
