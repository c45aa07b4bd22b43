"""serve() in a real process: SIGTERM and SIGINT stop the server and the caller's clean-up
after serve() still runs (uvicorn alone raises the signal again, which ends the process)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
