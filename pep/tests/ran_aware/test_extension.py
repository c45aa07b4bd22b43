"""MELD/RAPID inside a real PEP process: the RAN leg's congestion control, modes, API.

Uses the PEP's lab (client ─ pep ─ server namespaces) and process fixtures. The lab's PEP
namespace cannot reach the broker, which doubles as the "lost broker" case: the feed
retries and shows in health, the PEP keeps relaying.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Callable
from typing import Any

import pytest
from pep_support import (  # type: ignore[import-not-found]
    CONNECTORS,
    RELAYS,
    request,
    wait_for,
)

from mec_common.bpf import available_congestion_controls

pytestmark = [pytest.mark.netns, pytest.mark.bpf]

BASE = "/pep/v1/ran_aware"


@pytest.fixture(scope="module", params=RELAYS)
def relay_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Both relays: the compiled core runs the hooks from its event queue (docs/pep.md)."""
    return dict(RELAYS[request.param])


def ran_aware_pep(start_pep: Callable[..., Any], **settings: Any) -> Any:
    return start_pep(
        ran_aware="true",
        meld_instance=f"test-{secrets.token_hex(4)}",
        rnis_exchange=f"rnis-test-{secrets.token_hex(4)}",
        **settings,
    )


def hold_flow(lab: Any, server: Any, relay_settings: dict[str, Any]) -> socket.socket:
    """A held flow through SOCKS5 (both relays have it)."""
    sock = CONNECTORS["socks5"](lab, server.address)
    sock.sendall(request(b"H"))
    return sock


def ran_leg(pep: Any) -> dict[str, Any]:
    flows = pep.get("/pep/v1/flows").json()["flows"]
    assert len(flows) == 1, flows
    return dict(flows[0])


def test_ran_leg_uses_meld_and_the_api_works(lab, server, start_pep, relay_settings) -> None:  # type: ignore[no-untyped-def]
    pep = ran_aware_pep(start_pep)
    state = pep.get(f"{BASE}/state").json()
    assert state["kernel"]["loaded"], state
    names = state["kernel"]["congestion_controls"]
    assert set(names.values()) <= set(available_congestion_controls())
    assert state["global_mode"] == "meld-me"

    sock = hold_flow(lab, server, relay_settings)
    try:
        wait_for(lambda: pep.get("/pep/v1/flows").json()["count"] == 1, what="the flow")
        flow = ran_leg(pep)
        assert flow["ran"]["tcp"]["congestion_control"] == names["meld_cubic"]
        ue = lab.client_ip

        [listed] = pep.get(f"{BASE}/ues").json()
        assert listed["ue"] == ue and listed["flows"] == 1 and listed["radio"] is None
        assert listed["mode"] == "meld-me" and listed["mode_source"] == "global"

        r = pep.request("PUT", f"{BASE}/ues/{ue}/mode", json={"mode": "rapid"})
        assert r.status_code == 200 and r.json()["mode"] == "rapid", r.text
        assert r.json()["mode_source"] == "ue"
        r = pep.request("PUT", f"{BASE}/mode", json={"mode": "off"})
        assert r.status_code == 200 and r.json()["global_mode"] == "off"
        assert pep.get(f"{BASE}/ues/{ue}").json()["mode"] == "rapid"
        assert pep.request("DELETE", f"{BASE}/ues/{ue}/mode").status_code == 204
        assert pep.get(f"{BASE}/ues/{ue}").json()["mode"] == "off"

        # Bad input: clear ProblemDetails, nothing changed.
        bad = pep.request("PUT", f"{BASE}/mode", json={"mode": "fast"})
        assert bad.status_code == 400
        assert bad.headers["content-type"].startswith("application/problem+json")
        assert pep.request("PUT", f"{BASE}/ues/not-an-ip/mode",
                           json={"mode": "off"}).status_code == 400  # fmt: skip
        assert pep.request("DELETE", f"{BASE}/ues/{ue}/mode").status_code == 404
        assert pep.get(f"{BASE}/state").json()["global_mode"] == "off"
        assert pep.get(f"{BASE}/state", auth=False).status_code == 401

        metrics = pep.get("/metrics", auth=False).text
        assert "pep_meld_kernel_loaded 1.0" in metrics
        health = pep.get("/healthz", auth=False).json()["checks"]
        assert health["meld"]["ok"] and not health["meld"]["required"]
        assert not health["rnis"]["ok"] and not health["rnis"]["required"]  # no broker here
    finally:
        sock.close()
    pep.stop()
    assert not set(names.values()) & set(available_congestion_controls())


def test_without_the_kernel_program_the_pep_runs_plain_cubic(  # type: ignore[no-untyped-def]
    lab, server, start_pep, relay_settings
) -> None:
    pep = ran_aware_pep(start_pep, meld_bpf_object="/nonexistent/meld.bpf.o")
    state = pep.get(f"{BASE}/state").json()
    assert not state["kernel"]["loaded"] and "not found" in state["kernel"]["reason"]
    health = pep.get("/healthz", auth=False)
    assert health.status_code == 200  # MELD is optional: the PEP still relays
    assert not health.json()["checks"]["meld"]["ok"]
    r = pep.request("PUT", f"{BASE}/mode", json={"mode": "meld-de"})
    assert r.status_code == 409 and "not available" in r.json()["detail"]
    sock = hold_flow(lab, server, relay_settings)
    try:
        wait_for(lambda: pep.get("/pep/v1/flows").json()["count"] == 1, what="the flow")
        assert ran_leg(pep)["ran"]["tcp"]["congestion_control"] == "cubic"
    finally:
        sock.close()
        pep.stop()
