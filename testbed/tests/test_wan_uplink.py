"""The WAN delay stage and the uplink rate, measured through real namespaces."""

from __future__ import annotations

import statistics

import pytest

from mts_testbed.topology import Topology

from .conftest import counter_rate, udp_upload, within

pytestmark = pytest.mark.netns

WAN_MS, DL_MS, UL_MS, UL_MBPS = 10.0, 4.0, 6.0, 2.0
SCENARIO = {
    "wan": {"delay_ms": WAN_MS},
    "cells": [{"bs_id": 10000, "prb": 25}],
    "ues": [
        {
            "cells": [
                {
                    "bs_id": 10000,
                    "delay_ms": DL_MS,
                    "ul_delay_ms": UL_MS,
                    "ul_rate_mbps": UL_MBPS,
                    "channel": {"cqi": 15},
                }
            ]
        }
    ],
}


@pytest.fixture(scope="module")
def topo(make_topology) -> Topology:
    return make_topology(SCENARIO)


def test_round_trip_is_the_sum_of_the_delays(topo: Topology) -> None:
    """Server -> UE -> server: 2 x WAN + RAN DL + RAN UL, plus the wait for a TTI.

    The uplink and WAN stages release at the tick nearest to the due time (± 0.5 ms each).
    """
    out = topo.exec(topo.server.ns, "ping", "-c", "40", "-i", "0.0537", topo.ues[0].paths[0].ip)
    rtts = [float(x.split("=")[1]) for x in out.stdout.split() if x.startswith("time=")]
    configured = 2 * WAN_MS + DL_MS + UL_MS
    median = statistics.median(rtts)
    print(f"RTT median {median:.2f} ms, min {min(rtts):.2f} ms; configured {configured} ms")
    assert len(rtts) == 40
    # the fastest round trip shows the emulator's delays without the busy host's noise
    # (deferred softirq work on a loaded machine delays some pings by milliseconds)
    assert configured - 1.5 <= min(rtts) <= configured + 2.5  # TTI wait + rounded stages


def test_uplink_rate(topo: Topology) -> None:
    """A UE sending 4 Mbit/s through a 2 Mbit/s uplink gets 2 Mbit/s to the server."""
    with udp_upload(topo, 2 * UL_MBPS * 1e6, 5600) as rx:
        rates = counter_rate(rx, 2, 2.5)
    low, high = (r * 8 / 1e6 for r in rates)
    print(f"uplink {low:.3f} to {high:.3f} Mbit/s (configured {UL_MBPS})")
    assert within((low, high), UL_MBPS, 0.03)
