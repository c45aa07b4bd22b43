"""The conformance tests' shared settings: where the official specs are, and the seed."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
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
    return _enums_dropped(node, lambda values: values == ["SEE_DESCRIPTION"])


def _enums_dropped(node: Any, drop: Callable[[Any], bool]) -> Any:
    """``node`` without the enumerations whose values ``drop`` selects."""
    if isinstance(node, dict):
        return {k: _enums_dropped(v, drop) for k, v in node.items()
                if not (k == "enum" and drop(v))}  # fmt: skip
    if isinstance(node, list):
        return [_enums_dropped(v, drop) for v in node]
    return node


def official_spec(path: Path) -> dict[str, Any]:
    """An official OpenAPI file, placeholder enumerations dropped (``without_placeholders``)."""
    spec: dict[str, Any] = without_placeholders(yaml.safe_load(path.read_text()))
    return spec


def mec011_v3_repaired(path: Path) -> dict[str, Any]:
    """A MEC 011 v3.1.1 file with its rendering faults repaired in memory (the file stays
    unmodified), each where it contradicts ETSI's own v2.1.1 (ETSI Forge) and its own
    descriptions:

    - every one-value enumeration dropped: besides the ``SEE_DESCRIPTION`` placeholders,
      the rendering kept only the last value of some (``TrafficRule.action``
      DUPLICATE_ENCAPSULATED, ``CurrentTime.timeSourceStatus`` "source",
      ``AppTerminationNotification.operationAction`` TERMINATING); the values are checked
      against v2.1.1 by the same fuzzing of that file;
    - ``OAuth2Info.grantTypes`` in MecServiceMgmtApi typed as a list of strings, as its
      description ("List of ...") and MecAppSupportApi's rendering of the same type say.
    """
    one_value = lambda values: isinstance(values, list) and len(values) == 1  # noqa: E731
    spec: dict[str, Any] = _enums_dropped(yaml.safe_load(path.read_text()), one_value)
    oauth = spec["components"]["schemas"].get("OAuth2Info", {}).get("properties", {})
    grant_types = oauth.get("grantTypes", {})
    if grant_types.get("type") == "string":
        oauth["grantTypes"] = {"type": "array", "items": {"type": "string"},
                               "description": grant_types.get("description", "")}  # fmt: skip
    return spec
