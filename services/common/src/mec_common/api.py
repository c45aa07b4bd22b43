"""The REST conventions of every service, in one place.

``create_app`` gives a FastAPI app with:
- ETSI ``ProblemDetails`` bodies (``application/problem+json``) for every error,
- ``GET /healthz`` (no auth; 503 when a required dependency is down),
- ``GET /metrics`` (Prometheus; no auth),
- OpenAPI at ``/openapi.json`` and Swagger UI at ``/docs`` served from local assets,
  so it works on testbeds without internet access,
- ``require_token``: a dependency that admits only valid bearer tokens, and
  ``service_access``: the same plus the scopes a MEC service's API asks (docs/security.md),
- a request-body limit applied before parsing and before auth (413), and refusal of JSON
  bodies with duplicate keys (400),

and ``serve`` runs it with a deadline for request headers (slowloris).
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

try:  # uvicorn's faster parser when installed (it is, with this workspace), else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _HttpProtocol
except ImportError:  # pragma: no cover
    from uvicorn.protocols.http.h11_impl import (  # type: ignore[assignment]
        H11Protocol as _HttpProtocol,
    )

from mec_common.auth import Principal, TokenVerifier
from mec_common.config import ServiceSettings
from mec_common.health import Health
from mec_common.public_url import ForwardedBase, networks

PROBLEM_JSON = "application/problem+json"


class ProblemDetails(BaseModel):
    """RFC 7807 problem, as ETSI MEC APIs use it."""

    type: str | None = Field(None, description="URI reference identifying the problem type")
    title: str | None = Field(None, description="short, human-readable summary")
    status: int = Field(..., description="HTTP status code")
    detail: str = Field(..., description="explanation specific to this occurrence")
    instance: str | None = Field(None, description="absolute URI of the request that failed")


class ProblemError(Exception):
    """Raise from a handler to answer with a ProblemDetails body."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        title: str | None = None,
        type: str = "about:blank",  # the ETSI field name
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.detail, self.type, self.headers = status, detail, type, headers
        self.title = title or HTTPStatus(status).phrase


def problem_response(
    request: Request,
    status: int,
    detail: str,
    *,
    title: str | None = None,
    type: str = "about:blank",
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ProblemDetails(
        type=type,
        title=title or HTTPStatus(status).phrase,
        status=status,
        detail=detail,
        instance=_absolute_uri(request),
    )
    return JSONResponse(
        body.model_dump(exclude_none=True), status, headers=headers, media_type=PROBLEM_JSON
    )


def _absolute_uri(request: Request) -> str:
    """ETSI MEC types ProblemDetails.instance as an absolute URI.

    The service's public URL (``public_url`` of ``create_app``) wins over the Host header,
    so the URI is right behind a reverse proxy or a Kubernetes Service.
    """
    base = getattr(request.app.state, "public_url", None) or str(request.base_url)
    raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return base.rstrip("/") + raw_path.decode("ascii", "replace")


# Declared on routes so the OpenAPI document shows ProblemDetails for error responses.
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ProblemDetails, "description": HTTPStatus(code).phrase}
    for code in (400, 401, 403, 404, 409, 422, 429, 503)
}


def _install_problem_handlers(app: FastAPI) -> None:
    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProblemError)
        return problem_response(
            request, exc.status, exc.detail, title=exc.title, type=exc.type, headers=exc.headers
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(
            request, exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None)
        )

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return problem_response(request, 400, _describe_validation(exc))

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)


