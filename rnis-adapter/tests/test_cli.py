"""`rnis-adapter parse` on every fixture, its errors, and a truthful --help."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from rnis_helpers import binary

from mec_common.bus import rnis

FIXTURES = Path(__file__).parents[1] / "testdata" / "flexran"
STATS = sorted(p for p in FIXTURES.glob("*/*.json") if p.name != "stats-conf-enb.json")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(binary("rnis-adapter")), *args], input=stdin, capture_output=True)


@pytest.mark.parametrize("fixture", STATS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_parse_every_fixture(fixture: Path) -> None:
    r = run("parse", str(fixture))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    for m in out:
        assert set(m) == set(rnis.RnisMeasurement.model_fields)
        rnis.RnisMeasurement.model_validate(m)
    if fixture.name.startswith("enb_config"):
        assert out == [] and b"no UE statistics" in r.stderr
    else:
        assert out, "every statistics fixture has at least one UE"


def test_parse_values_of_the_live_capture() -> None:
    [m] = json.loads(run("parse", str(FIXTURES / "live-oai-rfsim" / "saturated.json")).stdout)
    assert (m["cell"], m["dl_tbs_bytes"], m["cell_prbs"], m["rlc_queue_bytes"]) == (
        "10000-0",
        2292,
        25,
        934597,
    )
    assert m["rapid_capacity_bps"] == 18_336_000 and m["imsi"] is None


def test_parse_with_an_ip_map_and_stdin(tmp_path: Path) -> None:
    ip_map = tmp_path / "ips.json"
    ip_map.write_text(json.dumps({"imsi": {"208950000000001": "10.30.1.1"}}))
    doc = (FIXTURES / "v2" / "l2sim-1ue.json").read_bytes()
    [m] = json.loads(run("parse", "--ip-map", str(ip_map), "-", stdin=doc).stdout)
    assert m["ue_ipv4"] == "10.30.1.1"
    assert rnis.RnisMeasurement.model_validate(m).routing_key().endswith(".10_30_1_1")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", b"invalid JSON"),
        (b'{"reports": []}', b"not FlexRAN statistics"),
        (b"[1, 2]", b"sample 0"),
        (b"\x00\xff", b"invalid JSON"),
    ],
)
def test_parse_refuses_unusable_input(tmp_path: Path, content: bytes, message: bytes) -> None:
    f = tmp_path / "doc.json"
    f.write_bytes(content)
    r = run("parse", str(f))
    assert r.returncode == 2 and r.stdout == b""
    assert message in r.stderr and str(f).encode() in r.stderr


def test_parse_usage_errors(tmp_path: Path) -> None:
    assert run("parse").returncode == 2
    missing = run("parse", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and b"no such file" in missing.stderr
    bad_map = tmp_path / "m.json"
    bad_map.write_text('{"imsi": {"1": "not-an-ip"}}')
    r = run("parse", "--ip-map", str(bad_map), str(STATS[0]))
    assert r.returncode == 2 and b"not an IPv4 address" in r.stderr


def test_help_is_truthful() -> None:
    top = run("--help")
    assert top.returncode == 0
    for command in (b"serve", b"parse", b"env", b"version"):
        assert command in top.stdout
    assert run("frobnicate").returncode == 2
    serve = run("serve", "--help")
    assert serve.returncode == 0
    text = serve.stderr.decode()
    for flag, env in (("-poll-period", "RNIS_POLL_PERIOD"), ("-amqp-url", "RNIS_AMQP_URL")):
        assert flag in text and env in text
    table = run("env").stdout.decode()
    assert table.count("| `RNIS_") == text.count("($RNIS_"), "env lists every serve flag"
    bad = run("serve", "--poll-period=20s")
    assert bad.returncode == 1 and b"outside 1ms..10s" in bad.stderr


def test_configuration_doc_is_current() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    section = doc.split("<!-- BEGIN rnis -->")[1].split("<!-- END rnis -->")[0]
    assert run("env").stdout.decode() in section, (
        "docs/configuration.md is stale: paste `build/bin/rnis-adapter env` into the rnis section"
    )
