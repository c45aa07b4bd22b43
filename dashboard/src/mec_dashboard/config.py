"""The dashboard's settings (``DASHBOARD_*``; docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from mec_common.config import Port, ServiceSettings

REPO = Path(__file__).resolve().parents[3]


class DashboardSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="DASHBOARD_", extra="ignore")

    http_port: Port = Field(8104, description="port of the dashboard (page and API)")
    sample_interval_s: float = Field(
        0.5,
        ge=0.1,
        le=10,
        description="how often the services' APIs are read and the page updated (s); "
        "independent of the RNIS poll period, so the cost stays flat at 8 ms polling",
    )
    slow_interval_s: float = Field(
        5.0, ge=1, le=60, description="Mp1 discovery, health checks and the platform view (s)"
    )
    history_s: float = Field(300, ge=10, le=3600, description="time span of the charts (s)")
    rnis_url: str | None = Field(
        None, description="RNIS API base (…/rni/v2); unset: found through Mp1 discovery"
    )
    pep_url: str | None = Field(None, description="PEP API base (…/pep/v1); unset: Mp1")
    pm_url: str | None = Field(None, description="path manager API base (…/pm/v1); unset: Mp1")
    backend_token: str | None = Field(
        None,
        description="bearer token for the services' APIs when the dashboard has no platform "
        "credentials (standalone); with a platform its own Mp1 token is used",
    )
    assets_dir: Path = Field(
        REPO / "build/dashboard/assets",
        description="the bundled charting library (make build puts uPlot there)",
    )
