"""The adapter against the RAN emulator (testbed/ran-emulator) on a real emulated testbed:
what the feed and the MEC 012 API report matches the topology the testbed built."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
import yaml
from rnis_helpers import Adapter, Consumer, wait_for

from mec_common.bus import rnis
from mts_testbed import builder
from mts_testbed.topology import Topology

pytestmark = pytest.mark.netns

SCENARIO = {
    "description": "rnis-adapter test: a UE on two cells (multipath), a UE on one",
    "cells": [{"bs_id": 10000, "prb": 25}, {"bs_id": 10001, "prb": 50}],
    "ues": [
        {
            "count": 1,
            "cells": [
                {"bs_id": 10000, "channel": {"cqi": 15}},
                {"bs_id": 10001, "channel": {"cqi": 9}},
            ],
        },
        {"count": 1, "cells": [{"bs_id": 10000, "channel": {"cqi": 7}}]},
    ],
}


@pytest.fixture(scope="module")
def topo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces); run `make test-rnis` as root")
    if not builder.DEFAULT_EMULATOR.is_file():
        pytest.fail("build/bin/ran-emulator is missing: `make build`")
    path = tmp_path_factory.mktemp("scenario") / "scenario.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    name = "r" + secrets.token_hex(4)
    try:
        yield builder.up(path, name, log=lambda _: None)
    finally:
        builder.down(name, log=None)


def test_feed_matches_the_testbed(
    topo: Topology, tmp_path: Path, shared_amqp: str, exchange: str
) -> None:
    a = Adapter(
        tmp_path, topo.emulator.url, exchange, env={"RNIS_FLEXRAN_TOKEN": topo.emulator.token}
    ).start()
    try:
        wait_for(lambda: a.health()["status"] == "ok", 15, "adapter polling the emulator")
        consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("meas")])
        messages = consumer.collect(1.5)
        consumer.close()
        ext = a.get("/rni/v2/queries/ext/ran_meas").json()["ueMeas"]
        l2 = a.get("/rni/v2/queries/layer2_meas").json()
    finally:
        a.stop()
    prbs = {c.cell: c.prb for c in topo.cells}
    expected = {(p.cell, ue.imsi, p.ip, p.rnti) for ue in topo.ues for p in ue.paths}
    assert len(expected) == 3
    seen = set()
    for key, body, _ in messages:
        m = rnis.RnisMeasurement.model_validate(body)
        assert key == m.routing_key()
        seen.add((m.cell, m.imsi, str(m.ue_ipv4), m.rnti))
        assert m.cell_prbs == prbs[m.cell]
        assert m.harq_processes == 8 and m.source_time_ns is not None
        assert m.source_time_ns <= m.observed_ns
        assert (
            m.cell_best_cqi_tbs_bytes == {25: 2292, 50: 36696 // 8}[prbs[m.cell]]
        )  # 36.213: I_TBS 26
    assert seen == expected
    # the emulator's date_time_ns: the source's time to the ns (date_time has only ms)
    times = [b["source_time_ns"] for _, b, _ in messages]
    assert sum(t % 1_000_000 != 0 for t in times) > len(times) // 2
    by_path = {(m["cell"], m["imsi"]): m for m in ext}
    first, second = topo.ues[0], topo.ues[1]
    assert by_path[(first.paths[0].cell, first.imsi)]["wb_cqi"] == 15
    assert by_path[(first.paths[1].cell, first.imsi)]["wb_cqi"] == 9
    assert by_path[(second.paths[0].cell, second.imsi)]["wb_cqi"] == 7
    assert {u["associateId"]["value"] for u in l2["cellUEInfo"]} == {p for _, _, p, _ in expected}
    # the emulator reports both directions: every UE and cell has them (absent only when a
    # source does not report them; the values are checked on live captures, layer2_test.go)
    assert all(
        {"dl_nongbr_throughput_ue", "ul_nongbr_throughput_ue"} <= set(u) for u in l2["cellUEInfo"]
    )
    assert all(
        {"dl_total_prb_usage_cell", "ul_total_prb_usage_cell"} <= set(c) for c in l2["cellInfo"]
    )


# What depends on when a source was read, not on the RAN: left out of the comparison. The
# bit/s values are bytes per TTI at the TTI each adapter measured over its own window (on a
# loaded machine the emulator runs slower than real time): their inputs are compared.
_TIMING = {"source_time_ns", "source_time_uncertainty_ns", "observed_ns", "tti_us"}
_TIMING |= {"sfn_sf", "frame", "subframe"}
_TIMING |= {"rapid_capacity_bps", "cqi_capacity_bps", "dl_tbs_bps"}


def _truth(m: rnis.RnisMeasurement) -> dict[str, object]:
    """A measurement without its timing; of the RLC list the data bearers (FlexRAN also
    lists the signalling bearers, OAI's RLC service model only the DRBs)."""
    body = m.model_dump(mode="json", exclude=_TIMING)
    body["rlc"] = [lc for lc in body["rlc"] or [] if lc["lcid"] >= 3]
    return body


def test_e2_and_flexran_sources_report_the_same_truth(
    topo: Topology, tmp_path: Path, shared_amqp: str, exchange: str
) -> None:
    """The same emulated cells read through FlexRAN's API and through the mts-e2 stream
    (what our FlexRIC xApp forwards) give the same per-UE measurements."""
    assert topo.emulator.e2_addr, "the testbed's emulator serves no E2 stream"
    e2_exchange = exchange + "-e2"
    for d in ("flexran", "e2"):
        (tmp_path / d).mkdir()
    flexran = Adapter(
        tmp_path / "flexran",
        topo.emulator.url,
        exchange,
        env={"RNIS_FLEXRAN_TOKEN": topo.emulator.token},
    )
    e2 = Adapter(
        tmp_path / "e2",
        "http://unused.invalid",
        e2_exchange,
        env={
            "RNIS_SOURCE": "e2",
            "RNIS_E2_ADDR": topo.emulator.e2_addr,
            "RNIS_E2_TOKEN": topo.emulator.token,
        },
    )
    try:
        flexran.start()
        e2.start()
        for a in (flexran, e2):
            wait_for(lambda a=a: a.health()["status"] == "ok", 15, "adapter reading the emulator")
        latest: dict[str, dict[tuple[str, int], dict[str, object]]] = {}
        for name, ex in (("flexran", exchange), ("e2", e2_exchange)):
            consumer = Consumer(shared_amqp, ex, [rnis.bind_all("meas")])
            for _, body, _ in consumer.collect(1.5):
                m = rnis.RnisMeasurement.model_validate(body)
                latest.setdefault(name, {})[(m.cell, m.rnti)] = _truth(m)
            consumer.close()
    finally:
        for a in (flexran, e2):
            if a.proc is not None:
                a.stop()
        conn = pika.BlockingConnection(pika.URLParameters(shared_amqp))
        conn.channel().exchange_delete(e2_exchange)
        conn.close()
    expected = {(p.cell, p.rnti) for ue in topo.ues for p in ue.paths}
    assert set(latest["flexran"]) == expected == set(latest["e2"])
    for key in expected:
        assert latest["e2"][key] == latest["flexran"][key], key
