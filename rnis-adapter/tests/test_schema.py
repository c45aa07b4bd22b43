"""The RNIS feed schema (mec_common.bus.rnis): routing keys; the exported JSON Schemas."""

import json
from ipaddress import IPv4Address
from pathlib import Path

import pytest
from pydantic import ValidationError

from mec_common import bus
from mec_common.bus import rnis

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
    for name, schema in bus.json_schemas().items():
        path = REPO / "docs" / "schemas" / name
        assert json.loads(path.read_text()) == schema, (
            f"{path} is stale: run `uv run python -m mec_common.bus --export docs/schemas`"
        )


def _cell_body() -> dict[str, object]:
    cell = {"cell": "1-0", "bs_id": 1, "phy_cell_id": 0, "observed_ns": 5, "cell_ues": 2}
    ues = [{"rnti": 7, "ue_ipv4": "10.30.1.1"}, {"rnti": 8, "ue_ipv4": "10.30.1.2", "wb_cqi": 9}]
    return {"schema_version": 1, **cell, "ues": ues}


def test_cell_keys() -> None:
    assert rnis.cell_routing_key("10000-0") == "rnis.v1.cell.10000-0"
    assert rnis.bind_cell_batch("10000-0") == "rnis.v1.cell.10000-0"
    assert rnis.bind_all("cell") == "rnis.v1.cell.#"
    assert set(rnis.CELL_FIELDS) | set(rnis.RnisCellUe.model_fields) == set(
        rnis.RnisMeasurement.model_fields
    ), "a cell message's two parts are a measurement"
    assert not set(rnis.CELL_FIELDS) & set(rnis.RnisCellUe.model_fields)


def test_measurements_of_either_message_kind() -> None:
    body = _cell_body()
    both = list(rnis.measurements(json.dumps(body)))
    assert [(m.cell, m.rnti, m.observed_ns, m.wb_cqi) for m in both] == [
        ("1-0", 7, 5, None),
        ("1-0", 8, 5, 9),
    ]
    assert both == rnis.RnisCellMeasurements.model_validate(body).measurements()
    [only] = rnis.measurements(json.dumps(body).encode(), ue_ipv4="10.30.1.2")
    assert only == both[1]
    single = both[0].model_dump_json()
    assert list(rnis.measurements(single)) == [both[0]]
    assert list(rnis.measurements(single, ue_ipv4=IPv4Address("10.30.1.2"))) == []


def test_measurements_refuse_bad_bodies() -> None:
    bad_ue = _cell_body() | {"ues": [{"rnti": 70000}]}
    for body in (
        _cell_body() | {"ues": "none"},
        _cell_body() | {"cell_ues": 0},
        bad_ue,
        {"cell": "1-0"},
        [1, 2],
    ):
        with pytest.raises(ValidationError):
            list(rnis.measurements(json.dumps(body)))
    with pytest.raises(ValueError):
        list(rnis.measurements(b"{not json"))
