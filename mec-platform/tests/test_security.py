"""Issue 20's defects on the platform side, against a real platform (uvicorn on a port):
scopes and revocation (1), per-subscription notification tokens (2), logins that do not
stall the event loop (5), malformed RS256 tokens (6), file modes (7), request limits (8)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mec_common.auth import TokenVerifier, jwks_key_lookup
from mec_platform.manager_api import LoginAdmission
from mec_platform.security import LoginLimiter
from mec_platform.testing import (
    ADMIN_SECRET,
    HTTP_TIMEOUT,
    SIMPLE_APPD,
    Running,
    external_app,
    make_settings,
    onboard,
)

LCM = "/app_lcm/v1"
SM = "/mec_service_mgmt/v1"
CONSUMER_APPD = SIMPLE_APPD.replace(
    "appServiceProduced:",
    """appServiceRequired:
  - {serName: rnis, version: "2.1.1"}
appServiceOptional:
  - {serName: pep, version: v1}
appServiceProduced:""",
)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Running]:
    # header_timeout_s: short, so the slowloris test does not wait long
    running = Running(make_settings(tmp_path / "state", header_timeout_s=1.0))
    yield running
    running.stop()


def claims(token: str) -> dict[str, object]:
    payload = token.split(".")[1]
    decoded: dict[str, object] = json.loads(base64.urlsafe_b64decode(payload + "=="))
    return decoded


def test_app_tokens_carry_their_consumer_scopes(platform: Running) -> None:
    onboard(platform, CONSUMER_APPD)
    _, app = external_app(platform)
    scope = str(claims(app.headers["Authorization"].split()[1])["scope"]).split()
    assert sorted(scope) == ["mec.app", "mec.consume:pep", "mec.consume:rnis"]
    admin = claims(platform.admin.headers["Authorization"].split()[1])
    assert admin["scope"] == "mec.admin"


def test_revoked_tokens_are_listed_until_they_expire(platform: Running) -> None:
    onboard(platform)
    instance, app = external_app(platform)
    client_id = claims(app.headers["Authorization"].split()[1])["sub"]
    assert app.get(f"{SM}/services").status_code == 200
    assert httpx.get(f"{platform.url}/oauth2/revocations").json() == {"revoked": []}
    assert platform.admin.delete(f"{LCM}/app_instances/{instance}").status_code == 204
    assert app.get(f"{SM}/services").status_code == 401  # the platform itself: at once
    revoked = httpx.get(f"{platform.url}/oauth2/revocations").json()["revoked"]
    assert [r["sub"] for r in revoked] == [client_id]
    assert revoked[0]["until"] > time.time() + platform.settings.token_ttl_s - 60
    # Another service's verifier (mec_common.auth with a platform) refuses it too.
    other = TokenVerifier.for_service([], platform.url, platform.settings.state_dir, "other")
    assert other.verify(app.headers["Authorization"].split()[1]) is None
    assert other.verify(platform.admin.headers["Authorization"].split()[1]) is not None


def test_notification_tokens_are_bound_to_their_subscription(platform: Running) -> None:
    authority = platform.platform.authority
    verifier = TokenVerifier([], jwt_keys=jwks_key_lookup(f"{platform.url}/oauth2/jwks"))
    mine, theirs = authority.notification_token("sub-a"), authority.notification_token("sub-b")
    assert mine != theirs
    principal = verifier.verify_notification(mine, "sub-a")
    assert principal is not None and principal.is_operator
    assert verifier.verify_notification(theirs, "sub-a") is None
    assert verifier.verify_notification(mine, None) is None  # no subscription yet: nothing
    assert verifier.verify(mine) is None  # never an API token


def admin_claims() -> dict[str, object]:
    now = int(time.time())
    return {"iss": "mec-platform", "aud": "mec-api", "sub": "admin", "scope": "mec.admin",
            "iat": now, "exp": now + 300}  # fmt: skip


def forged_rs256(kid: str) -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(admin_claims(), key, algorithm="RS256", headers={"kid": kid})


def b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def test_malformed_rs256_token_with_the_platforms_kid_is_401(platform: Running) -> None:
    kid = httpx.get(f"{platform.url}/oauth2/jwks").json()["keys"][0]["kid"]
    head, body, _ = forged_rs256(kid).split(".")
    tokens = [forged_rs256(kid), f"{head}.{body}.", f"{head}.{body}.!!", forged_rs256("nope"),
              f"{b64({'alg': 'RS256', 'kid': ['list']})}.{body}.AA",
              f"{b64({'alg': 'none', 'kid': kid})}.{body}.", f"{b64([1])}.{body}.AA",
              f"{b64({'alg': 'EdDSA', 'kid': kid})}.{b64([])}.AA",
              "a.b.c", "..", "x" * 5000]  # fmt: skip
    for token in tokens:
        r = httpx.get(f"{platform.url}{SM}/services", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401, (token[:40], r.status_code, r.text)
        assert r.headers["content-type"] == "application/problem+json"


def test_state_files_are_private(platform: Running) -> None:
    state = platform.settings.state_dir
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("platform.db",):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
    for extra in state.glob("platform.db-*"):  # WAL and shared memory, when present
        assert stat.S_IMODE(extra.stat().st_mode) & 0o077 == 0, extra


def test_state_modes_are_tightened_on_an_existing_install(tmp_path: Path) -> None:
    state = tmp_path / "old"
    state.mkdir(mode=0o755)
    (state / "platform.db").touch(mode=0o644)
    (state / "platform-admin.secret").write_text(ADMIN_SECRET + "\n")
    (state / "platform-admin.secret").chmod(0o644)
    running = Running(make_settings(state, admin_client_secret=None))
    try:
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / "platform.db").stat().st_mode) == 0o600
        assert stat.S_IMODE((state / "platform-admin.secret").stat().st_mode) == 0o600
    finally:
        running.stop()


def test_bodies_over_the_limit_are_refused_before_auth(platform: Running) -> None:
    limit = platform.settings.max_body_bytes
    for headers in ({}, platform.admin.headers):
        r = httpx.post(f"{platform.url}/app_pkgm/v1/app_packages", content=b"a" * (limit + 1),
                       headers={**headers, "Content-Type": "application/yaml"})  # fmt: skip
        assert r.status_code == 413, r.text
        assert r.headers["content-type"] == "application/problem+json"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(limit // 65536 + 2):
            yield b"b" * 65536

    r = httpx.post(f"{platform.url}/oauth2/token", content=chunks())
    assert r.status_code == 413
    assert platform.admin.get(f"{LCM}/app_instances").status_code == 200  # still serving


def test_duplicate_json_keys_are_refused(platform: Running) -> None:
    onboard(platform)
    body = b'{"appDId": "test-app", "appDId": "other"}'
    r = platform.admin.post(f"{LCM}/app_instances", content=body,
                            headers={"Content-Type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and "duplicate key 'appDId'" in r.json()["detail"]
    assert platform.admin.get(f"{LCM}/app_instances").json() == []
    yaml_twice = SIMPLE_APPD.replace("appName: test-app", "appName: test-app\nappName: x")
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=yaml_twice.replace(
        "test-app", "dup-app"), headers={"Content-Type": "application/yaml"})  # fmt: skip
    assert r.status_code == 400 and "duplicate key" in r.json()["detail"]


BOMB = (
    "\n".join(
        [f"a: &a [{','.join(['lol'] * 9)}]"]
        + [
            f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ]
    )
    + "\n"
)


def test_yaml_alias_bomb_is_refused_fast(platform: Running) -> None:
    assert len(BOMB) < 421
    started = time.monotonic()
    r = platform.admin.post("/app_pkgm/v1/app_packages", content=BOMB,
                            headers={"Content-Type": "application/yaml"})  # fmt: skip
    elapsed = time.monotonic() - started
    assert r.status_code == 400 and "expands to more than" in r.json()["detail"], r.text
    assert elapsed < 3, elapsed  # hang guard: it took 4.4 s of CPU before (machine shared)
    assert platform.admin.get("/app_pkgm/v1/app_packages").json() == []


def test_slowloris_connection_is_closed(platform: Running) -> None:
    with socket.create_connection(("127.0.0.1", platform.settings.http_port), timeout=30) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        try:
            while True:  # keep sending header lines slowly, never finishing
                s.sendall(b"X-Slow: 1\r\n")
                time.sleep(0.2)
                assert time.monotonic() - started < 20, "the connection was never closed"
        except (BrokenPipeError, ConnectionResetError):
            pass
    # a polite client is served meanwhile and afterwards
    assert httpx.get(f"{platform.url}/healthz").status_code == 200


def test_failed_logins_neither_stall_the_platform_nor_run_unbounded(platform: Running) -> None:
    """300 wrong-secret logins, 32 at a time: /healthz keeps answering, logins beyond the
    per-address budget get 429 (the figure itself: make bench-security)."""
    results: list[int] = []
    lock = threading.Lock()

    def probe() -> float:
        started = time.monotonic()
        assert httpx.get(f"{platform.url}/healthz", timeout=60).status_code == 200
        return time.monotonic() - started

    baseline = sorted(probe() for _ in range(9))[4]  # this machine, now, without the flood

    def login() -> None:
        with httpx.Client(timeout=60) as c:
            for _ in range(300 // 32 + 1):
                r = c.post(f"{platform.url}/oauth2/token", auth=("admin", "wrong"),
                           data={"grant_type": "client_credentials"})  # fmt: skip
                with lock:
                    results.append(r.status_code)

    threads = [threading.Thread(target=login) for _ in range(32)]
    for t in threads:
        t.start()
    probes: list[float] = []
    while any(t.is_alive() for t in threads):
        probes.append(probe())
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert set(results) <= {401, 429} and results.count(429) > 0, sorted(set(results))
    # A guard relative to this machine's own pace, not the figure (the clients share this
    # process, the machine is shared): before the fix the median went from 1.4 ms to 4.5 s.
    flooded = sorted(probes)[len(probes) // 2]
    assert flooded < 5 * baseline + 1.0, (baseline, probes)
    time.sleep(1.0)  # the bucket refills: the right secret still gets a token
    assert platform.token("admin", platform.settings.admin_client_secret or "")


class _Inner:
    """The app behind ``LoginAdmission``: records what reached it."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.calls += 1
        await receive()
        await JSONResponse({"error": "invalid_client"}, 401)(scope, receive, send)


