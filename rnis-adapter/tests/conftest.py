"""Fixtures of the adapter's integration tests (helpers in rnis_helpers.py)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from rnis_helpers import (
    SHARED_AMQP,
    Adapter,
    CallbackServer,
    FlexranSource,
    PrivateBroker,
)


@pytest.fixture
def shared_amqp() -> str:
    try:
        pika.BlockingConnection(pika.URLParameters(SHARED_AMQP)).close()
    except pika.exceptions.AMQPError:
        pytest.fail("RabbitMQ is not running: start it with `make rabbitmq`")
    return SHARED_AMQP


@pytest.fixture
def exchange(shared_amqp: str) -> Iterator[str]:
    name = f"rnis-test-{uuid.uuid4().hex[:10]}"
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(shared_amqp))
    conn.channel().exchange_delete(name)
    conn.close()


@pytest.fixture
def source(tmp_path: Path) -> Iterator[FlexranSource]:
    s = FlexranSource(tmp_path, ues=2, cells=2)
    yield s
    s.proc.stop()


@pytest.fixture
def adapter(tmp_path: Path, source: FlexranSource, exchange: str) -> Iterator[Adapter]:
    a = Adapter(tmp_path, source.url, exchange).start()
    yield a
    a.stop()


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[PrivateBroker]:
    b = PrivateBroker(tmp_path)
    b.start()
    yield b
    b.stop()


@pytest.fixture
def callbacks() -> Iterator[CallbackServer]:
    c = CallbackServer()
    yield c
    c.close()
