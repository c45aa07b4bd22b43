"""Conformance to the official MEC 011 OpenAPI files, by property-based testing.

schemathesis generates requests from ``../shared/specs/etsi-mec/mec011/`` (the unmodified
ETSI files) and checks every response: no 5xx, status code documented, content type,
headers and body valid against the spec. Path identifiers are those of a real app
instance most of the time (else every request would be a 404), random otherwise.
Bounded: ``MTS_CONFORMANCE_EXAMPLES`` examples per operation (default 25).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from mec_platform.testing import Running, external_app, onboard

SPECS = Path(__file__).resolve().parents[2] / ".." / "shared" / "specs" / "etsi-mec" / "mec011"
EXAMPLES = int(os.environ.get("MTS_CONFORMANCE_EXAMPLES", "25"))
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_headers_conformance,
    checks.response_schema_conformance,
]


def operations(spec: str) -> list[Any]:
    path = SPECS / spec
    if not path.exists():
        pytest.fail(f"{path} is missing: the shared specs must sit beside the repository")
    schema = schemathesis.openapi.from_path(str(path))
    return [result.ok() for result in schema.get_all_operations()]


@pytest.mark.parametrize(("spec", "base"), [
    ("MecServiceMgmtApi.yaml", "/mec_service_mgmt/v1"),
    ("MecAppSupportApi.json", "/mec_app_support/v1"),  # the YAML has TABs (see specs README)
])  # fmt: skip
def test_responses_conform_to_the_official_spec(platform: Running, spec: str, base: str) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    token = app.headers["Authorization"]
    service = app.post(f"/mec_service_mgmt/v1/applications/{app_id}/services", json={
        "serName": "seed", "version": "1", "state": "ACTIVE", "serializer": "JSON",
        "transportId": "rest-http"}).json()  # fmt: skip
    real = {"appInstanceId": app_id, "serviceId": service["serInstanceId"],
            "trafficRuleId": "intercept-http", "dnsRuleId": "dns1"}  # fmt: skip
    failures = []
    for operation in operations(spec):

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))  # fmt: skip
        @given(case=operation.as_strategy(), use_real=st.booleans())
        def check(case: Any, use_real: bool) -> None:
            for name in case.path_parameters or {}:
                if use_real and name in real:
                    case.path_parameters[name] = real[name]
            response = case.call(base_url=platform.url + base, headers={"Authorization": token})
            case.validate_response(response, checks=CHECKS)

        try:
            check()
        except Exception as exc:  # collect every operation's failure, then report all
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)
