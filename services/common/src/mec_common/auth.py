"""Bearer-token verification shared by every service (deny by default).

A token is accepted if it is

- one of the service's static tokens (admin; for standalone use and tests), or
- an OAuth2 access token issued by the MEC platform: a JWT (EdDSA or RS256) whose
  signature verifies against the platform's JWKS (``<platform>/oauth2/jwks``), with the
  platform's issuer and the API audience, not expired.

Platform tokens carry the app instance they were issued to (``app_instance_id`` claim) and
the scope ``mec.admin`` for the platform manager's credentials. The platform also signs the
notifications it sends (service availability, app termination) with a short-lived token
of audience ``mec-notification``; ``verify`` refuses those so that a callback receiver that
leaks one cannot call any API, and ``verify_notification`` accepts only those.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from mec_common.logging import get_logger

log = get_logger(__name__)

ISSUER = "mec-platform"
API_AUDIENCE = "mec-api"
NOTIFICATION_AUDIENCE = "mec-notification"
ADMIN_SCOPE = "mec.admin"
ALGORITHMS = ["EdDSA", "RS256"]


@dataclass(frozen=True)
class Principal:
    """Who is calling: an admin/static token, or one MEC app instance."""

    subject: str
    app_instance_id: str | None = None
    is_admin: bool = False

    def may_act_for(self, app_instance_id: str) -> bool:
        """Admins reach every app's resources; an app only its own."""
        return self.is_admin or self.app_instance_id == app_instance_id


KeyLookup = Callable[[str], Any]
"""Returns the public key for a JWT ``kid`` (raises ``jwt.PyJWKError`` if unknown)."""


def jwks_key_lookup(jwks_url: str, *, timeout: float = 5.0) -> KeyLookup:
    """Keys from a remote JWKS, cached; an unknown ``kid`` refetches (key rotation)."""
    client = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=int(timeout))

    def lookup(kid: str) -> Any:
        return client.get_signing_key(kid).key

    return lookup


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
            keys = jwks_key_lookup(platform_url.rstrip("/") + "/oauth2/jwks")
            return cls(static_tokens, jwt_keys=keys)
        return cls(ensure_static_token(static_tokens, state_dir, service))

    def verify(self, token: str) -> Principal | None:
        """The caller behind ``token``, or None if the token is not valid for an API."""
        if self._matches_static(token):
            return Principal(subject="static-token", is_admin=True)
        return self._verify_jwt(token, API_AUDIENCE)

    def verify_notification(self, token: str) -> Principal | None:
        """The platform behind a notification's token, or None."""
        if self._matches_static(token):
            return Principal(subject="static-token", is_admin=True)
        return self._verify_jwt(token, NOTIFICATION_AUDIENCE)

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
        except (jwt.PyJWTError, jwt.PyJWKClientError, OSError) as exc:
            log.info("bearer token rejected", reason=str(exc))
            return None
        scopes = str(claims.get("scope", "")).split()
        principal = Principal(
            subject=str(claims["sub"]),
            app_instance_id=claims.get("app_instance_id"),
            is_admin=ADMIN_SCOPE in scopes,
        )
        return principal, float(claims["exp"])


def ensure_static_token(tokens: list[str], state_dir: Path, service: str) -> list[str]:
    """Never run open: with no configured token, generate one and write it (0600).

    The token is written to ``<state_dir>/<service>.token`` and reused on the next start.
    """
    if tokens:
        return tokens
    path = state_dir / f"{service}.token"
    if path.exists():
        return [path.read_text().strip()]
    state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    log.warning("no API token configured; generated one", service=service, token_file=str(path))
    return [token]
