"""Bearer-token verification shared by every service (deny by default).

A token is accepted if it is

- one of the service's static tokens (admin; for standalone use and tests), or
- an OAuth2 access token issued by the MEC platform: a JWT (EdDSA or RS256) whose
  signature verifies against the platform's JWKS (``<platform>/oauth2/jwks``), with the
  platform's issuer and the API audience, not expired.

Roles are scopes in the token (``scope`` claim, space-separated; docs/security.md):

- ``mec.admin``: the platform manager's credentials (and every static token): everything;
- ``mec.platform``: the platform itself (its notifications);
- ``mec.app``: one MEC app instance (``app_instance_id`` claim), its own Mp1 resources;
- ``mec.consume:<serName>``: the app may use the API of service ``serName`` (from its
  AppD's ``appServiceRequired``/``appServiceOptional``).

Each service authorizes by scope (``Principal.is_operator``, ``Principal.may_consume``).
Revoked credentials (a terminated or deleted app instance) stop working on every service:
the platform publishes the subjects it revoked at ``/oauth2/revocations`` and
``RevocationList`` keeps a copy that is at most a few seconds old (fail closed when stale).

The platform signs each notification it sends with a short-lived token of audience
``mec-notification`` bound to one subscription (``subscription`` claim); ``verify`` refuses
those so that a receiver that leaks one cannot call any API, and ``verify_notification``
accepts only those, for the subscription the receiver expects.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt

from mec_common.config import private_dir, write_private
from mec_common.logging import get_logger

log = get_logger(__name__)

ISSUER = "mec-platform"
API_AUDIENCE = "mec-api"
NOTIFICATION_AUDIENCE = "mec-notification"
ADMIN_SCOPE = "mec.admin"
PLATFORM_SCOPE = "mec.platform"
APP_SCOPE = "mec.app"
CONSUME_SCOPE_PREFIX = "mec.consume:"
PLATFORM_SUBJECT = "mec-platform"
ALGORITHMS = ["EdDSA", "RS256"]


def consume_scope(ser_name: str) -> str:
    """The scope that lets an app use the API of the service ``ser_name``."""
    return CONSUME_SCOPE_PREFIX + ser_name


@dataclass(frozen=True)
class Principal:
    """Who is calling: an admin/static token, the platform, or one MEC app instance."""

    subject: str
    app_instance_id: str | None = None
    is_admin: bool = False
    scopes: frozenset[str] = field(default_factory=frozenset)
    subscription: str | None = None  # notification tokens: the subscription they serve

    @property
    def is_operator(self) -> bool:
        """The admin or the platform: may configure services and end their lives."""
        return self.is_admin or PLATFORM_SCOPE in self.scopes

    def may_act_for(self, app_instance_id: str) -> bool:
        """Admins reach every app's resources; an app only its own."""
        return self.is_admin or self.app_instance_id == app_instance_id

    def may_consume(self, ser_name: str) -> bool:
        """Operators, and apps whose AppD requires (or optionally uses) ``ser_name``."""
        return self.is_operator or consume_scope(ser_name) in self.scopes


# What PyJWT lets escape for some malformed tokens (e.g. an RS256 header naming an Ed25519
# key raises TypeError): a token that does not verify is a 401, never a 500.
_MALFORMED = (TypeError, ValueError, KeyError, AttributeError)

STATIC_PRINCIPAL = Principal(subject="static-token", is_admin=True)

KeyLookup = Callable[[str], Any]
"""Returns the public key for a JWT ``kid`` (raises ``jwt.PyJWKError`` if unknown)."""


def jwks_key_lookup(jwks_url: str, *, timeout: float = 5.0) -> KeyLookup:
    """Keys from a remote JWKS, cached; an unknown ``kid`` refetches (key rotation)."""
    client = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=int(timeout))

    def lookup(kid: str) -> Any:
        return client.get_signing_key(kid).key

    return lookup


class RevocationList:
    """The platform's revoked subjects (client ids), fetched again when ``refresh_s`` old.

    A fetch happens in the request that finds the copy old (one at a time, short timeout);
    while the platform cannot be reached the last copy is used, and once it is older than
    ``max_stale_s`` every platform token counts as revoked (fail closed): a service cannot
    tell whether a token was revoked in the meantime. Static tokens are not affected.
    """

    def __init__(self, url: str, *, refresh_s: float = 5.0, max_stale_s: float = 60.0,
                 timeout_s: float = 2.0) -> None:  # fmt: skip
        self._url = url
        self._refresh, self._max_stale, self._timeout = refresh_s, max_stale_s, timeout_s
        self._revoked: frozenset[str] = frozenset()
        self._fetched = float("-inf")  # monotonic time of the last successful fetch
        self._attempted = float("-inf")
        self._fetching = threading.Lock()

    def is_revoked(self, principal: Principal) -> bool:
        now = time.monotonic()
        if now - self._attempted >= self._refresh and self._fetching.acquire(blocking=False):
            try:
                self._attempted = now
                self._fetch()
            finally:
                self._fetching.release()
        if time.monotonic() - self._fetched > self._max_stale:
            log.warning("revocation list is stale; refusing platform tokens", url=self._url)
            return True
        return principal.subject in self._revoked

    def _fetch(self) -> None:
        try:
            r = httpx.get(self._url, timeout=self._timeout)
            r.raise_for_status()
            body = r.json()
            self._revoked = frozenset(str(entry["sub"]) for entry in body["revoked"])
            self._fetched = time.monotonic()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            log.warning("cannot fetch the revocation list", url=self._url, error=str(exc))


