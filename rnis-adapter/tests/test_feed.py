"""The AMQP feed on the real RabbitMQ: routing keys, bodies, bindings by UE address and by
cell, events, skipped repeats.

The contract test of the RNIS feed: every body the Go adapter publishes validates against
the committed JSON Schema (``docs/schemas/``, exported from ``mec_common.bus.rnis``) and
reads as the consumers' model, under the key the model gives."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import jsonschema_rs
from rnis_helpers import Adapter, Consumer, FlexranSource, wait_for

from mec_common.bus import rnis

SCHEMAS = Path(__file__).resolve().parents[2] / "docs/schemas"


def schema(name: str) -> Any:
    """A validator of the committed JSON Schema ``docs/schemas/<name>.v1.json``."""
    path = SCHEMAS / f"{name}.v{rnis.SCHEMA_VERSION}.json"
    return jsonschema_rs.validator_for(json.loads(path.read_text()))


def test_measurements_have_the_contract_keys_and_bodies(
    adapter: Adapter, shared_amqp: str, exchange: str
) -> None:
    consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("meas")])
    messages = consumer.collect(1.5)
    consumer.close()
    assert len(messages) > 20, "a 10 ms poll of 4 UEs gives hundreds of messages in 1.5 s"
    fields = set(rnis.RnisMeasurement.model_fields)
    validator = schema("rnis-measurement")
    keys = Counter()
    for key, body, props in messages:
        assert set(body) == fields, "the Go output has exactly the schema's fields"
        validator.validate(body)
        m = rnis.RnisMeasurement.model_validate(body)
        assert key == m.routing_key()
        assert props.content_type == "application/json"
        assert props.headers == {"schema": rnis.SCHEMA_VERSION, "type": "meas"}
        assert props.delivery_mode in (None, 1), "measurements are not persistent"
        assert m.imsi is not None and m.imsi.startswith("20893")
        assert m.ue_ipv4 is not None and m.cell_prbs == 25 and m.cell_ues == 2
        assert m.source_time_ns is not None and m.observed_ns >= m.source_time_ns
        assert m.cell_best_cqi_tbs_bytes == 2292
        keys[key] += 1
    assert len(keys) == 4, f"one key per UE: {sorted(keys)}"


def test_bind_by_ue_address_and_by_cell(adapter: Adapter, shared_amqp: str, exchange: str) -> None:
    by_ip = Consumer(shared_amqp, exchange, [rnis.bind_ue_ip("10.30.2.4")])
    by_cell = Consumer(shared_amqp, exchange, [rnis.bind_cell("10000-0")])
    ip_msgs, cell_msgs = by_ip.collect(1.0), by_cell.collect(0.5)
    by_ip.close()
    by_cell.close()
    assert ip_msgs and {str(b["ue_ipv4"]) for _, b, _ in ip_msgs} == {"10.30.2.4"}
    assert cell_msgs and {b["cell"] for _, b, _ in cell_msgs} == {"10000-0"}
    assert {b["rnti"] for _, b, _ in cell_msgs} == {1000, 1001}


def test_cell_messages_carry_the_per_ue_measurements(
    tmp_path: Path, source: FlexranSource, shared_amqp: str, exchange: str
) -> None:
    a = Adapter(tmp_path, source.url, exchange, env={"RNIS_AMQP_PUBLISH": "both"}).start()
    try:
        consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("meas"), rnis.bind_all("cell")])
        messages = consumer.collect(1.5)
        consumer.close()
    finally:
        a.stop()
    per_ue = {
        (b["observed_ns"], b["rnti"]): rnis.RnisMeasurement.model_validate(b)
        for _, b, p in messages
        if p.headers["type"] == "meas"
    }
    cells = [(k, b, p) for k, b, p in messages if p.headers["type"] == "cell"]
    assert len(cells) > 20, "a 10 ms poll of 2 cells gives hundreds of cell messages in 1.5 s"
    ue_fields = set(rnis.RnisCellUe.model_fields)
    validator = schema("rnis-cell")
    for key, body, props in cells:
        validator.validate(body)
        assert set(body) == set(rnis.RnisCellMeasurements.model_fields), "exactly the schema"
        assert all(set(ue) == ue_fields for ue in body["ues"])
        batch = rnis.RnisCellMeasurements.model_validate(body)
        assert key == batch.routing_key() == f"rnis.v1.cell.{batch.cell}"
        assert props.headers == {"schema": rnis.SCHEMA_VERSION, "type": "cell"}
        assert len(batch.ues) == batch.cell_ues == 2
        unpacked = list(rnis.measurements(json.dumps(body)))
        assert unpacked == batch.measurements()
        for m in unpacked:  # the same values as the per-UE message of the same poll
            assert m == per_ue.get((m.observed_ns, m.rnti), m)
    paired = sum(
        (m.observed_ns, m.rnti) in per_ue
        for _, b, _ in cells
        for m in rnis.RnisCellMeasurements.model_validate(b).measurements()
    )
    assert paired > 40, "cell and per-UE messages of the same polls were compared"
    assert {k for k, _, _ in cells} == {"rnis.v1.cell.10000-0", "rnis.v1.cell.10001-1"}


EVENT_DEADLINE = 15.0  # s; an event is due within 2 polls + RNIS_DETACH_AFTER (200 ms)


def has_event(kind: str) -> Any:
    return lambda messages: any(body["event"] == kind for _, body, _ in messages)


def test_attach_detach_and_cell_change_events(
    adapter: Adapter, source: FlexranSource, shared_amqp: str, exchange: str
) -> None:
    # The adapter's first poll publishes an attach per UE; a consumer bound before it
    # (CI, on a loaded machine) saw those ahead of the move. Wait until the four UEs are
    # known, then drop what reaches the new binding from that poll.
    known = "/rni/v2/queries/ext/ran_meas"
    wait_for(lambda: len(adapter.get(known).json()["ueMeas"]) == 4, 10, "the 4 UEs attached")
    consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("event")])
    initial = consumer.collect(0.5)
    assert {b["event"] for _, b, _ in initial} <= {"attach"}, initial
    source.control("move", ue=0, cell=1)
    moved = consumer.collect(EVENT_DEADLINE, until=has_event("cell_change"))
    source.control("detach", ue=1)
    detached = consumer.collect(EVENT_DEADLINE, until=has_event("detach"))
    source.control("attach", ue=1)
    attached = consumer.collect(EVENT_DEADLINE, until=has_event("attach"))
    late = consumer.collect(0.5)  # nothing else follows (a move is not detach + attach)
    consumer.close()
    assert late == []
    validator = schema("rnis-event")
    for key, body, props in moved + detached + attached:
        validator.validate(body)
        e = rnis.RnisEvent.model_validate(body)
        assert key == e.routing_key() and props.headers["type"] == "event"
    assert [b["event"] for _, b, _ in moved] == ["cell_change"], "a move is not detach + attach"
    change = moved[0][1]
    assert change["previous_cell"] == "10000-0" and change["cell"] == "10001-1"
    assert change["rnti"] == 1001, "UE 0 got a new C-RNTI in cell 1"
    assert change["imsi"] == "208930000000001" and change["ue_ipv4"] == "10.30.2.1"
    assert [(b["event"], b["rnti"], b["cell"]) for _, b, _ in detached] == [
        ("detach", 1001, "10000-0")
    ]
    assert [(b["event"], b["rnti"]) for _, b, _ in attached] == [("attach", 1001)]
    assert attached[0][0] == "rnis.v1.event.attach.10000-0.208930000000002.10_30_1_2"


def test_detach_after_the_grace_period(
    adapter: Adapter, source: FlexranSource, shared_amqp: str, exchange: str
) -> None:
    consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("event")])
    source.control("detach", ue=3)
    events = consumer.collect(EVENT_DEADLINE, until=has_event("detach"))
    consumer.close()
    detaches = [b for _, b, _ in events if b["event"] == "detach"]
    assert [d["rnti"] for d in detaches] == [1003]
    assert detaches[0]["cell"] == "10001-1" and detaches[0]["ue_ipv4"] == "10.30.2.4"


def test_exact_repeats_are_not_published(tmp_path: Path, shared_amqp: str, exchange: str) -> None:
    slow = FlexranSource(tmp_path, ues=1, cells=1, refresh="200ms")
    a = Adapter(tmp_path, slow.url, exchange).start()
    try:
        consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("meas")])
        messages = consumer.collect(2.0)
        consumer.close()
        metrics = a.get("/metrics", token=None).text
    finally:
        a.stop()
        slow.proc.stop()
    # 10 ms polls for 2 s = ~200 polls; the source changes 10 times, so ~10 messages.
    assert 5 <= len(messages) <= 16, len(messages)
    frames = [b["sfn_sf"] for _, b, _ in messages]
    assert len(set(frames)) == len(frames), "no frame published twice"
    repeats = next(line for line in metrics.splitlines() if line.startswith("rnis_repeats_skip"))
    assert float(repeats.split()[-1]) > 50


def test_health_and_metrics(adapter: Adapter) -> None:
    health = wait_for(lambda: adapter.health()["status"] == "ok" and adapter.health(), 5, "ok")
    assert health["checks"]["broker"]["ok"] and health["checks"]["ran_source"]["ok"]
    metrics = adapter.get("/metrics", token=None).text
    for name in (
        "rnis_poll_latency_seconds_bucket",
        "rnis_amqp_confirm_latency_seconds_bucket",
        "rnis_parse_errors_total",
        "rnis_ues 4",
        "rnis_amqp_published_total",
    ):
        assert name in metrics, name
