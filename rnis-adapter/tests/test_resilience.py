"""A lost broker or RAN source is retried with backoff and shown in /healthz, never a crash."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from rnis_helpers import Adapter, Consumer, FlexranSource, PrivateBroker, wait_for

from mec_common.bus import rnis


@pytest.mark.slow
def test_broker_restart_mid_run(
    tmp_path: Path, source: FlexranSource, private_broker: PrivateBroker
) -> None:
    exchange = "rnis"
    a = Adapter(tmp_path, source.url, exchange, amqp_url=private_broker.url).start()
    try:
        wait_for(lambda: a.health()["checks"]["broker"]["ok"], 10, "broker connection")
        consumer = Consumer(private_broker.url, exchange, [rnis.bind_all("meas")])
        assert consumer.collect(0.5), "messages flow before the restart"
        consumer.close()

        private_broker.stop()
        wait_for(lambda: not a.health()["checks"]["broker"]["ok"], 10, "broker down in /healthz")
        health = a.health()
        assert health["status"] == "degraded" and a.proc is not None and a.proc.alive()
        time.sleep(1.0)  # the adapter keeps polling and retrying meanwhile
        assert a.proc.alive()

        private_broker.start()
        back = time.monotonic()
        consumer = Consumer(private_broker.url, exchange, [rnis.bind_all("meas")])
        first = wait_for(lambda: consumer.collect(0.2, limit=1), 10, "messages after the restart")
        flowing_after = time.monotonic() - back
        consumer.close()
        assert flowing_after < 5.0, f"messages flowed again only after {flowing_after:.1f} s"
        rnis.RnisMeasurement.model_validate(first[0][1])
        assert a.health()["status"] == "ok"
        assert a.proc.alive()
    finally:
        assert a.stop() == 0, "a clean exit on SIGTERM"
    log = a.proc.output() if a.proc else ""
    assert "broker connection lost" in log and log.count("broker connected") >= 2


def test_ran_source_down_degrades_health_and_recovers(
    adapter: Adapter, source: FlexranSource
) -> None:
    wait_for(lambda: adapter.health()["status"] == "ok", 10, "healthy")
    source.control("fail", status=503)
    wait_for(lambda: not adapter.health()["checks"]["ran_source"]["ok"], 5, "ran_source down")
    health = adapter.health()
    assert health["status"] == "degraded"
    assert "HTTP 503" in health["checks"]["ran_source"]["detail"]
    r = adapter.get("/healthz", token=None)
    assert r.status_code == 503
    source.control("fail", status=0)
    wait_for(lambda: adapter.health()["checks"]["ran_source"]["ok"], 5, "ran_source back")
    metrics = adapter.get("/metrics", token=None).text
    failures = [
        line
        for line in metrics.splitlines()
        if line.startswith('rnis_poll_failures_total{reason="http_status"}')
    ]
    assert failures and float(failures[0].split()[-1]) >= 1


def test_ran_source_process_gone_then_back(tmp_path: Path, exchange: str) -> None:
    src = FlexranSource(tmp_path, ues=1)
    a = Adapter(tmp_path, src.url, exchange).start()
    try:
        wait_for(lambda: a.health()["checks"]["ran_source"]["ok"], 10, "source up")
        port = src.port
        src.proc.stop()
        wait_for(lambda: not a.health()["checks"]["ran_source"]["ok"], 5, "source down")
        assert "connection refused" in a.health()["checks"]["ran_source"]["detail"]
        time.sleep(1)
        assert a.proc is not None and a.proc.alive()
        src2 = FlexranSource(tmp_path, ues=1, port=port)  # the adapter's URL stays valid
        wait_for(lambda: a.health()["checks"]["ran_source"]["ok"], 10, "source back")
        src2.proc.stop()
    finally:
        a.stop()
