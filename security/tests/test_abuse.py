"""The abuse suite (issue 20, "Done means"): every route of every API with every kind of bad
token gets 401/403 and changes nothing; consumers read but do not change; revocation reaches
every service; forged termination notifications fail; bodies over the limit and slowloris
connections are cut off. Figures it prints go to docs/security.md."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import random
import re
import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from trust_support import HEADER_TIMEOUT_S, HTTP, REPO, STATIC, System, bearer, snapshot, wait_for

# Routes that need no token at all (health, metrics, API documents, OAuth2 itself).
PUBLIC = re.compile(r"^/(healthz|metrics|openapi\.json|docs.*|oauth2/.*)$")
# Routes any authenticated app may read: Mp1 discovery and the platform's time
# (docs/security.md).
OPEN_TO_APPS = re.compile(
    r"^/mec_service_mgmt/v1/(services|services/\{[^}]+\}|transports)$"
    r"|^/mec_app_support/v1/timing/"
)


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def bad_tokens(system: System, revoked: str) -> dict[str, str | None]:
    """Every kind of token that must not get in (the 'other app' kind is separate)."""
    authority = system.platform.platform.authority
    kid = system.platform.platform.authority.jwks()["keys"][0]["kid"]
    now = int(time.time())
    claims = {"iss": "mec-platform", "aud": "mec-api", "sub": "admin", "scope": "mec.admin",
              "iat": now - 1000, "exp": now + 300}  # fmt: skip
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_x = authority.jwks()["keys"][0]["x"].encode()
    return {
        "none": None,
        "not bearer (Basic)": "Basic-is-not-here",
        "expired": _expired(authority, claims),
        "revoked": revoked,
        "wrong audience (notification)": authority.notification_token("any-subscription"),
        "wrong algorithm (RS256, platform kid)": jwt.encode(
            claims, rsa_key, algorithm="RS256", headers={"kid": kid}),
        "wrong algorithm (HS256 keyed with the public key)": _hs256(claims, kid, public_x),
        "wrong algorithm (none)": f"{_b64({'alg': 'none', 'kid': kid})}.{_b64(claims)}.",
        "malformed (header not JSON)": f"eyJub3Q.{_b64(claims)}.AA",
        "malformed (kid a list)": f"{_b64({'alg': 'EdDSA', 'kid': [kid]})}.{_b64(claims)}.AA",
        "malformed (claims a list)": f"{_b64({'alg': 'EdDSA', 'kid': kid})}.{_b64([1])}.AA",
        "malformed (garbage)": "a.b.c",
        "malformed (huge)": "x" * 6000,
    }  # fmt: skip


def _hs256(claims: dict[str, Any], kid: str, secret: bytes) -> str:
    """The algorithm-confusion attack: HMAC keyed with the platform's public key."""
    signed = f"{_b64({'alg': 'HS256', 'typ': 'JWT', 'kid': kid})}.{_b64(claims)}"
    mac = hmac.new(secret, signed.encode(), hashlib.sha256).digest()
    return signed + "." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def _expired(authority: Any, claims: dict[str, Any]) -> str:
    token: str = authority._sign({k: v for k, v in claims.items()
                                  if k not in ("iat", "exp")}, -60)  # fmt: skip
    return token


def routes(base: str) -> list[tuple[str, str]]:
    """(method, path template) of every route in a service's OpenAPI document."""
    doc = HTTP.get(base + "/openapi.json").json()
    return [(m.upper(), p) for p, ops in doc["paths"].items() for m in ops
            if m in ("get", "post", "put", "patch", "delete")]  # fmt: skip


def path_values(system: System, service: str) -> dict[str, str]:
    """Real ids of the *victim* (the PEP's app instance and service) for path parameters."""
    victim = system.apps["pep"].instance
    services = system.platform.admin.get("/mec_service_mgmt/v1/services",
                                         params={"ser_name": "pep"}).json()  # fmt: skip
    return {"appInstanceId": victim, "serviceId": services[0]["serInstanceId"],
            "appPkgId": "mts-pep", "ue": "127.0.0.1", "flow_id": "1", "subscriptionId": "x",
            "secret": _callback_secret(system, service) or "x"}  # fmt: skip


def fill(path: str, values: dict[str, str]) -> str:
    return re.sub(r"\{([^}]+)\}", lambda m: values.get(m.group(1), "x"), path)


def _callback_secret(system: System, service: str) -> str | None:
    app = system.apps.get(service)
    if app is None:
        return None
    subs = system.platform.admin.get(
        f"/mec_app_support/v1/applications/{app.instance}/subscriptions").json()  # fmt: skip
    for link in subs.get("_links", {}).get("subscriptions", []):
        body = system.platform.admin.get(link["href"].removeprefix(system.platform.url)).json()
        return str(body["callbackReference"]).rsplit("/", 1)[-1]
    return None


