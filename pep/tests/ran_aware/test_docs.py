"""docs/configuration.md lists exactly the MELD/RAPID settings, with their defaults."""

from __future__ import annotations

import re
from pathlib import Path

from mec_pep.ran_aware.settings import RanAwareSettings

DOC = Path(__file__).resolve().parents[3] / "docs/configuration.md"


def test_configuration_table_matches_the_settings() -> None:
    text = DOC.read_text()
    section = text[text.index("<!-- BEGIN meld -->") : text.index("<!-- END meld -->")]
    documented = dict(re.findall(r"^\| `(PEP_[A-Z0-9_]+)` \| `([^`]*)` \|", section, re.M))
    expected = {}
    for name, field in RanAwareSettings.model_fields.items():
        default = field.default if field.default_factory is None else field.default_factory()
        if default is None:
            shown = "unset"
        elif isinstance(default, list):
            shown = "(empty)"
        else:
            shown = str(default)
        expected[f"PEP_{name.upper()}"] = shown
    assert documented == expected