def _login(app: ASGIApp, address: str = "10.0.0.1") -> tuple[int, int]:
    """One token request through ``app``: (status, times the body was asked for)."""
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": "/oauth2/token",
        "headers": [],
        "client": (address, 4000),
        "query_string": b"",
    }
    reads, sent = 0, []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"grant_type=client_credentials"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent[0]["status"], reads


def test_refused_logins_never_reach_the_app() -> None:
    """Issue 20, defect 5: over the budget a login is refused at the front door, before its
    body is read or it is routed, so a flood costs the event loop almost nothing per login
    and cannot queue in front of /healthz (the figure: make bench-security)."""
    inner = _Inner()
    admission = LoginAdmission(inner, LoginLimiter(rate_per_s=0.001, burst=3, max_pending=8))
    statuses = [_login(admission) for _ in range(300)]
    assert statuses[:3] == [(401, 1)] * 3  # the burst reaches the token route
    assert set(statuses[3:]) == {(429, 0)}  # the rest: 429, body unread, app untouched
    assert inner.calls == 3
    assert _login(admission, "10.0.0.2") == (401, 1)  # another address has its own budget
    other = LoginAdmission(_Inner(), LoginLimiter(rate_per_s=1e6, burst=10**6, max_pending=1))
    assert [_login(other) for _ in range(3)] == [(401, 1)] * 3  # each slot given back


