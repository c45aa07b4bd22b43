"""Delivery of notifications (HTTP POST to callbacks), retried with backoff.

One asyncio loop (uvloop) in its own thread sends everything, so request handlers (sync
or async) hand notifications over without waiting; 100 subscribers are served
concurrently. aiohttp, not httpx, sends them: on this machine httpx took ~9 ms of CPU per
POST against ~1 ms for aiohttp, which decided the fan-out time (docs/results.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
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


class Notifier:
    def __init__(
        self, token: Callable[[str], str], *, attempts: int = 5, backoff_s: float = 0.5
    ) -> None:
        self._token = token
        self._attempts, self._backoff = attempts, backoff_s
        self._loop = uvloop.new_event_loop()
        self._session: aiohttp.ClientSession | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="notifier", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def notify(self, url: str, body: dict[str, Any], kind: str, subscription: str) -> Future[bool]:
        """Send ``body`` to ``url`` in the background with the token of ``subscription`` (its
        URI); the future tells if it arrived."""
        return self.submit(self._deliver(url, orjson.dumps(body), kind, subscription))

    async def _deliver(self, url: str, payload: bytes, kind: str, subscription: str) -> bool:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256),
                timeout=aiohttp.ClientTimeout(total=5),
            )
        delay = self._backoff
        headers = {"Content-Type": "application/json"}
        for attempt in range(1, self._attempts + 1):
            headers["Authorization"] = f"Bearer {self._token(subscription)}"
            try:
                async with self._session.post(url, data=payload, headers=headers) as r:
                    await r.read()
                    status = r.status
                if status < 300:
                    DELIVERED.labels(kind).inc()
                    return True
                reason = f"HTTP {status}"
                if 400 <= status < 500 and status not in (408, 429):
                    break  # the receiver refuses it; retrying will not help
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
            if attempt < self._attempts:
                log.info("notification failed; retrying", url=url, reason=reason, delay=delay)
                await asyncio.sleep(delay)
                delay *= 2
        FAILED.labels(kind).inc()
        log.warning("notification given up", url=url, kind=kind, reason=reason)
        return False

    def close(self) -> None:
        """Stop: deliveries still retrying are abandoned."""
        self.submit(self._shutdown()).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    async def _shutdown(self) -> None:
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
