"""``make experiment-l4s`` in small (one 6 s run per technique at 20 Mbit/s): the bed, the
two flows, the observer, the senders' own RTT samples (the like-for-like truth) and the
summary work together (root, BPF, namespaces, a cgroup)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from l4s_support import NEEDS_ROOT

from mec_l4s.efm import Technique
from mec_l4s.prague import Prague
from mts_lab.l4s.bed import WanLine
from mts_lab.l4s.experiment import LOADER, PRAGUE_OBJ, aggregate, one_run, table

pytestmark = [pytest.mark.netns, NEEDS_ROOT, pytest.mark.timeout(300)]


def test_a_small_table_7_1() -> None:
    tag = secrets.token_hex(3)
    prague = Prague.load(
        LOADER, PRAGUE_OBJ, Path(f"/sys/fs/bpf/mts-prague-t{tag}"), f"prague_t{tag}"
    )
    runs = []
    try:
        for technique in (Technique.SPIN, Technique.DELAY):
            line = WanLine.create(30.0, rate_mbps=20, queue="dualpi2", prefix="l4t")
            try:
                runs.append(
                    one_run(line, prague, technique, 6.0) | {"technique": technique.name.lower()}
                )
            finally:
                line.down()
    finally:
        prague.close()
    for run in runs:
        for cca in ("prague", "cubic"):
            flow = run[cca]
            assert flow["mib"] > 0.5, (run["technique"], cca, flow)
            assert flow["truth"]["n"] > 10 and flow["truth"]["mean_ms"] >= 60 * 0.97
            # TCP_INFO read at each sample's time too (a reader thread, every 5 ms)
            assert flow["truth"]["reads_at_per_s"] > 50, (cca, flow["truth"])
            assert "at_error_p90_ms" in flow["filtered"], (run["technique"], cca)
            assert flow["raw"]["n"] > 10 and flow["filtered"]["n"] > 10, (run["technique"], cca)
            # the sender's own samples: about one per round trip of >= 60 ms, not per ACK
            tcp = flow["tcp_mrtt"]
            assert tcp["n"] >= 10 and tcp["mean_ms"] >= 60 * 0.97, (run["technique"], cca, tcp)
            assert tcp["per_s"] < 1000 / 60 * 1.5 < tcp["acks_in_per_s"], (cca, tcp)
            # each sample's ACK was seen arriving on the sender's interface
            assert tcp["ack_wait_known"] > 0.5, (run["technique"], cca, tcp)
            # the observer against them, over its own round trip: close at the median
            for mode in ("raw", "filtered"):
                row = flow[mode]
                assert row["vs_tcp_matched"] > 10, (run["technique"], cca, mode, row)
                assert row["vs_tcp_p50_ms"] < 10, (run["technique"], cca, mode, row)
        assert run["observer"]["malformed"] == 0
        assert run["sender_rtt"]["ring_full"] == 0 and run["sender_rtt"]["sockets"] >= 2
    rows = aggregate([r | {"run": 0} for r in runs])
    assert set(rows) == {"spin/prague", "spin/cubic", "delay/prague", "delay/cubic"}
    assert "published" in table(
        {"runs": 1, "seconds": 6, "load_before": [], "load_after": [], "table": rows}
    )