# A body that would do harm if it got through (the attacks issue 20 reported).
HARMFUL = {
    "/pep/v1/config": {"allowed_destinations": ["0.0.0.0/0", "127.0.0.0/8"],
                       "socks5_port": 1080},
    "/pm/v1/control": {"mode": "reactive"},
    "/mec_service_mgmt/v1/liveness/{serviceId}": {"state": "ACTIVE"},
    "/pm/v1/ues/{ue}": {"paths": ["10.1.0.1"]},
    "/pep/v1/notifications/app_termination/{secret}": {"operationAction": "TERMINATING"},
    "/mec/notifications/app_termination/{secret}": {"operationAction": "TERMINATING"},
    # the victim's registration, posted with another app's token (MEC 011 v3.1.1)
    "/mec_app_support/v1/registrations": lambda ids: {
        "appName": "mts-pep", "appDId": "mts-pep", "appInstanceId": ids["appInstanceId"],
        "isInsByMec": True, "endpoint": {"uris": ["http://attacker.example/"]}},
}  # fmt: skip

FUZZ_EXAMPLES = 8  # per operation; the seed changes every run

BASES = {"platform": None, "pep": "pep", "pm": "pm", "rnis": "rnis"}


def base_url(system: System, name: str) -> str:
    return system.platform.url if name == "platform" else system.services[name].url


@pytest.fixture(scope="module")
def revoked(system: System) -> str:
    """A token whose app instance was deleted, used on every service before (so cached
    there), and given the services' revocation period (5 s) to be refused everywhere."""
    app = system.new_app("consumer")
    token = system.platform.token(app.client_id, app.secret)
    urls = [f"{system.services['pep'].url}/pep/v1/stats", f"{system.services['pm'].url}/pm/v1/ues",
            f"{system.services['rnis'].url}/rni/v2/queries/layer2_meas"]  # fmt: skip
    for url in urls:
        assert HTTP.get(url, headers=bearer(token)).status_code == 200, url
    assert system.platform.admin.delete(f"/app_lcm/v1/app_instances/{app.instance}"
                                        ).status_code == 204  # fmt: skip
    for url in urls:
        wait_for(lambda u=url: HTTP.get(u, headers=bearer(token)).status_code == 401,  # type: ignore[misc]
                 60, f"{url} to refuse the revoked token")  # fmt: skip
    return token


def _rnis_routes() -> list[tuple[str, str]]:
    # The Go adapter publishes no OpenAPI at run time: its committed document is the list.
    doc = json.loads((REPO / "docs/api/rnis-adapter.openapi.json").read_text())
    base = urlsplit(doc["servers"][0]["url"]).path  # /rni/v2
    return [(m.upper(), base + p) for p, ops in doc["paths"].items() for m in ops
            if m in ("get", "post", "put", "patch", "delete")]  # fmt: skip


@pytest.mark.parametrize("service", list(BASES))
def test_every_route_refuses_every_bad_token(system: System, revoked: str, service: str) -> None:
    base = base_url(system, service)
    table = _rnis_routes() if service == "rnis" else routes(base)
    if service == "rnis":
        table += [("POST", "/mec/notifications/app_termination/{secret}")]
    tokens = bad_tokens(system, revoked)
    other_app = system.token("rogue")
    before = snapshot(system)
    values = path_values(system, service)
    failures, tried, started = [], 0, time.monotonic()
    http = httpx.Client(timeout=60)
    for method, template in table:
        if PUBLIC.match(template):
            continue
        url = base + fill(template, values)
        body = HARMFUL.get(template, {})
        body = body(values) if callable(body) else body
        for kind, token in [*tokens.items(), ("other app's", other_app)]:
            if kind == "other app's" and method == "GET" and OPEN_TO_APPS.match(template):
                continue  # discovery is open to every app (docs/security.md)
            headers = {**bearer(token), "Content-Type": "application/json"}
            r = http.request(method, url, headers=headers, content=json.dumps(body))
            tried += 1
            if r.status_code not in (401, 403):
                failures.append(f"{method} {template} [{kind}] -> {r.status_code} {r.text[:120]}")
    elapsed = time.monotonic() - started
    http.close()
    print(
        f"\n{service}: {tried} requests ({len(table)} routes x {len(tokens) + 1} token "
        f"kinds) in {elapsed:.1f} s, {len(failures)} let through"
    )
    assert not failures, "\n".join(failures)
    assert snapshot(system) == before, "a refused request changed state"
    for s in system.services.values():
        assert s.proc.alive(), f"{s.name} died:\n{s.proc.output()[-2000:]}"


