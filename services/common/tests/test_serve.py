"""serve() in a real process: SIGTERM and SIGINT stop the server and the caller's clean-up
after serve() still runs (uvicorn alone raises the signal again, which ends the process)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import fastapi.routing
import httpx
import pytest
import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.testclient import TestClient

from mec_common.api import create_app, serve
from mec_common.auth import TokenVerifier
from mec_common.config import ServiceSettings
from mec_common.health import Health
from mec_common.ports import free_port

SERVICE = textwrap.dedent(
    """
    import contextlib, sys
    from pathlib import Path
    from mec_common.api import create_app, serve
    from mec_common.auth import TokenVerifier
    from mec_common.config import ServiceSettings
    from mec_common.health import Health

    log = Path(sys.argv[1])

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        log.write_text(log.read_text() + "lifespan shutdown\\n")

    settings = ServiceSettings(http_host="127.0.0.1", http_port=int(sys.argv[2]))
    app = create_app(title="t", version="1", description="d", settings=settings,
                     health=Health(), token_verifier=TokenVerifier(["t"]), lifespan=lifespan)
    log.write_text("")
    try:
        serve(app, settings)
        log.write_text(log.read_text() + "serve returned\\n")
    finally:
        log.write_text(log.read_text() + "clean-up\\n")
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_server_and_the_clean_up_runs(tmp_path: Path, sig: int) -> None:
    log, port = tmp_path / "events", free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(log), str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # only a guard against a hang: at a load average of 10 the start took over 60 s
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.05)
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0]
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, output
    assert log.read_text().splitlines() == ["lifespan shutdown", "serve returned", "clean-up"]


def test_serve_builds_every_route_before_the_first_request(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:  # fmt: skip
    """FastAPI builds an included router's routes on the first request through it (on the
    platform ~0.3-0.5 s of the event loop, which a login flood's first request paid and
    everything queued behind it waited for: issue 20). serve() builds them beforehand."""
    built: list[object] = []
    lazy = fastapi.routing._IncludedRouter  # the class that builds routes on first use
    original = lazy._build_effective_context

    def counted(self: object, route: object) -> object:
        built.append(route)
        return original(self, route)

    monkeypatch.setattr(lazy, "_build_effective_context", counted)

    def app_with_a_router() -> FastAPI:
        settings = ServiceSettings(http_host="127.0.0.1", http_port=free_port())
        app = create_app(title="t", version="1", description="d", settings=settings,
                         health=Health(), token_verifier=TokenVerifier(["t"]))  # fmt: skip
        router = APIRouter(prefix="/things")

        @router.get("/one")
        async def one() -> dict[str, int]:
            return {"one": 1}

        app.include_router(router)
        return app

    def first_request(app: FastAPI) -> list[object]:
        built.clear()
        with TestClient(app) as client:
            assert client.get("/things/one").json() == {"one": 1}
        return list(built)

    assert first_request(app_with_a_router()), "FastAPI no longer builds routes lazily?"
    served: list[list[object]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: served.append(first_request(app)))
    app = app_with_a_router()
    serve(app, app.state.settings)
    assert served == [[]]
