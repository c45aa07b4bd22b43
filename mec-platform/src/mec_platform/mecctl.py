"""``mecctl``: the user CLI of the MEC platform (onboard, instantiate, terminate, list).

It authenticates with the admin client credentials: ``--client-id``/``MECCTL_CLIENT_ID``
(default ``admin``) and ``MECCTL_CLIENT_SECRET``, or the secret file the platform writes at
first start (``<state dir>/platform-admin.secret``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from mec_common.config import default_state_dir

TERMINAL = ("COMPLETED", "FAILED")


class Cli:
    def __init__(self, url: str, client_id: str, secret: str) -> None:
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=30)
        r = self._check(self.http.post("/oauth2/token", data={"grant_type": "client_credentials"},
                                       auth=(client_id, secret)))  # fmt: skip
        self.http.headers["Authorization"] = f"Bearer {r.json()['access_token']}"

    def _check(self, r: httpx.Response) -> httpx.Response:
        if r.status_code >= 400:
            try:
                body = r.json()
                detail = body.get("detail") or body.get("error") or r.text
            except ValueError:
                detail = r.text
            raise SystemExit(f"mecctl: {r.request.method} {r.request.url.path}: "
                             f"{r.status_code} {detail}")  # fmt: skip
        return r

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        r = self._check(self.http.request(method, path, **kwargs))
        return r.json() if r.content else None

    def wait(self, op: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Poll an operation occurrence, printing each state, until it ends."""
        deadline, last = time.monotonic() + timeout, ""
        while True:
            if op["operationState"] != last:
                last = op["operationState"]
                print(f"  {op['lcmOperation'].lower()} {op['appInstanceId'][:12]}: {last}",
                      file=sys.stderr)  # fmt: skip
            if last in TERMINAL or time.monotonic() > deadline:
                return op
            time.sleep(0.2)
            op = self.call("GET", f"/app_lcm/v1/app_lcm_op_occs/{op['id']}")


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    cells = [[str(_get(row, key)) for key, _ in columns] for row in rows]
    widths = [
        max([len(title)] + [len(c[i]) for c in cells]) for i, (_, title) in enumerate(columns)
    ]
    print("  ".join(title.ljust(w) for (_, title), w in zip(columns, widths, strict=True)))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))


