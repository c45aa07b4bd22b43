"""The RNIS feed schema (mec_common.rnis): routing keys and the exported JSON Schemas."""

import json
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from pydantic import ValidationError

from mec_common import rnis

REPO = Path(__file__).resolve().parents[2]


def test_routing_keys_follow_the_contract() -> None:
    assert rnis.meas_routing_key("10000-0", "208950000000001", "10.30.1.1") == (
        "rnis.v1.meas.10000-0.208950000000001.10_30_1_1"
    )
    assert rnis.meas_routing_key("10000-0", None, None) == "rnis.v1.meas.10000-0.-.-"
    assert rnis.event_routing_key("cell_change", "10001-1", "1", IPv4Address("10.30.2.1")) == (
        "rnis.v1.event.cell_change.10001-1.1.10_30_2_1"
    )
    assert rnis.bind_ue_ip("10.30.1.1") == "rnis.v1.meas.*.*.10_30_1_1"
    assert rnis.bind_ue_ip("10.30.1.1", "event") == "rnis.v1.event.*.*.*.10_30_1_1"
    assert rnis.bind_cell("10000-0") == "rnis.v1.meas.10000-0.#"
    assert rnis.bind_imsi("42", "event") == "rnis.v1.event.*.*.42.*"


def test_a_word_with_a_dot_is_refused() -> None:
    with pytest.raises(ValueError, match="routing key"):
        rnis.meas_routing_key("10000.0", None, None)


def test_measurement_rejects_out_of_range_values() -> None:
    base = {"cell": "1-0", "bs_id": 1, "rnti": 5, "observed_ns": 1, "cell_ues": 1}
    assert rnis.RnisMeasurement.model_validate(base).routing_key() == "rnis.v1.meas.1-0.-.-"
    for bad in ({"wb_cqi": 16}, {"rnti": 70000}, {"ue_ipv4": "10.0.0"}, {"schema_version": 2}):
        with pytest.raises(ValidationError):
            rnis.RnisMeasurement.model_validate(base | bad)


def test_exported_schemas_are_current() -> None:
    for name, schema in rnis.json_schemas().items():
        path = REPO / "docs" / "schemas" / name
        assert json.loads(path.read_text()) == schema, (
            f"{path} is stale: run `uv run python -m mec_common.rnis --export docs/schemas`"
        )