def test_consumers_read_and_only_operators_change(system: System) -> None:
    consumer, rogue = system.token("consumer"), system.token("rogue")
    pep, pm, rnis = (system.services[k].url for k in ("pep", "pm", "rnis"))
    admin = system.platform.admin.headers["Authorization"].split()[1]
    for url in (f"{pep}/pep/v1/config", f"{pep}/pep/v1/stats", f"{pm}/pm/v1/ues",
                f"{pm}/pm/v1/control", f"{rnis}/rni/v2/queries/layer2_meas"):  # fmt: skip
        assert HTTP.get(url, headers=bearer(consumer)).status_code == 200, url
        assert HTTP.get(url, headers=bearer(admin)).status_code == 200, url
        assert HTTP.get(url, headers=bearer(rogue)).status_code in (401, 403), url
    before = HTTP.get(f"{pep}/pep/v1/config", headers=bearer(STATIC)).json()
    widen = {"allowed_destinations": ["0.0.0.0/0", "127.0.0.0/8"]}
    r = HTTP.patch(f"{pep}/pep/v1/config", json=widen, headers=bearer(consumer))
    assert r.status_code == 403, r.text  # defect 1: an app reconfigured the PEP
    assert HTTP.put(f"{pm}/pm/v1/control", json={"mode": "reactive"},
                     headers=bearer(consumer)).status_code == 403  # fmt: skip
    assert HTTP.get(f"{pep}/pep/v1/config", headers=bearer(STATIC)).json() == before
    # The operator (the admin's platform token) may: the path manager accepts platform JWTs.
    current = HTTP.get(f"{pm}/pm/v1/control", headers=bearer(admin)).json()
    r = HTTP.put(f"{pm}/pm/v1/control", json={"mode": current["mode"]}, headers=bearer(admin))
    assert r.status_code == 200, r.text


def test_a_deleted_instances_token_stops_working_everywhere(system: System) -> None:
    app = system.new_app("consumer")
    token = system.platform.token(app.client_id, app.secret)
    urls = [f"{system.services['pep'].url}/pep/v1/stats",
            f"{system.services['pm'].url}/pm/v1/ues",
            f"{system.services['rnis'].url}/rni/v2/queries/layer2_meas",
            f"{system.platform.url}/mec_service_mgmt/v1/services"]  # fmt: skip
    for url in urls:
        assert HTTP.get(url, headers=bearer(token)).status_code == 200, url
    system.platform.admin.delete(f"/app_lcm/v1/app_instances/{app.instance}")
    started = time.monotonic()
    for url in urls:  # each service refreshes its revocation list at most every 5 s
        wait_for(lambda u=url: HTTP.get(u, headers=bearer(token)).status_code == 401,  # type: ignore[misc]
                 60, f"{url} to refuse the revoked token")  # fmt: skip
    print(f"\nrevoked token refused by every service after {time.monotonic() - started:.1f} s")


def test_a_forged_termination_notification_changes_nothing(system: System) -> None:
    """Defect 2: an app holding a notification token of its own subscription (what the
    platform sends it) cannot make the PEP deregister itself."""
    rogue = system.apps["rogue"]
    own_subscription = (f"{system.platform.url}/mec_app_support/v1/applications/"
                        f"{rogue.instance}/subscriptions/its-own")  # fmt: skip
    captured = system.platform.platform.authority.notification_token(own_subscription)
    pep = system.services["pep"].url
    secret = _callback_secret(system, "pep")
    assert secret, "the PEP subscribed to its termination"
    note = {"notificationType": "AppTerminationNotification", "operationAction": "TERMINATING"}
    for path in (f"/pep/v1/notifications/app_termination/{secret}",  # the secret path
                 "/pep/v1/notifications/app_termination/guess",
                 "/pep/v1/notifications/app_termination"):  # the old fixed path  # fmt: skip
        r = HTTP.post(pep + path, json=note, headers=bearer(captured))
        assert r.status_code in (401, 404), (path, r.status_code, r.text)
    time.sleep(1)
    services = system.platform.admin.get("/mec_service_mgmt/v1/services",
                                         params={"ser_name": "pep"}).json()  # fmt: skip
    assert [s["state"] for s in services] == ["ACTIVE"]
    assert system.services["pep"].proc.alive()


