"""Service configuration from environment variables (one prefix per service).

Subclass ``ServiceSettings`` with the service's prefix::

    class PepSettings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="PEP_")
        http_port: int = 8102

Lists are comma-separated in the environment (``PEP_API_TOKENS=a,b``): ``CommaList`` for
strings; for lists of other types, put ``split_commas`` before pydantic's own parsing::

    ports: Annotated[list[int], NoDecode, BeforeValidator(split_commas)] = [80, 443]
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def split_commas(value: Any) -> Any:
    """``"a, b,,c"`` -> ``["a", "b", "c"]`` (blanks trimmed, empty items dropped, so ``""`` is
    the empty list); anything but a string (a list from code or a default) passes unchanged."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


_split_commas = split_commas  # the old private name, still imported by mec_pep.ran_aware


Port = Annotated[int, Field(ge=0, le=65535)]
"""A TCP port; subclasses overriding ``http_port`` keep the range: ``http_port: Port = 8102``."""

CommaList = Annotated[list[str], NoDecode, BeforeValidator(split_commas)]
"""A list setting written as ``a,b,c`` in the environment."""


def default_state_dir() -> Path:
    """Where services keep generated tokens and small state: /var/lib/mts as root."""
    if os.geteuid() == 0:
        return Path("/var/lib/mts")
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local/state")) / "mts"


def private_dir(path: Path) -> Path:
    """``path`` as a directory only its owner can enter (0700): it holds secrets."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a secret: the file is 0600 from its creation on, never readable by others."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # also a file that existed with wider permissions
    with os.fdopen(fd, "w") as f:
        f.write(text)


class ServiceSettings(BaseSettings):
    """Settings every service has. Field docs end up in docs/configuration.md."""

    model_config = SettingsConfigDict(env_prefix="MTS_", extra="ignore", frozen=False)

    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_format: Literal["json", "console"] = Field(
        "console", description="json for machines (compose, Kubernetes), console for people"
    )
    http_host: str = Field("0.0.0.0", description="address the REST API listens on")
    http_port: Port = Field(8000, description="port of the REST API")
    api_tokens: CommaList = Field(
        default_factory=list,
        description="static bearer tokens accepted by the API (comma-separated)",
    )
    public_url: str | None = Field(
        None,
        description="base URL clients reach this API at, used in every link, Location and "
        "ProblemDetails instance (unset = the URL of each request)",
    )
    trusted_proxies: CommaList = Field(
        default_factory=list,
        description="CIDRs of reverse proxies whose X-Forwarded-Proto/Host/Prefix are honoured "
        "(comma-separated; empty = nobody's)",
    )
    platform_url: str | None = Field(
        None, description="MEC platform base URL (Mp1); unset = run standalone"
    )
    app_instance_id: str | None = Field(None, description="this app's instance id on the platform")
    client_id: str | None = Field(None, description="OAuth2 client id issued by the platform")
    client_secret: str | None = Field(None, description="OAuth2 client secret")
    amqp_url: str = Field(
        "amqp://guest:guest@127.0.0.1:5672/%2F", description="RabbitMQ URL (AMQP 0-9-1)"
    )
    state_dir: Path = Field(
        default_factory=default_state_dir,
        description="directory for generated tokens and state (made 0700; files in it 0600)",
    )
    max_body_bytes: int = Field(
        1 << 20, ge=1024, description="largest request body the REST API reads (413 beyond)"
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="time a client has to send a request's headers (slowloris)"
    )
