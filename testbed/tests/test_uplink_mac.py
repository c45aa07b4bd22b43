"""The uplink MAC through real namespaces: the UE's packets cross the emulator at the
uplink TBS rate, the UE's modem buffer fills to its limit, FlexRAN reports the grants."""

from __future__ import annotations

import pytest

from mec_common.tables import cqi_to_mcs, lte_tbs_bytes_for_mcs
from mts_testbed.topology import Topology

from .conftest import Api, counter_rate, udp_upload, within

pytestmark = pytest.mark.netns

UL_PRB, UL_CQI, BUFFER = 6, 9, 300_000
SCENARIO = {
    "cells": [{"bs_id": 10000, "prb": 25, "uplink": {"prb": UL_PRB}}],
    "ues": [
        {
            "cells": [
                {
                    "bs_id": 10000,
                    "delay_ms": 2,
                    "ul_delay_ms": 2,
                    "channel": {"cqi": 15},
                    "ul_channel": {"cqi": UL_CQI},
                    "ul_buffer_bytes": BUFFER,
                }
            ]
        }
    ],
}


@pytest.fixture(scope="module")
def topo(make_topology) -> Topology:
    return make_topology(SCENARIO)


def test_uplink_carries_the_tbs_rate_and_fills_the_modem_buffer(topo: Topology) -> None:
    """UDP at twice the uplink's TBS rate: the server gets TBS(6 PRB, MCS(CQI 9)) per TTI,
    the modem buffer sits at its limit, drops are counted, FlexRAN shows the grants."""
    mcs = cqi_to_mcs(UL_CQI)
    rate_Bps = lte_tbs_bytes_for_mcs(mcs, UL_PRB) * 1000
    api = Api(topo)
    with udp_upload(topo, 2 * rate_Bps * 8, 5601, seconds=6) as rx:
        rates = counter_rate(rx, 2.5, 2.5)
        bearer = api.bearer()
        stats = api.get(f"/stats/ue/{topo.ues[0].imsi}")
    low, high = (r / rate_Bps for r in rates)
    print(f"uplink {low:.3f}..{high:.3f} of the TBS rate {rate_Bps * 8 / 1e6:.2f} Mbit/s")
    assert within((low * rate_Bps, high * rate_Bps), rate_Bps, 0.05)
    ul = bearer["ul_mac"]
    assert BUFFER - 2000 <= ul["buffer_bytes"] <= BUFFER
    assert ul["buffer_drop_pkts"] > 0 and ul["cqi"] == UL_CQI and ul["harq_tx"] > 0
    mac = stats["mac_stats"][0]["ue_mac_stats"][0]["mac_stats"]
    assert mac["macStats"]["mcs1Ul"] == mcs
    assert mac["macStats"]["prbUl"] == UL_PRB  # saturated: every TTI has the whole uplink
    assert mac["macStats"]["tbsUl"] == lte_tbs_bytes_for_mcs(mcs, UL_PRB)
    assert mac["bsr"][1] == 63  # more than 150000 B buffered (TS 36.321 Table 6.1.3.1-1)
    assert mac["phr"] == 40 - 8  # 10·log10(6) dB less headroom than at one PRB
