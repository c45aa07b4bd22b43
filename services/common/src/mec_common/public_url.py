"""Links that work from every client network: the public base URL and trusted proxies.

A service advertises one public base URL (``<PREFIX>PUBLIC_URL``) in every ``_links.*.href``,
``Location`` header and ProblemDetails ``instance``. A reverse proxy in front of it may
publish the API under another base; its ``X-Forwarded-Proto`` / ``X-Forwarded-Host`` /
``X-Forwarded-Prefix`` are honoured only when the request comes from one of
``<PREFIX>TRUSTED_PROXIES`` (CIDRs; empty = none), never from anyone else, who could
otherwise make the service hand out links to a host of their choosing.

For a trusted forwarded request, ``ForwardedBase`` makes the request look as the client
sent it (scheme, Host, root path) and rewrites the public base URL in the JSON answer and
its ``Location`` to the forwarded base.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def networks(cidrs: Iterable[str]) -> list[Network]:
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]


class ForwardedBase:
    """ASGI middleware: X-Forwarded-* from a trusted proxy (see the module docstring)."""

    def __init__(self, app: ASGIApp, public_url: str | None, trusted: list[Network]) -> None:
        self.app, self.public_url, self.trusted = app, (public_url or "").rstrip("/"), trusted

    def _forwarded_base(self, scope: Scope) -> tuple[str, str, str] | None:
        """(scheme, host, prefix) of a trusted proxy's request; None for anyone else."""
        client = scope.get("client")
        if scope["type"] != "http" or not client or not self.trusted:
            return None
        try:
            address = ipaddress.ip_address(client[0])
        except ValueError:
            return None
        if not any(address in net for net in self.trusted):
            return None
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("x-forwarded-host", "").split(",")[0].strip()
        if not host:
            return None
        scheme = headers.get("x-forwarded-proto", str(scope["scheme"])).split(",")[0].strip()
        prefix = headers.get("x-forwarded-prefix", "").split(",")[0].strip().rstrip("/")
        return scheme, host, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        forwarded = self._forwarded_base(scope)
        if forwarded is None:
            await self.app(scope, receive, send)
            return
        scheme, host, prefix = forwarded
        headers = [(k, v) for k, v in scope["headers"] if k != b"host"]
        scope = {**scope, "scheme": scheme, "root_path": prefix,
                 "headers": [*headers, (b"host", host.encode("latin-1"))]}  # fmt: skip
        base = f"{scheme}://{host}{prefix}"
        if not self.public_url or base == self.public_url:
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _Rewriting(send, self.public_url, base))


class _Rewriting:
    """A send that replaces the public base URL in a JSON body and its Location header."""

    def __init__(self, send: Send, public: str, forwarded: str) -> None:
        self.send, self.public, self.forwarded = send, public.encode(), forwarded.encode()
        self.start: Message | None = None
        self.body = b""

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.start = message
            return
        if message["type"] != "http.response.body" or self.start is None:
            await self.send(message)
            return
        self.body += message.get("body", b"")
        if message.get("more_body", False):
            return
        body = self.body.replace(self.public, self.forwarded)
        headers: list[Any] = []
        for name, value in self.start["headers"]:
            if name == b"content-length":
                value = str(len(body)).encode()
            elif name == b"location":
                value = value.replace(self.public, self.forwarded)
            headers.append((name, value))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": body})
