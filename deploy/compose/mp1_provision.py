"""Mp1 registration of the suite's apps under docker compose (docs/deployment.md#mp1).

Compose runs the apps itself, so the platform treats them as apps run outside its
backends: for each one its AppD (mec-platform/appds) is onboarded, an app instance named
"compose" is created, and the platform issues OAuth2 credentials for it
(POST /app_lcm/v1/app_instances/{id}/credentials). They are written as
/run/mp1/<app>/mp1.env (<PREFIX>_PLATFORM_URL, _APP_INSTANCE_ID, _CLIENT_ID, _CLIENT_SECRET),
in a volume only that app mounts, owned by the app's user, mode 0400. With them the app
registers its services on Mp1 like an instantiated one. A later run keeps credentials that
still obtain a token; anything else is replaced. Exits non-zero, with the reason, when the
platform refuses: compose then does not start the apps.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import httpx
import yaml

# app -> (its variables' prefix, the uid it runs as: docker-compose.yml / the Dockerfile)
APPS = {"rnis-adapter": ("RNIS", 10001), "pep": ("PEP", 0), "path-manager": ("PM", 0),
        "flowrtt": ("FLOWRTT", 0)}  # fmt: skip
INSTANCE_NAME = "compose"
APPDS = Path("/etc/mts/appds")
OUT = Path("/run/mp1")
ADMIN_SECRET_FILE = Path("/var/lib/platform/platform-admin.secret")


def admin_secret() -> str:
    secret = os.environ.get("PLATFORM_ADMIN_CLIENT_SECRET", "").strip()
    return secret or ADMIN_SECRET_FILE.read_text().strip()


def token(url: str, client_id: str, secret: str) -> str | None:
    r = httpx.post(
        f"{url}/oauth2/token",
        data={"grant_type": "client_credentials"},
        auth=(client_id, secret),
        timeout=10,
    )
    return str(r.json()["access_token"]) if r.status_code == 200 else None


def check(r: httpx.Response) -> object:
    if r.is_error:
        sys.exit(
            f"mp1-provision: {r.request.method} {r.request.url.path}: {r.status_code} {r.text}"
        )
    return r.json() if r.content else None


def instance_of(admin: httpx.Client, appd_file: Path) -> str:
    """The id of the "compose" instance of the AppD, onboarding and creating as needed."""
    raw = appd_file.read_bytes()
    appd_id = yaml.safe_load(raw)["appDId"]
    if not check(admin.get("/app_pkgm/v1/app_packages", params={"appDId": appd_id})):
        check(admin.post("/app_pkgm/v1/app_packages", content=raw,
                         headers={"Content-Type": "application/yaml"}))  # fmt: skip
    instances = check(admin.get("/app_lcm/v1/app_instances"))
    assert isinstance(instances, list)
    for inst in instances:
        if inst["appDId"] == appd_id and inst.get("appInstanceName") == INSTANCE_NAME:
            return str(inst["id"])
    body = {"appDId": appd_id, "appInstanceName": INSTANCE_NAME}
    created = check(admin.post("/app_lcm/v1/app_instances", json=body))
    assert isinstance(created, dict)
    return str(created["id"])


def read_env(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v.strip("'") for k, v in pairs}


def provision(admin: httpx.Client, url: str, app: str) -> str:
    prefix, uid = APPS[app]
    instance_id = instance_of(admin, APPDS / f"{app}.yaml")
    path = OUT / app / "mp1.env"
    old = read_env(path)
    if (
        old.get(f"{prefix}_APP_INSTANCE_ID") == instance_id
        and old.get(f"{prefix}_PLATFORM_URL") == url
        and token(url, old.get(f"{prefix}_CLIENT_ID", ""), old.get(f"{prefix}_CLIENT_SECRET", ""))
    ):
        return f"{app}: instance {instance_id}, credentials kept"
    creds = check(admin.post(f"/app_lcm/v1/app_instances/{instance_id}/credentials"))
    assert isinstance(creds, dict)
    values = {
        "PLATFORM_URL": url,
        "APP_INSTANCE_ID": instance_id,
        "CLIENT_ID": creds["clientId"],
        "CLIENT_SECRET": creds["clientSecret"],
    }
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "w") as f:  # shell syntax: the app's entrypoint sources it
        f.writelines(f"{prefix}_{k}='{v}'\n" for k, v in values.items())
    os.chown(tmp, uid, uid)
    tmp.replace(path)
    return f"{app}: instance {instance_id}, new credentials"


def main() -> None:
    url = os.environ["MTS_PLATFORM_URL"].rstrip("/")
    deadline = time.monotonic() + 60
    while (access := token(url, "admin", admin_secret())) is None:  # the platform is healthy
        if time.monotonic() > deadline:
            sys.exit("mp1-provision: the platform refuses the admin credentials")
        time.sleep(1)
    with httpx.Client(base_url=url, timeout=30,
                      headers={"Authorization": f"Bearer {access}"}) as admin:  # fmt: skip
        for app in APPS:
            print(f"mp1-provision: {provision(admin, url, app)}", flush=True)


if __name__ == "__main__":
    main()
