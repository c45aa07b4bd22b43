import subprocess
import uuid

import pytest

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@pytest.fixture
def amqp_url() -> str:
    if subprocess.run(["rabbitmqctl", "-q", "status"], capture_output=True).returncode != 0:
        pytest.fail("RabbitMQ is not running: start it with `make rabbitmq`")
    return AMQP_URL


@pytest.fixture
def exchange() -> str:
    """A fresh exchange per test, removed afterwards (tests share one broker)."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    subprocess.run(
        [
            "rabbitmqctl",
            "-q",
            "eval",
            f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{name}">>),'
            ' false, <<"test">>).',
        ],
        capture_output=True,
    )
