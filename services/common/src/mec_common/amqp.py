"""AMQP 0-9-1 publisher and consumer on pika, for long-running services.

Both run their connection in a background thread, reconnect with capped exponential backoff
(the broker may restart; a service never crash-loops because of it) and report the broker's
state into a ``Health``. pika is not thread-safe, so other threads only hand work over:
``publish`` enqueues; ``bind``/``unbind``/``sync`` only record and wait under a lock, and the
consumer's thread applies the changes. None of them touches a descriptor in the caller's
thread: a PEP relay thread (private descriptor table, ``unshare(CLONE_FILES)``) binds a UE's
keys, and there the number of pika's wake-up socket (``add_callback_threadsafe``) belongs to
one of its connections (stray bytes on a UE's first flow, issue 20).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel

from mec_common.health import Health
from mec_common.logging import get_logger

log = get_logger(__name__)

OnMessage = Callable[[str, bytes, dict[str, Any]], None]
"""Consumer callback: (routing_key, body, headers). Runs in the consumer thread."""

_RECOVERABLE = (pika.exceptions.AMQPError, OSError)
BINDING_DELAY = 0.05  # seconds a binding change may wait for the consumer's thread


@dataclass
class Backoff:
    """Capped exponential backoff with jitter: 0.2 s, 0.4 s, ... up to ``cap``."""

    first: float = 0.2
    cap: float = 2.0
    _next: float = field(default=0.0, init=False)

    def reset(self) -> None:
        self._next = 0.0

    def next_delay(self) -> float:
        self._next = self.first if self._next == 0 else min(self._next * 2, self.cap)
        return float(self._next * random.uniform(0.8, 1.0))  # noqa: S311 - jitter, not crypto


def _declare_exchange(channel: BlockingChannel, exchange: str, exchange_type: str) -> None:
    channel.exchange_declare(exchange, exchange_type, durable=True)


class _Worker(ABC):
    """The thread, stop flag and reconnect loop both ends share."""

    def __init__(self, name: str, url: str, health: Health | None, health_name: str) -> None:
        self._params = pika.URLParameters(url)
        # Shows in `rabbitmqctl list_connections client_properties` (and lets tests find us).
        self._params.client_properties = {"connection_name": name}
        self._params.heartbeat = 30
        self._params.blocked_connection_timeout = 30
        self._health = health
        self._health_name = health_name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.connected = threading.Event()

    def start(self) -> None:
        if not self._stop.is_set():  # a worker closed before it started stays closed
            self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _ready(self) -> None:
        """Called by a session once it can carry messages."""
        self._report(True, f"connected to {self._params.host}:{self._params.port}")
        self.connected.set()

    def _report(self, ok: bool, detail: str) -> None:
        if self._health is not None:
            self._health.set(self._health_name, ok, detail)

    def _run(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            try:
                connection = pika.BlockingConnection(self._params)
            except _RECOVERABLE as exc:
                self._report(False, f"cannot connect: {exc!r}")
                self._stop.wait(backoff.next_delay())
                continue
            backoff.reset()
            try:
                self._session(connection)
            except _RECOVERABLE as exc:
                self._report(False, f"connection lost: {exc!r}")
                log.warning(
                    "amqp connection lost; reconnecting", worker=self._thread.name, error=repr(exc)
                )
            finally:
                self.connected.clear()
                _close_quietly(connection)
        self._report(False, "closed")

    @abstractmethod
    def _session(self, connection: pika.BlockingConnection) -> None:
        """Use one connection until it fails (raise) or ``close()`` is called."""


def _close_quietly(connection: pika.BlockingConnection) -> None:
    try:
        if connection.is_open:
            connection.close()
    except _RECOVERABLE:
        pass


class AmqpPublisher(_Worker):
    """Publishes to one exchange with publisher confirms.

    ``publish`` never blocks: messages wait in a bounded queue while the broker is away;
    when the queue is full the oldest message is dropped (and counted) — for measurements,
    fresh data matters more than old data.
    """

    def __init__(
        self,
        url: str,
        exchange: str,
        *,
        exchange_type: str = "topic",
        persistent: bool = False,
        max_pending: int = 10_000,
        health: Health | None = None,
        health_name: str = "amqp_publisher",
        name: str | None = None,
    ) -> None:
        super().__init__(name or f"amqp-pub-{exchange}", url, health, health_name)
        self.exchange = exchange
        self._exchange_type = exchange_type
        self._delivery_mode = 2 if persistent else 1
        self._pending: queue.Queue[tuple[str, bytes, dict[str, Any] | None]] = queue.Queue(
            max_pending
        )
        self.published = 0
        self.dropped = 0

    def publish(self, routing_key: str, body: bytes, headers: dict[str, Any] | None = None) -> None:
        item = (routing_key, body, headers)
        while True:
            try:
                self._pending.put_nowait(item)
                return
            except queue.Full:
                try:
                    self._pending.get_nowait()
                    self.dropped += 1
                except queue.Empty:
                    pass

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued message is confirmed by the broker."""
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._pending.unfinished_tasks == 0

    def _session(self, connection: pika.BlockingConnection) -> None:
        channel = connection.channel()
        _declare_exchange(channel, self.exchange, self._exchange_type)
        channel.confirm_delivery()
        self._ready()
        while not self._stop.is_set():
            try:
                routing_key, body, headers = self._pending.get(timeout=0.2)
            except queue.Empty:
                connection.process_data_events(time_limit=0)  # heartbeats
                continue
            properties = pika.BasicProperties(
                content_type="application/json",
                delivery_mode=self._delivery_mode,
                headers=headers,
                timestamp=int(time.time()),
            )
            try:
                channel.basic_publish(self.exchange, routing_key, body, properties)
            except _RECOVERABLE:
                self._requeue_front((routing_key, body, headers))
                raise
            finally:
                self._pending.task_done()
            self.published += 1

    def _requeue_front(self, item: tuple[str, bytes, dict[str, Any] | None]) -> None:
        # Not confirmed: send it again after reconnecting (at-least-once).
        with self._pending.mutex:
            self._pending.queue.appendleft(item)
            self._pending.unfinished_tasks += 1
            self._pending.not_empty.notify()


