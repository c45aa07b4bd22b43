"""The adapter's E2 source (RNIS_SOURCE=e2, docs/e2.md) on the real broker: measurements of
the mts-e2 stream validate as the feed's model; a wrong token and a lost stream show in
/healthz and are retried, never a crash."""

from __future__ import annotations

from pathlib import Path

from rnis_helpers import Adapter, Consumer, FlexranSource, wait_for

from mec_common.bus import rnis


def e2_adapter(tmp: Path, source: FlexranSource, exchange: str, token: str = "") -> Adapter:
    env = {
        "RNIS_SOURCE": "e2",
        "RNIS_E2_ADDR": source.e2_addr,
        "RNIS_E2_TOKEN": token or source.e2_token,
    }
    return Adapter(tmp, "http://unused.invalid", exchange, env=env).start()


def test_e2_stream_feeds_the_bus(tmp_path: Path, shared_amqp: str, exchange: str) -> None:
    source = FlexranSource(tmp_path, ues=3, refresh="5ms", e2=True)
    a = e2_adapter(tmp_path, source, exchange)
    try:
        wait_for(lambda: a.health()["status"] == "ok", 10, "adapter reading the E2 stream")
        assert "flexran-source" in a.health()["checks"]["ran_source"]["detail"]
        consumer = Consumer(shared_amqp, exchange, [rnis.bind_all("meas")])
        messages = consumer.collect(5, until=lambda out: len({b["rnti"] for _, b, _ in out}) == 3)
        consumer.close()
    finally:
        assert a.stop() == 0
        source.proc.stop()
    ues = set()
    for key, body, _ in messages:
        m = rnis.RnisMeasurement.model_validate(body)
        assert key == m.routing_key() and m.cell == "10000-0" and m.cell_prbs == 25
        assert m.wb_cqi is not None and 7 <= m.wb_cqi <= 15 and m.rlc_queue_bytes is not None
        ues.add((m.rnti, m.imsi, str(m.ue_ipv4)))
    assert ues == {(1000 + i, f"2089300000000{i + 1:02d}", f"10.30.1.{i + 1}") for i in range(3)}


def test_e2_refused_and_lost_stream_show_in_health(tmp_path: Path, exchange: str) -> None:
    source = FlexranSource(tmp_path, ues=1, refresh="5ms", e2=True)
    (tmp_path / "wrong").mkdir()
    wrong = e2_adapter(tmp_path / "wrong", source, exchange, token="not-the-token-0123456789")
    a = e2_adapter(tmp_path, source, exchange)
    try:
        wait_for(lambda: "refused" in wrong.health()["checks"]["ran_source"]["detail"], 10,
                 "the refusal in /healthz")  # fmt: skip
        assert wrong.get("/healthz", token=None).status_code == 503
        wait_for(lambda: a.health()["status"] == "ok", 10, "streaming")
        port = int(source.e2_addr.rsplit(":", 1)[1])
        source.proc.stop()
        wait_for(lambda: not a.health()["checks"]["ran_source"]["ok"], 10, "stream lost")
        assert a.proc is not None and a.proc.alive()
        source = FlexranSource(tmp_path, ues=1, refresh="5ms", e2=True, e2_port=port,
                               e2_token=source.e2_token)  # fmt: skip
        wait_for(lambda: a.health()["status"] == "ok", 10, "streaming again after the restart")
    finally:
        assert a.stop() == 0 and wrong.stop() == 0
        source.proc.stop()
    assert "E2 stream lost" in (a.proc.output() if a.proc else "")
