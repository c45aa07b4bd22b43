"""Bearer-token verification shared by every service (deny by default).

A token is accepted if it is one of the service's static tokens. The MEC platform engineer
extends this with platform-issued OAuth2 JWTs (verified against the platform's JWKS).
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from mec_common.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True)
class Principal:
    """Who is calling: an admin/static token, or one MEC app instance."""

    subject: str
    app_instance_id: str | None = None
    is_admin: bool = False


class TokenVerifier:
    def __init__(self, static_tokens: list[str]) -> None:
        self._static = [t.encode() for t in static_tokens if t]

    def verify(self, token: str) -> Principal | None:
        """The caller behind ``token``, or None if the token is not valid."""
        candidate = token.encode()
        # Compare against every token so timing does not tell which one matched.
        matched = False
        for known in self._static:
            matched |= hmac.compare_digest(candidate, known)
        return Principal(subject="static-token", is_admin=True) if matched else None


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