class AmqpConsumer(_Worker):
    """Consumes from a topic exchange through a private, bounded queue.

    The queue is exclusive and auto-deleted (it lives as long as the connection) and holds at
    most ``max_queue`` messages, dropping the oldest: a slow consumer sees fresh data, not a
    growing backlog. Bindings can change at run time and survive reconnects.
    """

    def __init__(
        self,
        url: str,
        exchange: str,
        bindings: list[str],
        on_message: OnMessage,
        *,
        exchange_type: str = "topic",
        max_queue: int = 10_000,
        prefetch: int = 500,
        health: Health | None = None,
        health_name: str = "amqp_consumer",
        name: str | None = None,
    ) -> None:
        super().__init__(name or f"amqp-sub-{exchange}", url, health, health_name)
        self.exchange = exchange
        self._exchange_type = exchange_type
        self._on_message = on_message
        self._bindings = set(bindings)
        self._max_queue = max_queue
        self._prefetch = prefetch
        self._lock = threading.Lock()
        self._applied = threading.Condition(self._lock)  # notified when changes are applied
        self._changes: list[tuple[str, bool]] = []  # (routing key, add) not applied yet
        self._requested = 0  # binding changes asked for so far
        self._done = 0  # of those, applied on the broker
        self._connected = False
        self.received = 0
        self.callback_errors = 0

    def set_endpoint(self, url: str, exchange: str) -> None:
        """Consume from another broker or exchange; before ``start()`` only (discovery)."""
        assert not self._thread.is_alive(), "set_endpoint after start"
        name = self._params.client_properties
        self._params = pika.URLParameters(url)
        self._params.client_properties = name
        self._params.heartbeat = 30
        self._params.blocked_connection_timeout = 30
        self.exchange = exchange

    @property
    def bindings(self) -> set[str]:
        with self._lock:
            return set(self._bindings)

    def bind(self, routing_key: str) -> None:
        self._change_binding(routing_key, add=True)

    def unbind(self, routing_key: str) -> None:
        self._change_binding(routing_key, add=False)

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until every ``bind``/``unbind`` called so far is in effect on the broker.

        False if not connected (the reconnect applies them) or on timeout.
        """
        with self._applied:
            target = self._requested
            return (
                self._applied.wait_for(lambda: not self._connected or self._done >= target, timeout)
                and self._connected
            )

    def _change_binding(self, routing_key: str, *, add: bool) -> None:
        with self._lock:
            if (routing_key in self._bindings) == add:
                return
            (self._bindings.add if add else self._bindings.discard)(routing_key)
            self._changes.append((routing_key, add))  # the consumer's thread applies it
            self._requested += 1

    def _apply_binding_changes(self, channel: BlockingChannel, queue_name: str) -> None:
        """In the consumer's thread. A failure ends the session; the reconnect re-binds all."""
        with self._lock:
            changes, self._changes = self._changes, []
            target = self._requested
        for routing_key, add in changes:
            if add:
                channel.queue_bind(queue_name, self.exchange, routing_key)
            else:
                channel.queue_unbind(queue_name, self.exchange, routing_key)
        with self._applied:
            self._done = target
            self._applied.notify_all()

    def _session(self, connection: pika.BlockingConnection) -> None:
        channel = connection.channel()
        _declare_exchange(channel, self.exchange, self._exchange_type)
        result = channel.queue_declare(
            "",
            exclusive=True,
            auto_delete=True,
            arguments={"x-max-length": self._max_queue, "x-overflow": "drop-head"},
        )
        queue_name = result.method.queue
        with self._lock:  # every binding is applied below: pending changes are included
            bindings = set(self._bindings)
            self._changes.clear()
            target = self._requested
        try:
            for key in bindings:
                channel.queue_bind(queue_name, self.exchange, key)
            with self._applied:
                self._connected, self._done = True, target
                self._applied.notify_all()
            channel.basic_qos(prefetch_count=self._prefetch)
            channel.basic_consume(queue_name, self._deliver, auto_ack=True)
            self._ready()
            while not self._stop.is_set():
                connection.process_data_events(time_limit=BINDING_DELAY)
                self._apply_binding_changes(channel, queue_name)
        finally:
            with self._applied:
                self._connected = False
                self._applied.notify_all()

    def _deliver(
        self,
        channel: BlockingChannel,
        method: Any,
        properties: pika.BasicProperties,
        body: bytes,
    ) -> None:
        self.received += 1
        try:
            self._on_message(method.routing_key, body, properties.headers or {})
        except Exception:  # a bad message must not kill the feed
            self.callback_errors += 1
            log.exception("amqp consumer callback failed", routing_key=method.routing_key)
