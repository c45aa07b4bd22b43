"""Compose and the chart configure the services with the services' own variable names.

Every `PLATFORM_*`, `RNIS_*`, `PEP_*`, `PM_*`, `DASHBOARD_*` and `FLOWRTT_*` variable that
docker-compose.yml or any rendering of the chart sets must be a setting the service reads: a
misspelt or invented name would otherwise be ignored in silence. The Python services' names
come from their settings classes, the RNIS adapter's from `rnis-adapter env` (its settings
table).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from harness import DOCKER, REPO, env_file, run
from pydantic_settings import BaseSettings
from test_chart import VALUES, containers, render

from mec_dashboard.config import DashboardSettings
from mec_l4s.settings import FlowRttSettings
from mec_pep.config import PepSettings
from mec_pep.ran_aware.settings import RanAwareSettings
from mec_platform.config import PlatformSettings
from path_manager.settings import PmSettings

PREFIXES = ("PLATFORM_", "RNIS_", "PEP_", "PM_", "DASHBOARD_", "FLOWRTT_")


def python_names(*classes: type[BaseSettings]) -> set[str]:
    return {c.model_config["env_prefix"] + f.upper() for c in classes for f in c.model_fields}


@pytest.fixture(scope="module")
def known(docker_engine: None) -> set[str]:
    rnis_table = run(DOCKER, "run", "--rm", "mts/rnis-adapter:latest", "env")
    rnis = set(re.findall(r"^\| `(RNIS_[A-Z0-9_]+)`", rnis_table, re.MULTILINE))
    assert "RNIS_FLEXRAN_URL" in rnis
    return rnis | python_names(
        PlatformSettings,
        PepSettings,
        RanAwareSettings,
        PmSettings,
        DashboardSettings,
        FlowRttSettings,
    )


def unknown(names: set[str], known: set[str]) -> set[str]:
    return {n for n in names if n.startswith(PREFIXES) and n not in known}


def compose_environments(tmp_path: Path) -> dict[str, set[str]]:
    """service -> the variables compose passes it, over both kinds of .env (env.sh)."""
    used: dict[str, set[str]] = {}
    for kind in ("emulated", "ran"):
        env_file(kind, tmp_path / f"{kind}.env")
        config = run(DOCKER, "compose", "--env-file", str(tmp_path / f"{kind}.env"), "config")
        for name, service in yaml.safe_load(config)["services"].items():
            used.setdefault(name, set()).update(service.get("environment", {}))
    return used


# Settings compose does not take from .env: fixed by the image or the volumes, or the Mp1
# credentials mp1-provision writes (docs/deployment.md#mp1).
# Set by compose itself, or meaningless on one host (the PEP's node and cells per node:
# Kubernetes only). The observer's BPF object is the image's; its namespace is the MEC
# host's, where compose runs it (FLOWRTT_NETNS: for a process beside the namespaces).
NOT_FROM_ENV = {"STATE_DIR", "LOG_FORMAT", "PLATFORM_URL", "APP_INSTANCE_ID", "CLIENT_ID",
                "CLIENT_SECRET", "MELD_PIN_ROOT", "MELD_BPF_OBJECT", "MELD_LOADER", "NODE_NAME",
                "RNIS_CELLS_BY_NODE", "BPF_OBJECT", "NETNS"}  # fmt: skip


def test_compose_uses_the_services_names(known: set[str], tmp_path: Path) -> None:
    used = set().union(*compose_environments(tmp_path).values())
    assert {"RNIS_FLEXRAN_URL", "PEP_ALLOWED_CLIENTS", "PM_MODE"} <= used
    assert unknown(used, known) == set()


def test_compose_passes_every_setting_of_the_apps(known: set[str], tmp_path: Path) -> None:
    """Every RNIS adapter, PEP, path manager and flow-RTT setting can be set in .env."""
    used = compose_environments(tmp_path)
    apps = (("rnis-adapter", "RNIS_"), ("pep", "PEP_"), ("path-manager", "PM_"),
            ("flowrtt", "FLOWRTT_"))  # fmt: skip
    for service, prefix in apps:
        settings = {n for n in known if n.startswith(prefix)}
        fixed = {prefix + n for n in NOT_FROM_ENV}
        assert settings - fixed - used[service] == set(), service


def test_chart_uses_the_services_names(known: set[str]) -> None:
    used: set[str] = set()
    for values in VALUES.values():
        for c in containers(render(values)).values():
            used |= {e["name"] for e in c.get("env", [])}
    assert {"RNIS_FLEXRAN_URL", "PEP_MELD_INSTANCE", "PLATFORM_PUBLIC_URL"} <= used
    assert unknown(used, known) == set()


def test_values_document_only_real_names(known: set[str]) -> None:
    values = yaml.safe_load((REPO / "charts/mec-transport-suite/values.yaml").read_text())
    for service in ("platform", "rnisAdapter", "pep", "pathManager", "flowRtt"):
        assert unknown(set(values[service]["env"]), known) == set(), service


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_public_base_images_fit_the_sources() -> None:
    """The Dockerfile's default bases can build what go.mod and pyproject.toml ask for."""
    dockerfile = (REPO / "deploy/docker/Dockerfile").read_text()
    go_image = re.search(r"^ARG GO_IMAGE=golang:(\d+\.\d+)", dockerfile, re.MULTILINE)
    go_mod = re.search(r"^go (\d+\.\d+)", (REPO / "go.mod").read_text(), re.MULTILINE)
    assert go_image and go_mod
    assert version(go_image[1]) >= version(go_mod[1]), "raise GO_IMAGE to go.mod's version"
    python_image = re.search(r"^ARG PYTHON_IMAGE=python:(\d+\.\d+)", dockerfile, re.MULTILINE)
    requires = re.search(r'requires-python = ">=(\d+\.\d+)"', (REPO / "pyproject.toml").read_text())
    assert python_image and requires
    assert version(python_image[1]) >= version(requires[1])