def test_pep_registration_and_metrics(system: System) -> None:
    """Defect 12: serCategory.href is a URI; /metrics (no token) names no UE."""
    (info,) = system.platform.admin.get("/mec_service_mgmt/v1/services",
                                        params={"ser_name": "pep"}).json()  # fmt: skip
    href = info["serCategory"]["href"]
    assert href.startswith(("http://", "https://")) and href.endswith("/pep/v1"), href
    metrics = HTTP.get(system.services["pep"].url + "/metrics").text
    assert not re.search(r'ue="', metrics), "a metric is labelled with a UE address"
    assert "pep_ue_backlog_bytes" in metrics


@pytest.mark.parametrize("service", ["platform", "pep", "pm", "rnis"])
def test_bodies_over_the_limit_are_refused_without_a_token(system: System, service: str) -> None:
    base = base_url(system, service)
    path = {"platform": "/app_pkgm/v1/app_packages", "pep": "/pep/v1/config",
            "pm": "/pm/v1/control", "rnis": "/rni/v2/subscriptions"}[service]  # fmt: skip
    big = b"{" + b" " * (2 << 20) + b"}"
    try:
        r = HTTP.post(base + path, content=big, headers={"Content-Type": "application/json"},
                       timeout=30)  # fmt: skip
        status = r.status_code
    except httpx.HTTPError:  # the server may close before reading it all: also a refusal
        status = 0
    assert status in (0, 401, 413), status  # the Go adapter authenticates first (no body read)
    assert HTTP.get(base + "/healthz").status_code in (200, 503)


def test_duplicate_json_keys_are_refused(system: System) -> None:
    pep = system.services["pep"].url
    before = HTTP.get(f"{pep}/pep/v1/config", headers=bearer(STATIC)).json()
    twice = b'{"idle_timeout": 300, "idle_timeout": 1}'
    headers = {**bearer(STATIC), "Content-Type": "application/json"}
    r = HTTP.patch(f"{pep}/pep/v1/config", headers=headers, content=twice)
    assert r.status_code == 400 and "duplicate key" in r.json()["detail"], r.text
    assert HTTP.get(f"{pep}/pep/v1/config", headers=bearer(STATIC)).json() == before


@pytest.mark.parametrize("service", ["platform", "pep", "pm", "rnis"])
def test_slowloris_is_cut_off(system: System, service: str) -> None:
    host, port = base_url(system, service).removeprefix("http://").split(":")
    limit = {"rnis": 5.0}.get(service, HEADER_TIMEOUT_S)  # Go: ReadHeaderTimeout 5 s
    with socket.create_connection((host, int(port))) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < limit * 4 + 10:
            try:
                s.sendall(b"X-Slow: 1\r\n")
                s.settimeout(0.3)
                if s.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        held = time.monotonic() - started
    print(f"\n{service}: slowloris connection closed after {held:.1f} s (deadline {limit} s)")
    assert closed, f"{service} kept a slowloris connection {held:.0f} s"
    assert HTTP.get(base_url(system, service) + "/healthz").status_code in (200, 503)


@pytest.mark.parametrize("service", ["platform", "pep", "pm"])
def test_fuzzed_requests_with_bad_tokens_are_refused(
    system: System, revoked: str, service: str
) -> None:
    """schemathesis draws requests from the service's own OpenAPI document (any path
    parameters, query strings and bodies) and sends each with a bad token: nothing gets past
    401/403 (404: a termination callback's secret path, checked first); another app's token
    gets a 4xx (e.g. 404 for an id that does not exist), never a 2xx or 5xx; no change.
    The seed is drawn at run time and printed, so a failure can be replayed."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as with_seed
    from hypothesis import strategies as st

    base = base_url(system, service)
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    rogue = system.token("rogue")
    kinds = [*bad_tokens(system, revoked).values(), rogue]
    run_seed = random.SystemRandom().randrange(2**32)
    print(f"\n{service}: schemathesis seed {run_seed}")
    before = snapshot(system)
    failures, sent = [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        template = operation.path
        if PUBLIC.match(template) or OPEN_TO_APPS.match(template):
            continue

        allowed = {401, 403} | ({404} if "{secret}" in template else set())

        @with_seed(run_seed)
        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy(), token=st.sampled_from(kinds))
        def check(case: Any, token: str | None) -> None:
            nonlocal sent
            response = case.call(base_url=base, headers=bearer(token), timeout=60)
            sent += 1
            status = response.status_code
            if token == rogue:  # a valid app's token: refused, or about nothing it may touch
                assert 400 <= status < 500, (status, response.text[:200])
            else:
                assert status in allowed, (status, response.text[:200])  # noqa: B023

        try:
            check()
        except Exception as exc:  # every operation's failure, then all at once
            failures.append(f"{operation.label}: {exc}")
    print(f"{service}: {sent} fuzzed requests, {len(failures)} operations let something through")
    assert not failures, "\n\n".join(failures)
    assert snapshot(system) == before
