"""The shared RabbitMQ in tests and experiments: fresh exchanges, removed afterwards."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def running() -> bool:
    return subprocess.run(["rabbitmqctl", "-q", "status"], capture_output=True).returncode == 0


def delete_exchange(name: str) -> None:
    resource = f'rabbit_misc:r(<<"/">>, exchange, <<"{name}">>)'
    erlang = f'rabbit_exchange:delete({resource}, false, <<"test">>).'
    subprocess.run(["rabbitmqctl", "-q", "eval", erlang], capture_output=True)


@contextmanager
def fresh_exchange(prefix: str, *suffixes: str) -> Iterator[str]:
    """A unique exchange name (the broker is shared); it and ``<name><suffix>`` are deleted
    at the end. Raises RuntimeError if the broker is not running."""
    if not running():
        raise RuntimeError("RabbitMQ is not running: start it with `make rabbitmq`")
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    try:
        yield name
    finally:
        for each in (name, *(f"{name}{s}" for s in suffixes)):
            delete_exchange(each)
