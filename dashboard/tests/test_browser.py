"""The dashboard in a real headless browser (Debian's Chromium) against the running system.

The system is ``make run``'s (``mts_lab.run.System``): the emulated RAN, the MEC
platform in the MEC namespace, and the RNIS adapter, the PEP and the dashboard started
by the platform from their AppDs. The browser, in the root namespace, opens the dashboard
over the management link like a user would. Screenshots (PNG) are kept in
``build/test-dashboard/``.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from mts_lab import run
from mts_lab.dashboard.browser import BrowserMissingError, chromium, sign_in

pytestmark = [pytest.mark.netns, pytest.mark.bpf, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "build/test-dashboard"
WAIT_S = 60  # hang guard only: the machine is shared


def wait(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(WebDriverException, LookupError, ValueError):
            if value := check():
                return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s: {what}"
        time.sleep(0.2)


def text(browser: WebDriver, css: str) -> str:
    """An element's text, read in one step: the page re-renders its tables every tick, so a
    found element may be gone by the time a second WebDriver call reads it."""
    found = browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;", css
    )
    if found is None:
        raise LookupError(css)
    return str(found)


def table(browser: WebDriver, css: str) -> list[dict[str, str]]:
    """The rows of a table as {data-k: text} (and the row's data-seq), read in one step."""
    rows: list[dict[str, str]] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map((r) =>"
        " Object.fromEntries([...r.querySelectorAll('td')]"
        ".map((c) => [c.dataset.k, c.innerText]).concat([['seq', r.dataset.seq ?? '']])));",
        css,
    )
    return rows


@pytest.fixture(scope="module")
def system() -> Iterator[run.System]:
    for built in ("build/bin/rnis-adapter", "build/bpf/meld.bpf.o", "build/bin/meld-loader",
                  "build/dashboard/assets/uPlot.iife.min.js"):  # fmt: skip
        assert (REPO / built).exists(), f"{built} is missing: run `make build` (make test does)"
    bed = run.System(f"db{secrets.token_hex(2)}", run.SCENARIO, run.Status())
    try:
        bed.up()
        bed.start_platform()
        for appd in (run.APPDS / "rnis-adapter.yaml", run.APPDS / "pep.yaml", run.DASHBOARD_APPD):
            bed.instantiate(appd)
        bed.wait_for_services({"rnis", "pep", "dashboard"})
        bed.wait_for_radio()
        yield bed
    finally:
        bed.down()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    try:
        driver = chromium()
    except BrowserMissingError as exc:
        pytest.fail(str(exc))
    yield driver
    driver.quit()


def rnis_measurement(bed: run.System, ue: str) -> dict[str, Any]:
    """The UE's latest measurement from the RNIS API (the adapter's MEC 012 extension)."""
    url = f"http://{bed.require_topo().mgmt['mec_peer']}:8101/rni/v2/queries/ext/ran_meas"
    r = httpx.get(url, params={"ue_ipv4_address": ue}, timeout=10,
                  headers={"Authorization": f"Bearer {bed.admin_token}"})  # fmt: skip
    r.raise_for_status()
    [measurement] = r.json()["ueMeas"]
    return dict(measurement)


def test_sign_in_is_refused_without_a_token(system: run.System, browser: WebDriver) -> None:
    browser.get(system.dashboard_url())
    wait("the sign-in dialog", lambda: browser.find_element(By.ID, "token").is_displayed())
    browser.find_element(By.ID, "signin-button").click()
    refused = wait("the refusal", lambda: text(browser, "#signin-error"))
    assert refused.startswith("refused:"), refused
    assert not browser.find_element(By.ID, "main").is_displayed()
    browser.save_screenshot(str(SHOTS / "01-sign-in-refused.png"))
    # and no data for a script on the page without signing in
    status = browser.execute_async_script(
        "const done = arguments[0];"
        "Promise.all(['/dashboard/v1/state', '/dashboard/v1/stream', '/dashboard/v1/platform']"
        ".map((p) => fetch(p).then((r) => r.status))).then(done);"
    )
    assert status == [401, 401, 401]


def test_live_values_match_the_rnis_api(system: run.System, browser: WebDriver) -> None:
    sign_in(browser, system.dashboard_url(), system.admin_token)
    ue = system.ue_ip()
    row = f'#ue-table tr[data-ue="{ue}"]'
    wait("the UE's row", lambda: text(browser, f'{row} td[data-k="cqi"]') not in ("", "–"))
    assert "admin" in text(browser, "#who")
    before = rnis_measurement(system, ue)
    shown = {k: text(browser, f'{row} td[data-k="{k}"]')
             for k in ("cell", "rnti", "imsi", "cqi", "mcs", "prbs", "age_ms")}  # fmt: skip
    after = rnis_measurement(system, ue)
    for key, field in (("cell", "cell"), ("rnti", "rnti"), ("imsi", "imsi"), ("cqi", "wb_cqi")):
        assert shown[key] == str(before[field]) == str(after[field]), (key, shown, before)
    for key, field in (("mcs", "dl_mcs"), ("prbs", "dl_prbs")):  # these move with traffic
        low, high = sorted((before[field] or 0, after[field] or 0))
        assert low <= int(shown[key].replace(",", "")) <= high or before[field] == 0, (key, shown)
    assert 0 <= float(shown["age_ms"].replace(",", "")) < 5000, shown
    # live without a reload: the ages change while the page stays
    first = text(browser, f'{row} td[data-k="age_ms"]')
    wait("a newer sample", lambda: text(browser, f'{row} td[data-k="age_ms"]') != first)
    assert text(browser, "#link") == "live"
    assert browser.find_elements(By.CSS_SELECTOR, "#charts .uplot"), "no chart drawn"
    for backend in ("platform", "rnis", "pep"):
        card = f'#health .card[data-backend="{backend}"]'
        wait(f"{backend} up", lambda c=card: "ok" in browser.find_element(
            By.CSS_SELECTOR, c).get_attribute("class"))  # fmt: skip
    # registered on Mp1 at the address the user opened
    registered = wait("the dashboard on Mp1", lambda: [
        r for r in table(browser, "#services") if r["name"] == "dashboard"])  # fmt: skip
    assert registered[0]["uri"] == system.dashboard_url(), registered
    browser.save_screenshot(str(SHOTS / "02-live-radio.png"))


def test_a_meld_decision_appears_after_a_loss(system: run.System, browser: WebDriver) -> None:
    system.pep("PUT", "/ran_aware/mode", json={"mode": "meld-de"})
    newest_before = max((int(r["seq"]) for r in table(browser, "#decisions")), default=0)
    download = system.download("PEP + MELD-DE", 1_500_000, via_pep=True)
    assert download.meld is not None and download.meld["losses"] > 0, download.meld
    rows = wait("a decision row", lambda: [
        r for r in table(browser, "#decisions") if int(r["seq"]) > newest_before])  # fmt: skip
    assert {r["ue"] for r in rows} == {system.ue_ip()}
    assert {r["mode"] for r in rows} == {"meld-de"}
    kept = sum(int(r["kept"]) for r in rows)
    cut = sum(int(r["cut"]) for r in rows)
    assert kept + cut > 0, (rows, download.meld)
    browser.save_screenshot(str(SHOTS / "03-meld-decisions.png"))


def test_a_lost_backend_shows_as_lost(system: run.System, browser: WebDriver) -> None:
    system.terminate(system.instances["rnis-adapter"])
    wait("the radio section marked lost", lambda: "lost" in browser.find_element(
        By.ID, "radio-section").get_attribute("class"))  # fmt: skip
    note = text(browser, "#radio-section .lost-note")
    assert note.startswith("rnis lost since"), note
    assert "LOST" in text(browser, '#health .card[data-backend="rnis"]')
    browser.save_screenshot(str(SHOTS / "04-rnis-lost.png"))
