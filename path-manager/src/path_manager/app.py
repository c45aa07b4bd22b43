"""The path manager as a MEC service (REST /pm/v1, Mp1 service ``path-manager``) and
``path-manager serve``."""

from __future__ import annotations

from fastapi import FastAPI

from mec_common.health import Health
from mec_common.rest_service import RestService, rest_service_app, run_service
from path_manager.manager import PathManager
from path_manager.settings import PmSettings

PATH_MANAGER = RestService(
    name="path-manager",
    ser_name="path-manager",
    transport_id="pm-rest",
    base_path="/pm/v1",
    title="Path manager",
    description="Predictive multipath control over Linux MPTCP (reactive, CDF, FPT and "
    "hybrids), fed by RNIS. See docs/path-manager.md.",
)


def build_app(settings: PmSettings) -> tuple[FastAPI, PathManager]:
    from path_manager.api import router

    health = Health()
    manager = PathManager(settings, health)
    return rest_service_app(PATH_MANAGER, settings, health, manager, router), manager


def serve() -> None:
    run_service(PmSettings(), lambda settings: build_app(settings)[0])
