"""Delivery of notifications (HTTP POST to callbacks), retried with backoff.

One asyncio loop (uvloop) in its own thread sends everything, so request handlers (sync
or async) hand notifications over without waiting. Each receiver (the callback's scheme,
host and port) has its own bounded queue and at most ``per_receiver`` deliveries in
flight, each attempt bounded by ``timeout_s``: a slow or stalled receiver delays only its
own notifications (issue 20: 1,000 stalled receivers, docs/results.md); when its queue is
full, its newest notifications are dropped and counted. aiohttp, not httpx, sends them: on
this machine httpx took ~9 ms of CPU per POST against ~1 ms for aiohttp, which decided the
fan-out time (docs/results.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import random
import socket
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import uvloop
from prometheus_client import Counter

from mec_common.logging import get_logger

log = get_logger(__name__)

DELIVERED = Counter("mec_notifications_delivered_total", "notifications delivered", ["kind"])
FAILED = Counter("mec_notifications_failed_total", "notifications given up after retries", ["kind"])


class CallbackNotAllowedError(ValueError):
    pass


def check_callback(url: str, networks: list[str]) -> None:
    """Refuse callbacks that are not http(s) or point outside the allowed networks."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallbackNotAllowedError("callbackReference must be an absolute http(s) URI")
    if not networks:
        return
    allowed = [ipaddress.ip_network(n, strict=False) for n in networks]
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 80, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise CallbackNotAllowedError(f"callback host {parts.hostname} does not resolve") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not any(address in net for net in allowed):
            raise CallbackNotAllowedError(
                f"callback address {address} is not in an allowed network"
            )


@dataclass
class _Delivery:
    url: str
    payload: bytes
    kind: str
    subscription: str
    done: Future[bool]


@dataclass
class _Receiver:
    queue: deque[_Delivery] = field(default_factory=deque)
    workers: int = 0
    # Several deliveries in flight only to a receiver whose last one arrived: one that is
    # new or failing gets one at a time, so a thousand stalled receivers cost a thousand
    # connections, not thousands.
    answering: bool = False


class Notifier:
    def __init__(
        self,
        token: Callable[[str], str],
        *,
        attempts: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 5.0,
        per_receiver: int = 4,
        queue_size: int = 1000,
    ) -> None:
        self._token = token
        self._attempts, self._backoff, self._timeout = attempts, backoff_s, timeout_s
        self._per_receiver, self._queue_size = per_receiver, queue_size
        self._receivers: dict[str, _Receiver] = {}  # only touched in the loop's thread
        self._loop = uvloop.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="notifier", daemon=True)
        self._thread.start()

    @property
    def timeout_s(self) -> float:
        """How long one delivery attempt may take."""
        return self._timeout

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def notify(self, url: str, body: dict[str, Any], kind: str, subscription: str) -> Future[bool]:
        """Send ``body`` to ``url`` in the background with the token of ``subscription`` (its
        URI); the future tells if it arrived."""
        done: Future[bool] = Future()
        delivery = _Delivery(url, orjson.dumps(body), kind, subscription, done)
        self._loop.call_soon_threadsafe(self._enqueue, delivery)
        return done

    def _enqueue(self, delivery: _Delivery) -> None:
        parts = urlsplit(delivery.url)
        key = f"{parts.scheme}://{parts.hostname}:{parts.port}"
        receiver = self._receivers.setdefault(key, _Receiver())
        if len(receiver.queue) >= self._queue_size:
            FAILED.labels(delivery.kind).inc()
            log.warning("notification dropped: the receiver's queue is full", receiver=key,
                        kind=delivery.kind, queued=len(receiver.queue))  # fmt: skip
            delivery.done.set_result(False)
            return
        receiver.queue.append(delivery)
        if receiver.workers < (self._per_receiver if receiver.answering else 1):
            receiver.workers += 1
            self._loop.create_task(self._work(key, receiver))

    async def _work(self, key: str, receiver: _Receiver) -> None:
        """Deliver the receiver's notifications until its queue is empty."""
        try:
            while receiver.queue:
                delivery = receiver.queue.popleft()
                ok = await self._deliver(delivery)
                receiver.answering = ok
                delivery.done.set_result(ok)
                if not ok and receiver.workers > 1:
                    return  # the others go on, one at a time
        finally:
            receiver.workers -= 1
            if not receiver.workers and not receiver.queue:
                self._receivers.pop(key, None)

    async def _deliver(self, d: _Delivery) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),  # bounded per receiver, above
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            )
        delay = self._backoff
        headers = {"Content-Type": "application/json"}
        for attempt in range(1, self._attempts + 1):
            headers["Authorization"] = f"Bearer {self._token(d.subscription)}"
            try:
                async with self._session.post(d.url, data=d.payload, headers=headers) as r:
                    await r.read()
                    status = r.status
                if status < 300:
                    DELIVERED.labels(d.kind).inc()
                    return True
                reason = f"HTTP {status}"
                if 400 <= status < 500 and status not in (408, 429):
                    break  # the receiver refuses it; retrying will not help
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
            if attempt < self._attempts:
                log.info("notification failed; retrying", url=d.url, reason=reason, delay=delay)
                # jittered: receivers that failed together do not all retry together
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))  # noqa: S311 - not crypto
                delay *= 2
        FAILED.labels(d.kind).inc()
        log.warning("notification given up", url=d.url, kind=d.kind, reason=reason)
        return False

    def close(self) -> None:
        """Stop: deliveries still retrying are abandoned."""
        try:
            self.submit(self._shutdown()).result(timeout=10)
        except TimeoutError:  # thousands of stalled deliveries on a busy machine
            log.warning("notifier shutdown timed out; abandoning the rest")
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _shutdown(self) -> None:
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
