"""Platform settings (environment variables with the ``PLATFORM_`` prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from mec_common.config import CommaList, Port, ServiceSettings


class PlatformSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="PLATFORM_", extra="ignore")

    http_port: Port = Field(8100, description="port of Mp1, the platform manager and OAuth2")
    public_url: str | None = Field(
        None,
        description="base URL the platform advertises in Location headers, links and tokens "
        "(default http://<host>:<port>, 127.0.0.1 when listening on every address)",
    )
    database_url: str | None = Field(
        None,
        description="SQLAlchemy URL; default SQLite in the state dir; "
        "PostgreSQL as postgresql+psycopg://user:pw@host:port/db",
    )
    admin_client_id: str = Field("admin", description="OAuth2 client id of the platform admin")
    admin_client_secret: str | None = Field(
        None,
        description="admin client secret; unset or empty = generated at first start and "
        "written (0600) to <state dir>/platform-admin.secret",
    )
    token_ttl_s: int = Field(900, ge=30, le=86400, description="lifetime of access tokens")
    login_rate_per_s: float = Field(
        5.0, gt=0, description="token requests per second per client address (429 beyond)"
    )
    login_burst: int = Field(20, ge=1, description="token requests a client address may burst")
    login_max_pending: int = Field(
        16, ge=1, description="token requests checked at once (scrypt); 429 beyond"
    )
    backend: Literal["process", "docker", "helm"] = Field(
        "process", description="how app instances are run: local processes, Docker, Helm"
    )
    graceful_timeout_s: int = Field(
        10, ge=0, le=3600, description="default maxGracefulTimeout of app termination"
    )
    notify_attempts: int = Field(5, ge=1, le=20, description="delivery attempts per notification")
    notify_backoff_s: float = Field(0.5, gt=0, description="first retry delay (doubles)")
    notify_timeout_s: float = Field(
        5.0, gt=0, le=300, description="time limit of one notification delivery attempt"
    )
    notify_per_receiver: int = Field(
        4, ge=1, le=256, description="deliveries in flight per receiver (callback host:port)"
    )
    max_subscriptions_per_app: int = Field(
        100, ge=1, description="subscriptions an app instance may hold (both Mp1 APIs)"
    )
    liveness_check_s: float = Field(
        1.0, gt=0, description="how often missed heartbeats are checked"
    )
    supervision_s: float = Field(
        2.0, gt=0, description="how often the platform checks that started apps still run"
    )
    amqp_exchange: str = Field("rnis", description="exchange advertised with the AMQP transport")
    apps_dir: Path | None = Field(
        None, description="where process-backend apps run and log (default <state dir>/apps)"
    )
    docker_socket: str = Field("/var/run/docker.sock", description="Docker engine API socket")
    docker_network: str = Field("host", description="network mode of app containers")
    helm_binary: str = Field("helm", description="helm CLI")
    kubeconfig: str | None = Field(None, description="kubeconfig for the helm backend")
    helm_namespace: str = Field("mec-apps", description="Kubernetes namespace of app releases")
    dataplane: bool = Field(
        False, description="apply traffic rules of instantiated apps as nftables TPROXY rules"
    )
    dataplane_netns: str | None = Field(
        None, description="network namespace of the MEC host's data plane (unset = this one)"
    )
    callback_networks: CommaList = Field(
        default_factory=list,
        description="CIDRs notification callbacks may point to (comma-separated; empty = any)",
    )

    @field_validator("admin_client_secret", mode="before")
    @classmethod
    def _empty_secret_is_unset(cls, value: object) -> object:
        """An empty variable (compose's ``PLATFORM_ADMIN_CLIENT_SECRET=``) means unset: never
        an admin whose secret is the empty string."""
        return None if isinstance(value, str) and not value.strip() else value

    def base_url(self) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.http_host in ("0.0.0.0", "::", "") else self.http_host
        return f"http://{host}:{self.http_port}"

    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.state_dir / 'platform.db'}"

    def apps_path(self) -> Path:
        return self.apps_dir or self.state_dir / "apps"