def _get(row: dict[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return value


def _secret(args: argparse.Namespace) -> str:
    if os.environ.get("MECCTL_CLIENT_SECRET"):
        return os.environ["MECCTL_CLIENT_SECRET"]
    path = Path(args.secret_file)
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise SystemExit(f"mecctl: no MECCTL_CLIENT_SECRET and cannot read {path}: {exc}") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mecctl",
        description="User CLI of the MEC platform: onboard AppDs, instantiate and terminate "
        "apps, list packages, apps, services and operations.",
        epilog="Authenticates as the platform admin: MECCTL_CLIENT_SECRET, or the secret file "
        "the platform writes at its first start.",
    )
    p.add_argument("--url", default=os.environ.get("MECCTL_URL", "http://127.0.0.1:8100"),
                   help="platform URL (MECCTL_URL; default %(default)s)")  # fmt: skip
    p.add_argument(
        "--client-id",
        default=os.environ.get("MECCTL_CLIENT_ID", "admin"),
        help="admin client id (MECCTL_CLIENT_ID; default %(default)s)",
    )
    p.add_argument(
        "--secret-file",
        default=str(default_state_dir() / "platform-admin.secret"),
        help="admin secret file if MECCTL_CLIENT_SECRET is unset (%(default)s)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("onboard", help="onboard an AppD (YAML or JSON file)").add_argument("appd")
    sub.add_parser("packages", help="list onboarded app packages")
    for name in ("enable", "disable", "delete-package"):
        sub.add_parser(name, help=f"{name} an app package").add_argument(
            "package", help="id or appDId"
        )
    inst = sub.add_parser("instantiate", help="create an instance of an AppD and start it")
    inst.add_argument("appd_id")
    inst.add_argument("--name")
    inst.add_argument("--no-wait", action="store_true", help="return once accepted")
    inst.add_argument("--timeout", type=float, default=120, help="seconds to wait")
    term = sub.add_parser("terminate", help="terminate an app instance (and delete it)")
    term.add_argument("instance")
    term.add_argument("--forceful", action="store_true", help="skip the graceful phase")
    term.add_argument("--graceful-timeout", type=int, help="seconds the app gets to confirm")
    term.add_argument("--keep", action="store_true", help="keep the instance resource")
    sub.add_parser("apps", help="list app instances")
    sub.add_parser("services", help="list registered MEC services (Mp1 discovery)")
    sub.add_parser("ops", help="list lifecycle operation occurrences")
    sub.add_parser("credentials", help="new credentials for an app run outside the platform"
                   ).add_argument("instance")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cli = Cli(args.url, args.client_id, _secret(args))
    out: Any = None
    cmd = args.command
    if cmd == "onboard":
        raw = Path(args.appd).read_bytes()
        out = cli.call("POST", "/app_pkgm/v1/app_packages", content=raw,
                       headers={"Content-Type": "application/yaml"})  # fmt: skip
    elif cmd == "packages":
        out = cli.call("GET", "/app_pkgm/v1/app_packages")
        if not args.json:
            _table(out, [("appDId", "APPD ID"), ("appName", "NAME"),
                         ("appSoftwareVersion", "VERSION"), ("operationalState", "STATE"),
                         ("usageState", "USAGE"), ("id", "PACKAGE ID")])  # fmt: skip
            return 0
    elif cmd in ("enable", "disable"):
        out = cli.call("PATCH", f"/app_pkgm/v1/app_packages/{args.package}",
                       json={"operationState": cmd.upper() + "D"})  # fmt: skip
    elif cmd == "delete-package":
        cli.call("DELETE", f"/app_pkgm/v1/app_packages/{args.package}")
        return 0
    elif cmd == "instantiate":
        instance = cli.call(
            "POST",
            "/app_lcm/v1/app_instances",
            json={"appDId": args.appd_id, "appInstanceName": args.name},
        )
        op = cli.call("POST", f"/app_lcm/v1/app_instances/{instance['id']}/instantiate", json={})
        if not args.no_wait:
            op = cli.wait(op, args.timeout)
        out = {"appInstanceId": instance["id"], "operation": op}
        if op["operationState"] == "FAILED":
            print(json.dumps(out, indent=2))
            return 1
    elif cmd == "terminate":
        body: dict[str, Any] = {"terminationType": "FORCEFUL" if args.forceful else "GRACEFUL"}
        if args.graceful_timeout is not None:
            body["gracefulTerminationTimeout"] = args.graceful_timeout
        op = cli.call("POST", f"/app_lcm/v1/app_instances/{args.instance}/terminate", json=body)
        op = cli.wait(op, 600)
        if op["operationState"] == "COMPLETED" and not args.keep:
            cli.call("DELETE", f"/app_lcm/v1/app_instances/{args.instance}")
        out = op
    elif cmd == "apps":
        out = cli.call("GET", "/app_lcm/v1/app_instances")
        if not args.json:
            _table(out, [("id", "INSTANCE ID"), ("appName", "APP"),
                         ("instantiationState", "STATE"),
                         ("instantiatedAppState.operationalState", "OPERATIONAL"),
                         ("ready", "READY"), ("backend", "BACKEND")])  # fmt: skip
            return 0
    elif cmd == "services":
        out = cli.call("GET", "/mec_service_mgmt/v1/services")
        if not args.json:
            _table(
                out,
                [
                    ("serName", "NAME"),
                    ("version", "VERSION"),
                    ("state", "STATE"),
                    ("transportInfo.type", "TRANSPORT"),
                    ("serInstanceId", "ID"),
                ],
            )
            return 0
    elif cmd == "ops":
        out = cli.call("GET", "/app_lcm/v1/app_lcm_op_occs")
        if not args.json:
            _table(out, [("id", "OPERATION"), ("lcmOperation", "TYPE"),
                         ("operationState", "STATE"), ("appInstanceId", "INSTANCE"),
                         ("error.detail", "ERROR")])  # fmt: skip
            return 0
    elif cmd == "credentials":
        out = cli.call("POST", f"/app_lcm/v1/app_instances/{args.instance}/credentials")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
