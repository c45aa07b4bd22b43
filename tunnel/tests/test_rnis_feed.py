"""The tunnel's AMQP feeds on the real RabbitMQ. In: the rnis scheduler's input, the RNIS
adapter's per-UE measurements (mec_common.bus.rnis, the real schema) for the UE address of
each path, shown per path, what cannot be read ignored. Out: the backlog toward the UE in
the PEP's schema (mec_common.bus.backlog), the path manager's queue input."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import httpx
import pika
import pytest

from mec_common.bus.backlog import PepBacklog, backlog_routing_key
from mec_common.bus.rnis import RnisMeasurement
from mts_lab.tunnel.bed import start_here

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for a TUN")
AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_radio_state_per_path_from_the_rnis_feed(tmp_path: Path) -> None:
    exchange = f"rnis-tunnel-test-{secrets.token_hex(4)}"
    env = {"TUNNEL_API_TOKENS": "t", "TUNNEL_AMQP_URL": AMQP, "TUNNEL_RNIS_EXCHANGE": exchange,
           "TUNNEL_SCHEDULER": "rnis"}  # fmt: skip
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))  # before the tunnel:
    channel = connection.channel()  # no broker, no tunnel left running
    proc, base = start_here(tmp_path, env, rnis_ue="10.30.1.7")
    auth = {"Authorization": "Bearer t"}
    try:
        deadline = time.monotonic() + 30
        while True:  # the tunnel declares the exchange and binds once it is connected
            try:
                if httpx.get(f"{base}/healthz").json()["checks"]["rnis_feed"]["ok"]:
                    break
            except (httpx.HTTPError, KeyError):
                pass
            assert time.monotonic() < deadline, (tmp_path / "tunnel.log").read_text()
            time.sleep(0.2)
        m = RnisMeasurement(cell="10000-1", bs_id=10000, rnti=71, ue_ipv4="10.30.1.7",
                            observed_ns=time.time_ns(), cell_ues=1, rapid_capacity_bps=12_000_000,
                            rlc_queue_bytes=34_000)  # fmt: skip
        other = m.model_copy(update={"ue_ipv4": "10.30.1.8", "rapid_capacity_bps": 1})
        messages = [
            (b"{not json", m.routing_key()),  # unreadable: ignored
            (other.model_dump_json().encode(), other.routing_key()),  # another UE: not bound
            (m.model_dump_json().encode(), m.routing_key()),
        ]
        for body, key in messages:
            channel.basic_publish(exchange, key, body)
        deadline = time.monotonic() + 10
        while (
            radio := httpx.get(f"{base}/tunnel/v1/paths/1", headers=auth).json().get("radio")
        ) is None:
            assert time.monotonic() < deadline, "no radio state on the path"
            time.sleep(0.1)
        assert radio["ue"] == "10.30.1.7"
        assert radio["capacityBps"] == 12_000_000 and radio["queueBytes"] == 34_000, radio
        assert httpx.get(f"{base}/tunnel/v1/scheduler", headers=auth).json()["name"] == "rnis"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        channel.exchange_delete(exchange)
        connection.close()
    assert proc.returncode == 0


def test_backlog_feed_speaks_the_peps_schema(tmp_path: Path) -> None:
    """The path manager's queue input from the tunnel: ``pep.v1.backlog.<ue>`` messages that
    the path manager's own model reads (nothing queued or read yet; a probe may be in flight)."""
    exchange = f"backlog-tunnel-test-{secrets.token_hex(4)}"
    connection = pika.BlockingConnection(pika.URLParameters(AMQP))
    channel = connection.channel()
    channel.exchange_declare(exchange, "topic", durable=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    channel.queue_bind(queue, exchange, backlog_routing_key("10.30.1.7"))
    env = {"TUNNEL_API_TOKENS": "t", "TUNNEL_AMQP_URL": AMQP,
           "TUNNEL_BACKLOG_EXCHANGE": exchange}  # fmt: skip
    proc, _ = start_here(tmp_path, env, rnis_ue="10.30.1.7")
    try:
        deadline = time.monotonic() + 30
        while (got := channel.basic_get(queue, auto_ack=True))[0] is None:
            assert proc.poll() is None, (tmp_path / "tunnel.log").read_text()
            assert time.monotonic() < deadline, "no backlog message"
            time.sleep(0.1)
        message = PepBacklog.model_validate_json(got[2])
        assert str(message.ue) == "10.30.1.7", message
        assert message.unsent_bytes == message.received_bytes == 0, message
        assert message.backlog_bytes < 100, message  # a probe (48 B) may be in flight
        assert got[1].headers == {"schema": 2}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        channel.exchange_delete(exchange)
        connection.close()


def test_backlog_feed_without_a_broker_is_refused(tmp_path: Path) -> None:
    proc, _ = start_here(tmp_path, {"TUNNEL_BACKLOG_EXCHANGE": "pep"})
    assert proc.wait(15) != 0
    assert "BACKLOG_EXCHANGE needs TUNNEL_AMQP_URL" in (tmp_path / "tunnel.log").read_text()
