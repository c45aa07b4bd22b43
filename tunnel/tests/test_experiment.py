"""A small ``make experiment-tunnel`` (research 003's test 1) on the emulated multi-cell
testbed: one Cubic download and a ping through the tunnel over two emulated cells of
20 Mbit/s, 10 ms each way, FIFO then FQ-CoDel at the ingress. Real emulator, namespaces, TUNs;
root only. Bounds are generous (the machine is shared); the experiment has the figures."""

from __future__ import annotations

import os

import pytest

from mts_lab.tunnel.bed import BINARY, TUN_MTU
from mts_lab.tunnel.experiment import CASES, run
from mts_testbed.builder import DEFAULT_EMULATOR

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root for namespaces and TUN"),
]
# what one 20 Mbit/s path carries of inner packets at most (the TUN's MTU of every
# MTU + 60 bytes: UDP/IP and the tunnel's overhead)
ONE_PATH_MBIT = 20 * TUN_MTU / (TUN_MTU + 60)


@pytest.mark.timeout(300)
def test_aggregation_and_fq_codel_against_fifo() -> None:
    assert BINARY.exists() and DEFAULT_EMULATOR.exists(), "run make build first"
    fifo, fq = run([c for c in CASES if c.test == "1"], runs=1, seconds=8)
    assert (fifo["queue"], fq["queue"]) == ("fifo", "fq_codel")
    # two paths add up: more than one path can carry, both paths used (RR)
    assert fq["down_mbit"] > ONE_PATH_MBIT, fq["down_mbit"]
    assert all(share > 0.3 for share in fq["split_down"]), fq["split_down"]
    # the ping waits behind the download's standing queue in FIFO; FQ-CoDel serves it as a
    # new flow and CoDel keeps the download's queue near its 5 ms target
    assert len(fq["ping"]) > 40 and len(fifo["ping"]) > 40
    assert fq["ping_median_ms"] < fifo["ping_median_ms"] / 2, (
        fq["ping_median_ms"],
        fifo["ping_median_ms"],
    )
    assert fifo["ping_late_ms"] > fifo["ping_early_ms"], "FIFO: no bufferbloat seen"
    assert fq["stats"]["drops"]["aqm"] > 0, fq["stats"]["drops"]  # CoDel acted
    # every ping's request and reply path came from the ends' ICMP trace (RR: both paths)
    pairs = {k: v for k, v in fq["ping_by_paths"].items() if k != "reply_with_choice"}
    assert "None" not in "".join(pairs) and abs(sum(v["share"] for v in pairs.values()) - 1) < 1e-9
    assert {"1-1", "2-2"} & set(pairs), pairs
