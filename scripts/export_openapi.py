"""Export the OpenAPI document of every service into docs/api/ (or check that they match).

Each service is started for real, standalone (no platform), on a free loopback port with a
throwaway state directory; its ``/openapi.json`` is what a user of that build gets.

    uv run python scripts/export_openapi.py          # write docs/api/<service>.openapi.json
    uv run python scripts/export_openapi.py --check  # exit 1 if a committed one is outdated
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from mec_common.ports import free_port

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs/api"
VENV_BIN = REPO / ".venv/bin"

# service -> (command, environment prefix, extra environment)
SERVICES: dict[str, tuple[list[str], str, dict[str, str]]] = {
    "mec-platform": ([str(VENV_BIN / "mec-platform"), "serve"], "PLATFORM_", {}),
    "rnis-adapter": ([str(REPO / "build/bin/rnis-adapter"), "serve"], "RNIS_", {
        "RNIS_FLEXRAN_URL": "http://127.0.0.1:9",  # nothing there: the API serves anyway
        "RNIS_PUBLIC_URL": "http://127.0.0.1:8101",  # its servers[] URL, not the free port
    }),
    "pep": ([str(VENV_BIN / "pep"), "serve"], "PEP_", {
        "PEP_TPROXY_INSTALL_RULES": "false",
        "PEP_MELD_INSTANCE": "openapi",
    }),
    "path-manager": ([str(VENV_BIN / "path-manager"), "serve"], "PM_", {}),
    "flow-rtt": ([str(VENV_BIN / "flowrtt"), "serve"], "FLOWRTT_", {}),
    "dashboard": ([str(VENV_BIN / "mec-dashboard"), "serve"], "DASHBOARD_", {
        "DASHBOARD_PUBLIC_URL": "http://127.0.0.1:8104",  # not the host name of the machine
    }),
}  # fmt: skip

# Services whose document is printed by the binary instead of fetched from a running one:
# the tunnel's data plane needs root, a TUN and a peer; `tunnel openapi` prints the document
# its /openapi.json serves (the same function, with the default public URL).
PRINTED: dict[str, list[str]] = {"tunnel": [str(REPO / "build/bin/tunnel"), "openapi"]}


def fetch(name: str) -> dict[str, object]:
    if name in PRINTED:
        printed = subprocess.run(PRINTED[name], capture_output=True, check=True).stdout
        return dict(json.loads(printed))
    command, prefix, extra = SERVICES[name]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"openapi-{name}-") as state:
        env = {
            **os.environ,
            f"{prefix}HTTP_HOST": "127.0.0.1",
            f"{prefix}HTTP_PORT": str(port),
            f"{prefix}STATE_DIR": state,
            f"{prefix}LOG_LEVEL": "WARNING",
            **extra,
        }
        log = Path(state) / "log"
        with log.open("wb") as out:
            proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return wait_for_document(f"http://127.0.0.1:{port}/openapi.json", proc, log)
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


# A hang guard, not a timing check: on a loaded 2-core machine the platform took 188 s to start.
START_GUARD_S = 300


def wait_for_document(url: str, proc: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    deadline = time.monotonic() + START_GUARD_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the service exited:\n{log.read_text(errors='replace')}")
        try:
            r = httpx.get(url, timeout=2)
            if r.status_code == 200:
                return dict(r.json())
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    output = log.read_text(errors="replace")
    raise SystemExit(f"{url}: no answer within {START_GUARD_S} s:\n{output}")


def render(document: dict[str, object]) -> str:
    return json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    outdated = []
    for name in [*SERVICES, *PRINTED]:
        path = OUT / f"{name}.openapi.json"
        text = render(fetch(name))
        if args.check:
            if not path.exists() or path.read_text() != text:
                outdated.append(path.relative_to(REPO))
        else:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO)}")
    if outdated:
        print(f"outdated (run `make openapi`): {', '.join(map(str, outdated))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
