"""The conformance tests' shared settings: where the official specs are, and the seed."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# pytest imports test modules by path (importlib mode): the modules here and the RNIS
# adapter's test helpers are imported by name, so their directories go on sys.path.
sys.path[:0] = [
    str(Path(__file__).parent),
    str(REPO / "rnis-adapter" / "tests"),
    str(REPO / "mec-platform" / "tests"),
]
# The unmodified ETSI files sit beside the repository (../shared/specs/etsi-mec);
# MTS_SPECS_DIR points elsewhere (a worktree in another directory).
SPECS = Path(os.environ.get("MTS_SPECS_DIR") or REPO.parent / "shared" / "specs" / "etsi-mec")
# Drawn at run time and printed in the report header; MTS_CONFORMANCE_SEED repeats a run.
SEED = int(os.environ.get("MTS_CONFORMANCE_SEED") or random.randrange(2**32))


def pytest_report_header() -> str:
    return f"schemathesis seed: {SEED} (MTS_CONFORMANCE_SEED={SEED} repeats this run)"


@pytest.fixture(scope="session")
def specs() -> Path:
    if not SPECS.is_dir():
        pytest.fail(f"{SPECS} is missing: the official specs must sit beside the repository "
                    "(or set MTS_SPECS_DIR)")  # fmt: skip
    return SPECS


def without_placeholders(node: Any) -> Any:
    """``node`` with the placeholder enumerations of the ETSI v3.x renderings dropped.

    The MEC 010-2 v3.1.1 (and MEC 011 v3.1.1) files give many enumerations as
    ``["SEE_DESCRIPTION"]``, the values being only in the descriptions: no conforming value
    validates against them. Dropped in memory (the files stay unmodified); the values are
    checked against the descriptions by the tests that produce them.
    """
    if isinstance(node, dict):
        return {k: without_placeholders(v) for k, v in node.items()
                if not (k == "enum" and v == ["SEE_DESCRIPTION"])}  # fmt: skip
    if isinstance(node, list):
        return [without_placeholders(v) for v in node]
    return node


def official_spec(path: Path) -> dict[str, Any]:
    """An official OpenAPI file, placeholder enumerations dropped (``without_placeholders``)."""
    spec: dict[str, Any] = without_placeholders(yaml.safe_load(path.read_text()))
    return spec
