"""OAuth 2.0 client credentials: signing keys, client secrets, tokens, JWKS.

Tokens are EdDSA (Ed25519) JWTs. Every service verifies them with ``mec_common.auth``
against ``/oauth2/jwks``; the platform verifies its own tokens with the same code.
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
from sqlalchemy import select

from mec_common.auth import (
    ADMIN_SCOPE,
    API_AUDIENCE,
    ISSUER,
    NOTIFICATION_AUDIENCE,
    Principal,
    TokenVerifier,
)
from mec_common.logging import get_logger
from mec_platform.db import Client, Database, SigningKey

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
        self._notify_token: tuple[str, float] = ("", 0.0)
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
        """New credentials for an app instance (the secret is shown only now)."""
        client_id = f"app-{app_instance_id}"
        secret = secrets.token_urlsafe(32)
        with self._db.session() as s:
            s.merge(
                Client(
                    client_id=client_id,
                    secret_hash=hash_secret(secret),
                    app_instance_id=app_instance_id,
                )
            )
        with self._lock:
            self._live_clients.add(client_id)
        return client_id, secret

    def revoke_app_clients(self, app_instance_id: str) -> None:
        with self._db.session() as s:
            rows = list(s.scalars(select(Client).where(Client.app_instance_id == app_instance_id)))
            for row in rows:
                s.delete(row)
        with self._lock:
            self._live_clients -= {row.client_id for row in rows}

    def _is_revoked(self, principal: Principal) -> bool:
        if principal.subject in ("static-token", "mec-platform"):
            return False
        with self._lock:
            return principal.subject not in self._live_clients

    # --- tokens -----------------------------------------------------------------------------

    def issue(self, client_id: str, secret: str) -> dict[str, Any] | None:
        """A token response for valid credentials, else None."""
        with self._db.session() as s:
            row = s.get(Client, client_id)
            if row is None or not check_secret(secret, row.secret_hash):
                return None
            app_instance_id, is_admin = row.app_instance_id, row.is_admin
        scope = ADMIN_SCOPE if is_admin else "mec.app"
        claims = {"sub": client_id, "aud": API_AUDIENCE, "scope": scope}
        if app_instance_id:
            claims["app_instance_id"] = app_instance_id
        token = self._sign(claims, self._ttl)
        return {"access_token": token, "token_type": "Bearer", "expires_in": self._ttl,
                "scope": scope}  # fmt: skip

    def notification_token(self) -> str:
        """The bearer token on notifications (audience mec-notification only)."""
        token, expires = self._notify_token
        if time.time() > expires - 60:
            ttl = 300
            token = self._sign({"sub": "mec-platform", "aud": NOTIFICATION_AUDIENCE}, ttl)
            self._notify_token = (token, time.time() + ttl)
        return token

    def _sign(self, claims: dict[str, Any], ttl: int) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "iat": now, "exp": now + ttl, "jti": uuid.uuid4().hex, **claims}
        return jwt.encode(body, self._private, algorithm="EdDSA", headers={"kid": self._kid})


def _generated_admin_secret(state_dir: Path) -> str:
    path = state_dir / "platform-admin.secret"
    if path.exists() and (stored := path.read_text().strip()):
        return stored
    state_dir.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.chmod(0o600)  # also an empty file left behind
    path.write_text(secret + "\n")
    log.warning("generated the platform admin secret", secret_file=str(path))
    return secret
