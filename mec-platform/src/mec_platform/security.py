"""OAuth 2.0 client credentials: signing keys, client secrets, tokens, JWKS, revocations.

Tokens are EdDSA (Ed25519) JWTs. Every service verifies them with ``mec_common.auth``
against ``/oauth2/jwks``; the platform verifies its own tokens with the same code. Scopes
(docs/security.md): ``mec.admin`` for the admin client, ``mec.app`` plus
``mec.consume:<serName>`` for each service an app's AppD requires or may use, and
``mec.platform`` on the notification tokens, each bound to one subscription. Every
issuance of app credentials has a client id of its own, so a revocation (termination,
deletion) is never undone by later credentials of the same instance; revoked client ids are
published at ``/oauth2/revocations`` until their last token has expired.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from sqlalchemy import delete, select

from mec_common.auth import (
    ADMIN_SCOPE,
    API_AUDIENCE,
    APP_SCOPE,
    ISSUER,
    NOTIFICATION_AUDIENCE,
    PLATFORM_SCOPE,
    PLATFORM_SUBJECT,
    Principal,
    TokenVerifier,
    consume_scope,
)
from mec_common.config import write_private
from mec_common.logging import get_logger
from mec_platform.db import AppInstance, AppPackage, Client, Database, RevokedClient, SigningKey

log = get_logger(__name__)


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=2**14, r=8, p=1, dklen=32)
    return f"scrypt${salt.hex()}${digest.hex()}"


def check_secret(secret: str, stored: str) -> bool:
    try:
        _, salt, _ = stored.split("$")
    except ValueError:
        return False
    return hmac.compare_digest(hash_secret(secret, bytes.fromhex(salt)), stored)


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Authority:
    """Issues and verifies the platform's tokens; keeps the set of live clients in memory."""

    def __init__(self, db: Database, static_tokens: list[str], token_ttl_s: int) -> None:
        self._db = db
        self._ttl = token_ttl_s
        self._kid, self._private, self._public_keys = self._load_keys()
        self._live_clients: set[str] = set()
        self._lock = threading.Lock()
        self._notify_tokens: dict[str, tuple[str, float]] = {}  # subscription -> token
        with db.session() as s:
            self._live_clients = set(s.scalars(select(Client.client_id)))
        self.verifier = TokenVerifier(
            static_tokens, jwt_keys=self._public_key, is_revoked=self._is_revoked
        )

    # --- keys -------------------------------------------------------------------------------

    def _load_keys(self) -> tuple[str, Ed25519PrivateKey, dict[str, Ed25519PublicKey]]:
        with self._db.session() as s:
            rows = list(s.scalars(select(SigningKey).order_by(SigningKey.created)))
            if not rows:
                key = Ed25519PrivateKey.generate()
                pem = key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                ).decode()
                rows = [SigningKey(kid=uuid.uuid4().hex[:16], private_pem=pem)]
                s.add(rows[0])
        keys: dict[str, Ed25519PrivateKey] = {}
        for row in rows:
            private = serialization.load_pem_private_key(row.private_pem.encode(), None)
            assert isinstance(private, Ed25519PrivateKey)
            keys[row.kid] = private
        newest = rows[-1].kid
        return newest, keys[newest], {kid: k.public_key() for kid, k in keys.items()}

    def _public_key(self, kid: str) -> Ed25519PublicKey:
        try:
            return self._public_keys[kid]
        except KeyError:
            raise jwt.InvalidKeyError(f"unknown key id {kid!r}") from None

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, public in self._public_keys.items():
            raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            keys.append(
                {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw), "kid": kid, "use": "sig",
                 "alg": "EdDSA"}
            )  # fmt: skip
        return {"keys": keys}

    # --- clients ----------------------------------------------------------------------------

    def ensure_admin(self, client_id: str, secret: str | None, state_dir: Path) -> str:
        """Create or update the admin client; returns its secret (generated if not given)."""
        if not secret:  # None or "": never an empty admin secret
            secret = _generated_admin_secret(state_dir)
        with self._db.session() as s:
            row = s.get(Client, client_id)
            if row is None:
                s.add(Client(client_id=client_id, secret_hash=hash_secret(secret), is_admin=True))
            elif not check_secret(secret, row.secret_hash) or not row.is_admin:
                row.secret_hash, row.is_admin = hash_secret(secret), True
        with self._lock:
            self._live_clients.add(client_id)
        return secret

    def create_app_client(self, app_instance_id: str) -> tuple[str, str]:
        """New credentials for an app instance (the secret is shown only now), beside any it
        has; termination and deletion revoke them all."""
        client_id = f"app-{app_instance_id}-{secrets.token_hex(4)}"
        secret = secrets.token_urlsafe(32)
        with self._db.session() as s:
            s.add(Client(client_id=client_id, secret_hash=hash_secret(secret),
                         app_instance_id=app_instance_id))  # fmt: skip
        with self._lock:
            self._live_clients.add(client_id)
        return client_id, secret

    def revoke_app_clients(self, app_instance_id: str) -> None:
        """The instance's credentials and every token issued to them stop working."""
        until = time.time() + self._ttl  # the last token of these clients expires by then
        with self._db.session() as s:
            rows = list(s.scalars(select(Client).where(Client.app_instance_id == app_instance_id)))
            for row in rows:
                s.delete(row)
                s.merge(RevokedClient(client_id=row.client_id, expires=until))
        with self._lock:
            self._live_clients -= {row.client_id for row in rows}

    def revocations(self) -> dict[str, Any]:
        """Revoked client ids whose tokens may still be unexpired (``/oauth2/revocations``)."""
        now = time.time()
        with self._db.session() as s:
            s.execute(delete(RevokedClient).where(RevokedClient.expires < now))
            rows = list(s.scalars(select(RevokedClient).order_by(RevokedClient.client_id)))
        return {"revoked": [{"sub": r.client_id, "until": int(r.expires) + 1} for r in rows]}

    def _is_revoked(self, principal: Principal) -> bool:
        if principal.subject in ("static-token", PLATFORM_SUBJECT):
            return False
        with self._lock:
            return principal.subject not in self._live_clients

    # --- tokens -----------------------------------------------------------------------------

    def issue(self, client_id: str, secret: str) -> dict[str, Any] | None:
        """A token response for valid credentials, else None. CPU-heavy (scrypt): call it
        from a worker thread, never from the event loop (``oauth_router``)."""
        with self._db.session() as s:
            row = s.get(Client, client_id)
            if row is None or not check_secret(secret, row.secret_hash):
                return None
            app_instance_id, is_admin = row.app_instance_id, row.is_admin
            scope = ADMIN_SCOPE if is_admin else " ".join(self._app_scopes(s, app_instance_id))
        claims = {"sub": client_id, "aud": API_AUDIENCE, "scope": scope}
        if app_instance_id:
            claims["app_instance_id"] = app_instance_id
        token = self._sign(claims, self._ttl)
        return {"access_token": token, "token_type": "Bearer", "expires_in": self._ttl,
                "scope": scope}  # fmt: skip

    @staticmethod
    def _app_scopes(s: Any, app_instance_id: str | None) -> list[str]:
        """``mec.app`` and a consumer scope per service the app's AppD requires or may use."""
        instance = s.get(AppInstance, app_instance_id) if app_instance_id else None
        package = s.get(AppPackage, instance.app_pkg_id) if instance is not None else None
        appd = package.appd if package is not None else {}
        wanted = appd.get("appServiceRequired", []) + appd.get("appServiceOptional", [])
        names = sorted({str(dep["serName"]) for dep in wanted if dep.get("serName")})
        return [APP_SCOPE, *(consume_scope(name) for name in names)]

    def notification_token(self, subscription: str) -> str:
        """The bearer token on the notifications of one subscription (its URI): audience
        mec-notification only, so a receiver that leaks it cannot call any API, and bound
        to that subscription, so it cannot pass for another receiver's notification."""
        with self._lock:
            token, expires = self._notify_tokens.get(subscription, ("", 0.0))
            if time.time() > expires - 60:
                ttl = 300
                if len(self._notify_tokens) > 4096:
                    self._notify_tokens.clear()  # bounded; tokens are cheap to sign again
                token = self._sign(
                    {
                        "sub": PLATFORM_SUBJECT,
                        "aud": NOTIFICATION_AUDIENCE,
                        "scope": PLATFORM_SCOPE,
                        "subscription": subscription,
                    },
                    ttl,
                )
                self._notify_tokens[subscription] = (token, time.time() + ttl)  # fmt: skip
        return token

    def _sign(self, claims: dict[str, Any], ttl: int) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "iat": now, "exp": now + ttl, "jti": uuid.uuid4().hex, **claims}
        return jwt.encode(body, self._private, algorithm="EdDSA", headers={"kid": self._kid})


