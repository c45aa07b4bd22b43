"""A minimal MEC app for the lifecycle tests, built the way our services do it.

Run by the platform's process backend: it reads PLATFORM_URL, APP_INSTANCE_ID, CLIENT_ID
and CLIENT_SECRET, registers one REST service through ``mec_common.mp1`` and serves the
app-termination callback; on termination it deregisters, confirms and exits.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI

from mec_common.auth import TokenVerifier, jwks_key_lookup
from mec_common.health import Health
from mec_common.mp1 import MecAppRegistration, Mp1Client, termination_router
from mec_common.ports import free_port


def main() -> None:
    platform = os.environ["PLATFORM_URL"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    client = Mp1Client(platform, os.environ["APP_INSTANCE_ID"], os.environ["CLIENT_ID"],
                       os.environ["CLIENT_SECRET"])  # fmt: skip
    service = {
        "serName": os.environ.get("SAMPLE_SER_NAME", "sample"),
        "version": "v1",
        "state": "ACTIVE",
        "serializer": "JSON",
        "transportInfo": {
            "id": "sample-rest", "name": "REST", "type": "REST_HTTP", "protocol": "HTTP",
            "version": "1.1", "endpoint": {"uris": [f"{base}/sample/v1"]}, "security": {}},
    }  # fmt: skip
    server: uvicorn.Server | None = None

    def exit_server() -> None:
        assert server is not None
        server.should_exit = True

    registration = MecAppRegistration(
        client, [service], health=Health(),
        termination_callback_url=f"{base}/mec/notifications/app_termination",
        on_termination=exit_server, retry_initial=0.1, retry_max=1.0,
    )  # fmt: skip
    verifier = TokenVerifier([], jwt_keys=jwks_key_lookup(f"{platform}/oauth2/jwks"))

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        registration.start()
        yield
        # Here, not after server.run(): uvicorn re-raises SIGTERM once it has shut down.
        registration.stop()  # a no-op if the termination notification already cleaned up
        print("sample app exited", flush=True)

    app = FastAPI(lifespan=lifespan)
    app.include_router(termination_router(registration, verifier))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None))
    server.run()


if __name__ == "__main__":
    main()