class TokenVerifier:
    """Verifies bearer tokens; results of JWT checks are cached until the token expires."""

    def __init__(
        self,
        static_tokens: list[str],
        *,
        jwt_keys: KeyLookup | None = None,
        is_revoked: Callable[[Principal], bool] | None = None,
        cache_size: int = 4096,
    ) -> None:
        self._static = [t.encode() for t in static_tokens if t]
        self._jwt_keys = jwt_keys
        self._is_revoked = is_revoked
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()

    @classmethod
    def for_service(
        cls, static_tokens: list[str], platform_url: str | None, state_dir: Path, service: str
    ) -> TokenVerifier:
        """The usual verifier of a service: its static tokens plus, with a platform, its JWTs.

        A service with neither never runs open: it generates a token (see
        ``ensure_static_token``).
        """
        if platform_url:
            base = platform_url.rstrip("/")
            keys = jwks_key_lookup(base + "/oauth2/jwks")
            revoked = RevocationList(base + "/oauth2/revocations")
            return cls(static_tokens, jwt_keys=keys, is_revoked=revoked.is_revoked)
        return cls(ensure_static_token(static_tokens, state_dir, service))

    def verify(self, token: str) -> Principal | None:
        """The caller behind ``token``, or None if the token is not valid for an API."""
        if self._matches_static(token):
            return STATIC_PRINCIPAL
        return self._verify_jwt(token, API_AUDIENCE)

    def verify_notification(self, token: str, subscription: str | None) -> Principal | None:
        """The platform behind a notification's token, or None.

        A platform token must be bound to ``subscription`` (the URI the platform gave for our
        subscription): a token captured from another subscription's notifications, e.g. an
        app's own, is refused. Static tokens (standalone use, tests) pass.
        """
        if self._matches_static(token):
            return STATIC_PRINCIPAL
        principal = self._verify_jwt(token, NOTIFICATION_AUDIENCE)
        if principal is None or subscription is None or principal.subscription != subscription:
            return None
        return principal

    def _matches_static(self, token: str) -> bool:
        candidate = token.encode()
        # Compare against every token so timing does not tell which one matched.
        matched = False
        for known in self._static:
            matched |= hmac.compare_digest(candidate, known)
        return matched

    def _verify_jwt(self, token: str, audience: str) -> Principal | None:
        if self._jwt_keys is None or token.count(".") != 2:
            return None
        cache_key = audience + " " + token
        now = time.time()
        with self._lock:
            hit = self._cache.get(cache_key)
        if hit is not None and hit[1] > now:
            principal = hit[0]
        else:
            decoded = self._decode(token, audience)
            if decoded is None:
                return None
            principal, expires = decoded
            with self._lock:
                if len(self._cache) >= self._cache_size:
                    self._cache.clear()  # rare; simpler than an LRU and still bounded
                self._cache[cache_key] = (principal, expires)
        if self._is_revoked is not None and self._is_revoked(principal):
            return None
        return principal

    def _decode(self, token: str, audience: str) -> tuple[Principal, float] | None:
        assert self._jwt_keys is not None
        try:
            kid = jwt.get_unverified_header(token).get("kid", "")
            claims = jwt.decode(
                token,
                self._jwt_keys(kid),
                algorithms=ALGORITHMS,
                audience=audience,
                issuer=ISSUER,
                options={"require": ["exp", "iat", "sub", "iss", "aud"]},
            )
        except (jwt.PyJWTError, jwt.PyJWKClientError, OSError, *_MALFORMED) as exc:
            log.debug("bearer token rejected", reason=f"{type(exc).__name__}: {exc}")
            return None
        scopes = frozenset(str(claims.get("scope", "")).split())
        principal = Principal(
            subject=str(claims["sub"]),
            app_instance_id=_optional_str(claims.get("app_instance_id")),
            is_admin=ADMIN_SCOPE in scopes,
            scopes=scopes,
            subscription=_optional_str(claims.get("subscription")),
        )
        return principal, float(claims["exp"])


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def ensure_static_token(tokens: list[str], state_dir: Path, service: str) -> list[str]:
    """Never run open: with no configured token, generate one and write it (0600).

    The token is written to ``<state_dir>/<service>.token`` and reused on the next start.
    """
    if tokens:
        return tokens
    path = state_dir / f"{service}.token"
    private_dir(state_dir)
    if path.exists():
        path.chmod(0o600)
        return [path.read_text().strip()]
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    log.warning("no API token configured; generated one", service=service, token_file=str(path))
    return [token]
