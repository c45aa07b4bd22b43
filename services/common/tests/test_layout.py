"""The layout's rule (docs/architecture.md, "Code layout"): the packages a deployment runs
never import the lab (``mts_lab``: experiments, benches, beds) nor the emulated RAN
(``mts_testbed``); the lab imports them, not the reverse."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PRODUCT_SOURCES = (
    "services/common/src",
    "pep/src",
    "path-manager/src",
    "mec-platform/src",
    "dashboard/src",
    "l4s/src",
    "ue/src",
)
LAB_IMPORT = re.compile(r"^\s*(?:from|import)\s+(?:mts_lab|mts_testbed)\b", re.MULTILINE)


def test_no_product_package_imports_the_lab() -> None:
    offenders = []
    for source in PRODUCT_SOURCES:
        root = REPO / source
        assert root.is_dir(), f"{source} moved: update this list and docs/development.md"
        offenders += [
            str(path.relative_to(REPO))
            for path in sorted(root.rglob("*.py"))
            if LAB_IMPORT.search(path.read_text())
        ]
    assert offenders == []
