"""AMQP helpers against the real RabbitMQ: routing, runtime bindings, reconnects, health."""

import ctypes
import os
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mec_common.amqp import AmqpConsumer, AmqpPublisher
from mec_common.health import Health

TIMEOUT = 15.0  # how long what should happen at once may take on a busy, shared machine


class Inbox:
    def __init__(self) -> None:
        self.items: list[tuple[str, bytes]] = []
        self.cond = threading.Condition()

    def __call__(self, key: str, body: bytes, headers: dict) -> None:
        with self.cond:
            self.items.append((key, body))
            self.cond.notify_all()

    def wait_for(
        self, pred: Callable[[list[tuple[str, bytes]]], bool], timeout: float = TIMEOUT
    ) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: pred(self.items), timeout)


class RecordingHealth(Health):
    """Remembers every failure reported, however short-lived."""

    def __init__(self) -> None:
        super().__init__()
        self.failures: list[tuple[str, str]] = []

    def set(self, name: str, ok: bool, detail: str = "", *, required: bool | None = None) -> None:
        if not ok:
            self.failures.append((name, detail))
        super().set(name, ok, detail, required=required)


def wait(pred: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def close_connection(name: str) -> None:
    """Force-close one of our connections on the shared broker (others are untouched)."""
    out = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pids = [
        line.split("\t")[0]
        for line in out.splitlines()
        if f'"{name}"' in line or f'<<"{name}">>' in line
    ]
    assert pids, f"connection {name} not found in:\n{out}"
    for pid in pids:
        subprocess.run(["rabbitmqctl", "-q", "close_connection", pid, "test"], check=True)


def test_publish_routes_by_topic_and_bindings_change_at_run_time(
    amqp_url: str, exchange: str
) -> None:
    """Unbound keys never arrive. A message to an unbound key is published before one to a
    bound key: the queue is FIFO, so once the second arrived the first would have too."""
    inbox, health = Inbox(), Health()
    consumer = AmqpConsumer(
        amqp_url, exchange, ["rnis.v1.meas.*.*.10_30_1_1"], inbox, health=health
    )
    publisher = AmqpPublisher(amqp_url, exchange, health=health)
    consumer.start()
    publisher.start()
    try:
        assert consumer.connected.wait(TIMEOUT) and publisher.connected.wait(TIMEOUT)
        assert health.ok()
        publisher.publish("rnis.v1.meas.10000-0.208950000000002.10_30_1_2", b'{"n":1}')
        publisher.publish("rnis.v1.meas.10000-0.208950000000001.10_30_1_1", b'{"n":2}')
        assert publisher.flush(TIMEOUT)
        assert inbox.wait_for(lambda items: len(items) >= 1, TIMEOUT)
        assert [b for _, b in inbox.items] == [b'{"n":2}'], "the unbound UE must not arrive"

        consumer.bind("rnis.v1.meas.*.*.10_30_1_2")
        consumer.unbind("rnis.v1.meas.*.*.10_30_1_1")
        assert consumer.sync(TIMEOUT), "the binding changes reached the broker"
        publisher.publish("rnis.v1.meas.10000-0.208950000000001.10_30_1_1", b'{"n":3}')
        publisher.publish("rnis.v1.meas.10000-0.208950000000002.10_30_1_2", b'{"n":4}')
        assert inbox.wait_for(lambda items: len(items) >= 2, TIMEOUT)
        assert [b for _, b in inbox.items] == [b'{"n":2}', b'{"n":4}']
    finally:
        publisher.close()
        consumer.close()


def written_by(fn: Callable[[], None]) -> bytes:
    """Run fn in a thread with a private descriptor table (unshare(CLONE_FILES), as the PEP's
    relay threads), where every socket number copied from the process is re-pointed at one
    socket of our own (in a relay thread those numbers belong to its connections and
    pipes); return what fn wrote to it."""
    written: list[bytes] = []

    def run() -> None:
        if ctypes.CDLL(None, use_errno=True).unshare(0x400) != 0:  # CLONE_FILES
            raise OSError(ctypes.get_errno(), "unshare(CLONE_FILES)")
        ours, peer = socket.socketpair()
        own = {ours.fileno(), peer.fileno()}
        copied = []
        for entry in Path("/proc/thread-self/fd").iterdir():
            fd = int(entry.name)
            try:
                is_socket = stat.S_ISSOCK(os.fstat(fd).st_mode)
            except OSError:
                continue  # the descriptor iterdir itself used
            if is_socket and fd not in own:
                os.dup2(ours.fileno(), fd)
                copied.append(fd)
        assert copied, "the consumer's sockets must be in the copied table"
        try:
            fn()
        finally:
            for fd in copied:
                os.close(fd)
            ours.close()
            peer.setblocking(False)
            try:
                written.append(peer.recv(4096))
            except BlockingIOError:
                written.append(b"")
            peer.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(TIMEOUT)
    assert written, "the private-table thread failed"
    return written[0]


def test_binding_changes_use_no_descriptor_of_the_calling_thread(
    amqp_url: str, exchange: str
) -> None:
    """The PEP binds a UE's radio keys from a relay thread, whose descriptor table is private:
    bind/unbind must only queue the change for the consumer's thread. They used pika's
    add_callback_threadsafe, which writes a wake-up byte to pika's socket by number; in a
    relay thread that number is one of its connections or pipes, so a UE's first flow got
    stray bytes ("Received HTTP/0.9", issue 20 defect 12)."""
    inbox = Inbox()
    consumer = AmqpConsumer(amqp_url, exchange, [], inbox)
    publisher = AmqpPublisher(amqp_url, exchange)
    consumer.start()
    publisher.start()
    try:
        assert consumer.connected.wait(TIMEOUT) and publisher.connected.wait(TIMEOUT)
        assert written_by(lambda: consumer.bind("k.a")) == b""
        assert written_by(lambda: consumer.unbind("k.a")) == b""
        assert written_by(lambda: consumer.bind("k.b")) == b""
        assert consumer.sync(TIMEOUT), "the binding changes reached the broker"
        publisher.publish("k.a", b"unbound")
        publisher.publish("k.b", b"bound")
        assert inbox.wait_for(lambda items: len(items) >= 1)
        assert inbox.items == [("k.b", b"bound")]
    finally:
        publisher.close()
        consumer.close()


def test_both_ends_reconnect_after_the_broker_drops_them(amqp_url: str, exchange: str) -> None:
    inbox, health = Inbox(), RecordingHealth()
    consumer = AmqpConsumer(
        amqp_url, exchange, ["k.#"], inbox, health=health, health_name="feed", name=f"{exchange}-c"
    )
    publisher = AmqpPublisher(
        amqp_url, exchange, health=health, health_name="pub", name=f"{exchange}-p"
    )
    consumer.start()
    publisher.start()
    try:
        assert consumer.connected.wait(TIMEOUT) and publisher.connected.wait(TIMEOUT)
        close_connection(f"{exchange}-c")
        close_connection(f"{exchange}-p")
        assert wait(lambda: {n for n, _ in health.failures} == {"feed", "pub"}), (
            "health must show the lost connections"
        )
        assert wait(health.ok), f"did not reconnect: {health.report()}"
        assert wait(lambda: consumer.connected.is_set() and publisher.connected.is_set())
        publisher.publish("k.after", b"after")
        assert inbox.wait_for(lambda items: ("k.after", b"after") in items)
    finally:
        publisher.close()
        consumer.close()


def test_publisher_keeps_messages_while_the_broker_is_unreachable(exchange: str) -> None:
    health = Health()
    publisher = AmqpPublisher(
        "amqp://guest:guest@127.0.0.1:1/%2F", exchange, max_pending=3, health=health
    )
    publisher.start()
    try:
        for i in range(5):
            publisher.publish("k", str(i).encode())
        assert wait(lambda: not health.ok())
        assert "cannot connect" in health.report()["checks"]["amqp_publisher"]["detail"]
        assert publisher.dropped == 2, "the oldest messages beyond max_pending are dropped"
    finally:
        publisher.close()


def test_an_optional_broker_stays_optional_when_the_client_reports(exchange: str) -> None:
    """A service that relays without its broker (the PEP's backlog feed) registers the
    check as not required; the client's reports must not make it required again."""
    health = Health()
    health.set("amqp", False, "connecting", required=False)
    publisher = AmqpPublisher("amqp://guest:guest@127.0.0.1:1/%2F", exchange, health=health,
                              health_name="amqp")  # fmt: skip
    publisher.start()
    try:
        assert wait(lambda: "cannot connect" in health.report()["checks"]["amqp"]["detail"])
        assert health.report()["checks"]["amqp"]["required"] is False
        assert health.ok(), "an optional broker that is down leaves the service healthy"
    finally:
        publisher.close()


def test_a_failing_callback_does_not_stop_the_feed(amqp_url: str, exchange: str) -> None:
    inbox = Inbox()

    def flaky(key: str, body: bytes, headers: dict) -> None:
        if body == b"bad":
            raise ValueError("malformed")
        inbox(key, body, headers)

    consumer = AmqpConsumer(amqp_url, exchange, ["#"], flaky)
    publisher = AmqpPublisher(amqp_url, exchange)
    consumer.start()
    publisher.start()
    try:
        assert consumer.connected.wait(TIMEOUT)
        publisher.publish("a", b"bad")
        publisher.publish("a", b"good")
        assert inbox.wait_for(lambda items: ("a", b"good") in items)
        assert consumer.callback_errors == 1
    finally:
        publisher.close()
        consumer.close()
