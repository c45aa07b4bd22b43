"""Websocket delivery of Mp1 notifications (MEC 009 clause 6.12a; an extension of MEC 011).

A subscription made with ``"websockNotifConfig": {"requestWebsocketUri": true}`` gets a
``websocketUri``: ``<subscription URI>/websocket``. The app opens it with its own bearer
token (deny by default: another app's token is 403, no token 401, as for every
``/applications/{appInstanceId}/...`` resource) and receives each notification as one text
message holding the JSON body an HTTP POST would carry. The socket itself was opened with
the app's token, so a notification over it carries none. A new connection replaces the
previous one; deleting the subscription (or the app's termination) closes it. While no
socket is open, notifications are not delivered (counted as failed): MEC 009 gives the
producer no obligation to hold them.

The sockets live in the web server's event loop; the registry hands notifications over from
any thread (``send`` returns a concurrent future, like ``Notifier.notify``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import JSONResponse
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from mec_common.api import ProblemError
from mec_common.logging import get_logger
from mec_platform.notifier import DELIVERED, FAILED

log = get_logger(__name__)

WEBSOCKET_SUFFIX = "/websocket"


def websocket_uri(subscription_href: str) -> str:
    """The websocketUri of a subscription: its URI with ws(s) and ``/websocket``."""
    scheme, rest = subscription_href.split("://", 1)
    return {"https": "wss", "http": "ws"}.get(scheme, scheme) + "://" + rest + WEBSOCKET_SUFFIX


@dataclass
class _Socket:
    websocket: WebSocket
    loop: asyncio.AbstractEventLoop


class WebsocketHub:
    """The open websocket of each subscription (by subscription URI), at most one."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = timeout_s
        self._sockets: dict[str, _Socket] = {}
        self._lock = threading.Lock()

    def send(self, href: str, body: dict[str, Any], kind: str) -> Future[bool]:
        with self._lock:
            socket = self._sockets.get(href)
        if socket is None:
            FAILED.labels(kind).inc()
            log.warning("notification not delivered: no websocket open", subscription=href)
            done: Future[bool] = Future()
            done.set_result(False)
            return done
        return asyncio.run_coroutine_threadsafe(self._write(href, socket, body, kind), socket.loop)

    async def _write(self, href: str, socket: _Socket, body: dict[str, Any], kind: str) -> bool:
        try:
            await asyncio.wait_for(
                socket.websocket.send_text(orjson.dumps(body).decode()), self._timeout
            )
        except Exception as exc:  # any failure of the socket: it is dropped
            FAILED.labels(kind).inc()
            log.warning("notification not delivered over the websocket", subscription=href,
                        err=repr(exc))  # fmt: skip
            await self.drop(href, socket)
            return False
        DELIVERED.labels(kind).inc()
        return True

    def open(self, href: str, socket: _Socket) -> _Socket | None:
        """Register ``socket`` for ``href``; returns the one it replaces (to be closed)."""
        with self._lock:
            old = self._sockets.get(href)
            self._sockets[href] = socket
        return old

    def forget(self, href: str, socket: _Socket) -> None:
        with self._lock:
            if self._sockets.get(href) is socket:
                del self._sockets[href]

    async def drop(self, href: str, socket: _Socket) -> None:
        self.forget(href, socket)
        with contextlib.suppress(RuntimeError):  # already closed
            await socket.websocket.close()

    def close(self, href: str) -> None:
        """End ``href``'s websocket, if open (the subscription is gone); from any thread."""
        with self._lock:
            socket = self._sockets.pop(href, None)
        if socket is not None:
            asyncio.run_coroutine_threadsafe(self.drop(href, socket), socket.loop)


async def _refuse(websocket: WebSocket, problem: ProblemError) -> None:
    """Answer the handshake with the ProblemDetails (or a plain 403 without the ASGI
    extension that allows a body)."""
    body = {"type": problem.type, "title": problem.title, "status": problem.status,
            "detail": problem.detail, "instance": str(websocket.url)}  # fmt: skip
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            JSONResponse(
                body, problem.status, media_type="application/problem+json", headers=problem.headers
            )
        )
    else:
        await websocket.close(code=1008)


def websocket_route(api: str) -> WebSocketRoute:
    """The websocket of a subscription of ``api`` (the registry's prefix)."""
    path = api + "/applications/{appInstanceId}/subscriptions/{subscriptionId}" + WEBSOCKET_SUFFIX

    async def endpoint(websocket: WebSocket) -> None:
        state = websocket.app.state
        app_instance_id = websocket.path_params["appInstanceId"]
        sub_id = websocket.path_params["subscriptionId"]
        try:
            scheme, _, token = websocket.headers.get("authorization", "").partition(" ")
            principal = state.token_verifier.verify(token) if scheme == "Bearer" else None
            if principal is None:
                raise ProblemError(401, "a valid bearer token is required",
                                   headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
            body = await asyncio.to_thread(
                state.registry.subscription, principal, api, app_instance_id, sub_id, False
            )
            if "websockNotifConfig" not in body:
                raise ProblemError(409, f"subscription {sub_id} delivers to its "
                                   "callbackReference, not over a websocket")  # fmt: skip
        except ProblemError as problem:
            await _refuse(websocket, problem)
            return
        href = body["_links"]["self"]["href"]
        hub: WebsocketHub = state.websockets
        await websocket.accept()
        socket = _Socket(websocket, asyncio.get_running_loop())
        replaced = hub.open(href, socket)
        if replaced is not None:
            await hub.drop(href, replaced)
        log.info("websocket opened", subscription=href)
        try:  # MEC 009 defines no messages from the consumer: read only to see it go
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            hub.forget(href, socket)
            log.info("websocket closed", subscription=href)

    return WebSocketRoute(path, endpoint)
