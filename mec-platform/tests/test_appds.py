"""The AppDs of our own apps onboard, and the PEP's traffic rule is a TPROXY interception."""

from __future__ import annotations

from pathlib import Path

import pytest

from mec_platform.appd import parse_appd
from mec_platform.dataplane import _intercepts_by_target

APPDS = sorted((Path(__file__).parents[1] / "appds").glob("*.yaml"))


def test_every_app_of_the_suite_has_an_appd() -> None:
    assert {p.stem for p in APPDS} == {"rnis-adapter", "pep", "path-manager", "flowrtt"}


@pytest.mark.parametrize("path", APPDS, ids=[p.stem for p in APPDS])
def test_appd_is_valid(path: Path) -> None:
    appd, checksum = parse_appd(path.read_bytes())
    assert appd.deployment.process is not None and appd.deployment.docker is not None
    assert appd.sw_image_descriptor.container_image and len(checksum) == 64


def test_pep_rule_becomes_an_interception_of_ue_tcp() -> None:
    appd, _ = parse_appd((Path(__file__).parents[1] / "appds" / "pep.yaml").read_bytes())
    targets = _intercepts_by_target([r.dump() for r in appd.app_traffic_rule])
    assert list(targets) == [(None, 7102)]
    [intercept] = targets[(None, 7102)]
    assert intercept.match() == "ip saddr { 10.30.0.0/16 } meta l4proto tcp"