def _describe_validation(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


_bearer = HTTPBearer(auto_error=False, description="Bearer token (static or platform-issued)")


def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """Admit a request only with a valid bearer token; answers 401 otherwise."""
    verifier: TokenVerifier = request.app.state.token_verifier
    principal = verifier.verify(credentials.credentials) if credentials else None
    if principal is None:
        raise ProblemError(
            401,
            "a valid bearer token is required" if credentials else "missing bearer token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return principal


AuthenticatedPrincipal = Annotated[Principal, Depends(require_token)]


_READS = frozenset({"GET", "HEAD"})


def service_access(ser_name: str) -> Callable[[Request, Principal], Principal]:
    """The access rule of a MEC service's API (PEP, path manager), as a dependency: apps that
    declared ``ser_name`` in their AppD may read (GET); only operators (the admin, the
    platform) may change anything. Everyone else: 403."""

    def dependency(request: Request, principal: AuthenticatedPrincipal) -> Principal:
        if request.method in _READS:
            if not principal.may_consume(ser_name):
                raise ProblemError(
                    403, f"this token is not for the {ser_name} service: the app's AppD must "
                    f"list {ser_name} in appServiceRequired or appServiceOptional")  # fmt: skip
        elif not principal.is_operator:
            raise ProblemError(403, f"changing the {ser_name} service needs the platform's or "
                               "the admin's token")  # fmt: skip
        return principal

    return dependency


def create_app(
    *,
    title: str,
    version: str,
    description: str,
    settings: ServiceSettings,
    health: Health,
    token_verifier: TokenVerifier,
    public_url: str | None = None,
    openapi_tags: list[dict[str, Any]] | None = None,
    **fastapi_kwargs: Any,
) -> FastAPI:
    """A FastAPI app that follows the suite's conventions (see the module docstring).

    ``public_url`` is the base URL clients use to reach the service (default: the request's).
    Every route rejects query parameters it does not define (``mec_common.rest_policy``).
    """
    from mec_common.rest_policy import reject_unknown_query  # it imports ProblemError from here

    app = FastAPI(
        title=title,
        version=version,
        description=description,
        docs_url=None,
        redoc_url=None,
        openapi_tags=openapi_tags,
        responses=PROBLEM_RESPONSES,
        dependencies=[Depends(reject_unknown_query), *fastapi_kwargs.pop("dependencies", [])],
        **fastapi_kwargs,
    )
    app.state.settings = settings
    app.state.health = health
    app.state.token_verifier = token_verifier
    app.state.public_url = public_url = public_url or settings.public_url
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes,
                       timeout_s=settings.header_timeout_s * 3)  # fmt: skip
    if settings.trusted_proxies:
        app.add_middleware(ForwardedBase, public_url=public_url,
                           trusted=networks(settings.trusted_proxies))  # fmt: skip
    _install_problem_handlers(app)
    _install_docs(app, title)

    @app.get("/healthz", tags=["operations"], summary="Health of the service and its dependencies")
    async def healthz() -> JSONResponse:  # in the loop: no worker-thread round trip to wait for
        report = health.report()
        return JSONResponse(report, 200 if report["status"] == "ok" else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics")
    def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app


ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class DuplicateKeyError(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(f"duplicate key {key!r} in the JSON body")
        obj[key] = value
    return obj


class BodyLimit:
    """Reads the whole request body before anything else (routing, auth, parsing) runs.

    A body over ``max_bytes`` (by Content-Length or as it arrives) is refused with 413 and
    not read further; a body that takes longer than ``timeout_s`` to arrive gets 408; a
    JSON body with a duplicate key gets 400 (one meaning per document, whoever parses it).
    """

    def __init__(self, app: ASGIApp, *, max_bytes: int, timeout_s: float) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            await self._refuse(scope, send, 413, f"the request body exceeds {self.max_bytes} bytes")
            return
        try:
            body, disconnected = await asyncio.wait_for(self._read(receive), self.timeout_s)
        except TimeoutError:
            await self._refuse(scope, send, 408, "the request body arrived too slowly")
            return
        except _TooLargeError:
            await self._refuse(scope, send, 413, f"the request body exceeds {self.max_bytes} bytes")
            return
        if disconnected:
            return
        if body and b"json" in headers.get(b"content-type", b""):
            try:
                json.loads(body, object_pairs_hook=_no_duplicate_keys)
            except DuplicateKeyError as exc:
                await self._refuse(scope, send, 400, str(exc))
                return
            except ValueError:
                pass  # not JSON: the route's own parsing says so
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Any) -> tuple[bytes, bool]:
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return b"", True
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _TooLargeError
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), False

    async def _refuse(self, scope: dict[str, Any], send: Any, status: int, detail: str) -> None:
        # Connection: close: the unread rest of the body must not be taken as a next request.
        response = problem_response(Request(scope), status, detail,
                                    headers={"Connection": "close"})  # fmt: skip
        await response(scope, _no_receive, send)


class _TooLargeError(Exception):
    pass


async def _no_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


def _replay(body: bytes, receive: Any) -> Callable[[], Awaitable[dict[str, Any]]]:
    sent = False

    async def replayed() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        message: dict[str, Any] = await receive()  # waits for the disconnect
        return message

    return replayed


def _install_docs(app: FastAPI, title: str) -> None:
    try:
        from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - a declared dependency
        swagger_ui_path = None
    if swagger_ui_path is not None:
        app.mount("/docs-static", StaticFiles(directory=str(swagger_ui_path)), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title} — API",
            swagger_js_url="/docs-static/swagger-ui-bundle.js",
            swagger_css_url="/docs-static/swagger-ui.css",
            swagger_favicon_url="/docs-static/favicon-32x32.png",
        )


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stopped(BaseException):
    """The SIGTERM or SIGINT that stopped the server, raised again by uvicorn."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


class HeaderDeadline(_HttpProtocol):
    """uvicorn's HTTP/1.1 protocol with a deadline for each request's headers.

    uvicorn has none: a client that sends a header line now and then (slowloris) holds its
    connection forever. The timer runs while the connection waits for a request's headers
    (from connect, and after each response) and closes the connection when it fires.
    """

    header_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._waiting_for_headers() and self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _waiting_for_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        if self._waiting_for_headers() and not self.transport.is_closing():
            self.transport.close()


def uvicorn_options(settings: ServiceSettings) -> dict[str, Any]:
    """The uvicorn settings every service runs with (``serve``, and servers run in tests).

    ``proxy_headers`` off: uvicorn would otherwise take the client address from
    ``X-Forwarded-For`` of any request from 127.0.0.1, so a local client could pick the
    address its login budget is counted against. Forwarded headers have one owner,
    ``public_url.ForwardedBase``, and only from the configured trusted proxies."""
    protocol = type("HeaderDeadline", (HeaderDeadline,),
                    {"header_timeout_s": settings.header_timeout_s})  # fmt: skip
    return {"http": protocol, "timeout_keep_alive": 5, "log_config": None, "access_log": False,
            "proxy_headers": False}  # fmt: skip


def build_routes_now(app: FastAPI) -> None:
    """Build every route before serving. FastAPI builds an included router's routes
    (dependencies, pydantic validators) on the first request that passes through it: on
    the platform ~0.3-0.5 s of the event loop, paid by whichever request came first and
    by everything queued behind it (measured: the first token request 367 ms, the next
    60 ms). Generating the OpenAPI document walks every route and builds them all."""
    app.openapi()


def serve(app: FastAPI, settings: ServiceSettings, **uvicorn_kwargs: Any) -> None:
    """Run the app with uvicorn on the configured host and port until SIGTERM or SIGINT.

    Returns once the server has stopped (the app's lifespan shutdown has run), so that a
    caller's clean-up after it (``try: serve(...) finally: close()``) runs. uvicorn alone
    raises the signal again after a graceful stop, which by default ends the process
    before any code after ``uvicorn.run``.
    """
    build_routes_now(app)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:  # signal handlers can only be set from the main thread
        previous = {sig: signal.signal(sig, _raise_stopped) for sig in _STOP_SIGNALS}
    try:
        uvicorn.run(
            app,
            host=settings.http_host,
            port=settings.http_port,
            **(uvicorn_options(settings) | uvicorn_kwargs),  # log_config=None: our logging
        )
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
