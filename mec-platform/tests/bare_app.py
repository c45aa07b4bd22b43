"""A MEC app with nothing but the standard library, for the trust tests.

It writes the environment it was given to ``env.json`` in its working directory, confirms
ready at once (within the platform's start-up grace), registers one service, writes
``ready`` and then waits to be stopped. Started by the platform's process backend.
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.request
from pathlib import Path
from typing import Any


def call(url: str, body: dict[str, Any] | bytes, headers: dict[str, str]) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return bytes(response.read())


def main() -> None:
    Path("env.json").write_text(json.dumps(dict(os.environ)))
    platform, app = os.environ["PLATFORM_URL"], os.environ["APP_INSTANCE_ID"]
    basic = base64.b64encode(f"{os.environ['CLIENT_ID']}:{os.environ['CLIENT_SECRET']}".encode())
    token = json.loads(call(f"{platform}/oauth2/token", b"grant_type=client_credentials",
                            {"Authorization": f"Basic {basic.decode()}",
                             "Content-Type": "application/x-www-form-urlencoded"}))  # fmt: skip
    auth = {"Authorization": f"Bearer {token['access_token']}",
            "Content-Type": "application/json"}  # fmt: skip
    call(f"{platform}/mec_app_support/v1/applications/{app}/confirm_ready",
         {"indication": "READY"}, auth)  # fmt: skip
    Path("confirmed").touch()
    service = {
        "serName": os.environ.get("BARE_SER_NAME", "bare"), "version": "v1",
        "state": "ACTIVE", "serializer": "JSON",
        "transportInfo": {"id": "bare", "name": "REST", "type": "REST_HTTP", "protocol": "HTTP",
                          "version": "1.1", "endpoint": {"uris": ["http://127.0.0.1:9/"]},
                          "security": {}},
    }  # fmt: skip
    call(f"{platform}/mec_service_mgmt/v1/applications/{app}/services", service, auth)
    Path("ready").touch()
    time.sleep(3600)


if __name__ == "__main__":
    main()