def test_a_forwarded_for_header_does_not_buy_a_new_login_budget(tmp_path: Path) -> None:
    """A client on the host cannot reset its login budget by claiming another address in
    X-Forwarded-For (uvicorn honours it from 127.0.0.1 unless told not to)."""
    running = Running(make_settings(tmp_path / "state", login_rate_per_s=0.001, login_burst=3))
    try:
        statuses = [
            httpx.post(f"{running.url}/oauth2/token", data={"grant_type": "client_credentials"},
                       auth=("nobody", "wrong"), headers={"X-Forwarded-For": f"10.9.0.{i}"},
                       timeout=HTTP_TIMEOUT).status_code
            for i in range(6)
        ]  # fmt: skip
    finally:
        running.stop()
    # the admin client's own login (Running) spent one of the three
    assert statuses == [401, 401, 429, 429, 429, 429], statuses


def test_secret_checks_run_below_the_event_loops_priority(platform: Running) -> None:
    """The scrypt threads are niced, so a login flood's hashing yields the CPU to the event
    loop (and /healthz) on a busy host."""
    loop_niceness = os.getpriority(os.PRIO_PROCESS, platform.thread.native_id or 0)
    hashing = platform.platform.app.state.hashing
    niceness = hashing.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
    assert niceness.result(timeout=60) >= min(19, loop_niceness + 10)