class LoginLimiter:
    """Admission to the token endpoint: a token bucket per client address and a cap on the
    logins being checked at once (each costs ~50 ms of scrypt), so a flood of logins gets
    429 at once instead of queueing up CPU work that starves everyone else."""

    def __init__(self, rate_per_s: float, burst: int, max_pending: int) -> None:
        self._rate, self._burst, self._max_pending = rate_per_s, burst, max_pending
        self._buckets: dict[str, tuple[float, float]] = {}  # address -> (tokens, when)
        self._pending = 0
        self._lock = threading.Lock()

    def admit(self, address: str) -> bool:
        """Take a login slot for ``address``; ``release()`` once it has been checked."""
        now = time.monotonic()
        with self._lock:
            if self._pending >= self._max_pending:
                return False
            tokens, then = self._buckets.get(address, (float(self._burst), now))
            tokens = min(float(self._burst), tokens + (now - then) * self._rate)
            if tokens < 1:
                self._buckets[address] = (tokens, now)
                return False
            if len(self._buckets) > 65536:
                self._buckets.clear()  # bounded memory; forgetting buckets only lets some in
            self._buckets[address] = (tokens - 1, now)
            self._pending += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._pending -= 1


def _generated_admin_secret(state_dir: Path) -> str:
    path = state_dir / "platform-admin.secret"
    if path.exists() and (stored := path.read_text().strip()):
        path.chmod(0o600)
        return stored
    secret = secrets.token_urlsafe(32)
    write_private(path, secret + "\n")  # also over an empty file left behind
    log.warning("generated the platform admin secret", secret_file=str(path))
    return secret
