"""``make bench-dashboard``: the dashboard's cost with 64 UEs at 8 ms polling, and its first paint.

The system is ``make run``'s (``mts_lab.run.System``) on a scenario of 64 UEs in two cells,
the RNIS adapter polling every 8 ms, MELD-DE, and downloads through the PEP at some UEs so
that flows, decisions and radio values move. Measured:

- CPU of the dashboard process (its share of one core) with no page open, then with a page
  open in headless Chromium, and CPU of every Chromium process meanwhile;
- first paint: first-contentful-paint of the page and the time until the UE table is
  filled (navigation start to the first rows), over repeated loads of a signed-in page.

Writes ``dashboard.json``, ``dashboard.png`` (CPU over time) and a screenshot with 64 UEs.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mts_lab import REPO, run
from mts_lab.dashboard.browser import chromium, sign_in
from mts_lab.results import Results, pyplot, save_figure, save_results

UES_PER_CELL = 32
CELLS = (10000, 10001)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def scenario() -> dict[str, Any]:
    cell = {"prb": 50, "scheduler": "pf", "harq": {"processes": 8, "rtt_ttis": 8, "max_retx": 4}}
    link = {"delay_ms": 5, "ul_delay_ms": 10,
            "channel": {"model": "fixed", "cqi": 12, "bler": 0.1, "loss": 0.008}}  # fmt: skip
    return {
        "description": "dashboard bench: 64 UEs in two 50-PRB LTE cells",
        "wan": {"delay_ms": 10},
        "cells": [{"bs_id": bs, **cell} for bs in CELLS],
        "ues": [{"count": UES_PER_CELL, "cells": [{"bs_id": bs, **link}]} for bs in CELLS],
    }


class BenchSystem(run.System):
    """make run's system with the RNIS poll period pinned to 8 ms."""

    def platform_env(self) -> dict[str, str]:
        return {**super().platform_env(), "RNIS_POLL_PERIOD": "8ms"}


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
    return total


def descendants(root: int) -> list[int]:
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True)
    children: dict[int, list[int]] = {}
    for line in out.stdout.splitlines():
        pid, ppid = (int(x) for x in line.split())
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def dashboard_pid(bed: run.System) -> int:
    """The dashboard the platform started in this run's MEC namespace."""
    mec_ns = Path(f"/run/netns/{bed.require_topo().mec.ns}").stat().st_ino
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            in_ns = (proc / "ns/net").stat().st_ino == mec_ns
        except OSError:
            continue
        if in_ns and any(part.endswith(b"mec-dashboard") for part in cmdline[:2]):
            return int(proc.name)
    raise RuntimeError("the dashboard process was not found in the MEC namespace")


def cpu_share(pids: Callable[[], list[int]], seconds: float) -> tuple[float, list[float]]:
    """Mean share of one core over ``seconds`` and the per-second shares."""
    shares, start = [], time.monotonic()
    last_cpu, last_t = cpu_seconds(pids()), start
    while time.monotonic() - start < seconds:
        time.sleep(1.0)
        cpu, now = cpu_seconds(pids()), time.monotonic()
        shares.append(100 * (cpu - last_cpu) / (now - last_t))
        last_cpu, last_t = cpu, now
    return statistics.fmean(shares), shares


FIRST_DATA_JS = """
const done = arguments[0];
(function check() {
  if (document.querySelectorAll('#ue-table tbody tr').length >= arguments[1]) {
    const paint = performance.getEntriesByName('first-contentful-paint')[0];
    done({first_data_ms: performance.now(), fcp_ms: paint ? paint.startTime : null});
  } else requestAnimationFrame(check);
})();
"""


def ue_rows(browser: Any, wanted: int, timeout: float = 60) -> int:
    """Rows in the UE table once it has every UE, or as many as it has after ``timeout``."""
    deadline, rows = time.monotonic() + timeout, 0
    while time.monotonic() < deadline and rows < wanted:
        time.sleep(1)
        rows = int(browser.execute_script(ROWS_JS))
    return rows


ROWS_JS = "return document.querySelectorAll('#ue-table tbody tr').length"


def first_paint(browser: Any, url: str, ues: int, loads: int) -> list[dict[str, float]]:
    samples = []
    for _ in range(loads):
        browser.get(url)
        samples.append(browser.execute_async_script(
            FIRST_DATA_JS.replace("arguments[1]", str(ues))))  # fmt: skip
    return samples


def measure(args: argparse.Namespace) -> Results:
    out: Path = args.out
    path = REPO / "build/dashboard/bench-64ue.yaml"  # System.up() names it relative to REPO
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scenario()))
    bed = BenchSystem(f"dbb{secrets.token_hex(2)}", path, run.Status())
    try:
        bed.up()
        bed.start_platform()
        for appd in (run.APPDS / "rnis-adapter.yaml", run.APPDS / "pep.yaml", run.DASHBOARD_APPD):
            bed.instantiate(appd)
        bed.wait_for_services({"rnis", "pep", "dashboard"}, timeout=300)  # 64 UEs: a busy host
        bed.pep("PUT", "/ran_aware/mode", json={"mode": "meld-de"})
        topo = bed.require_topo()
        for ue in topo.ues[: args.downloads]:  # long downloads through the PEP, stopped at down
            bed.start_traffic(ue.ns, "fetch", topo.server.addresses["wan0"], str(run.CONTENT_PORT),
                      str(10**9), stdout=subprocess.DEVNULL)  # fmt: skip
        pid = dashboard_pid(bed)
        idle, idle_series = cpu_share(lambda: [pid], args.seconds / 2)
        browser = chromium(1400, 3200)
        try:
            browser.set_script_timeout(120)
            sign_in(browser, bed.dashboard_url(), bed.admin_token)
            rows = ue_rows(browser, len(topo.ues))
            paints = first_paint(browser, bed.dashboard_url(), rows, args.loads)
            driver_pid = browser.service.process.pid
            shares = {"dashboard": [pid], "chromium": descendants(driver_pid)}
            start_cpu = {k: cpu_seconds(v) for k, v in shares.items()}
            started = time.monotonic()
            open_share, open_series = cpu_share(lambda: [pid], args.seconds)
            elapsed = time.monotonic() - started
            chromium_share = (
                100 * (cpu_seconds(shares["chromium"]) - start_cpu["chromium"]) / elapsed
            )
            out.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(str(out / "64-ues.png"))
            shown = browser.execute_script(
                "return document.querySelectorAll('#ue-table tbody tr').length"
            )
            decisions = browser.execute_script(
                "return document.querySelectorAll('#decisions tbody tr').length"
            )
        finally:
            browser.quit()
    finally:
        bed.down()
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": os.getloadavg(),
        "cpus": os.cpu_count(),
        "ues": len(topo.ues),
        "ues_shown": shown,
        "decision_rows_shown": decisions,
        "rnis_poll_period_ms": 8,
        "sample_interval_s": 0.5,
        "downloads": args.downloads,
        "dashboard_cpu_pct_no_page": round(idle, 2),
        "dashboard_cpu_pct_page_open": round(open_share, 2),
        "chromium_cpu_pct_page_open": round(chromium_share, 2),
        "first_contentful_paint_ms": [round(p["fcp_ms"] or -1, 1) for p in paints],
        "first_data_ms": [round(p["first_data_ms"], 1) for p in paints],
        "series": {"no_page": idle_series, "page_open": open_series},
    }


def plot(results: Results, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for label, series in results["series"].items():
        ax.plot(range(1, len(series) + 1), series, label=f"dashboard, {label.replace('_', ' ')}")
    ax.axhline(5, color="grey", ls="--", lw=1, label="goal 5 % of a core")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("CPU (% of one core)")
    ax.set_title(f"Dashboard with {results['ues']} UEs, RNIS polling every 8 ms")
    ax.legend()
    ax.grid(alpha=0.3)
    save_figure(fig, path, dpi=120)


def table(results: Results) -> str:
    r = results
    return "\n".join([
        f"{r['ues']} UEs ({r['ues_shown']} shown), RNIS poll 8 ms, page sample 0.5 s, "
        f"{r['downloads']} downloads, load {r['loadavg'][0]:.1f} on {r['cpus']} CPUs",
        f"dashboard CPU, no page open:   {r['dashboard_cpu_pct_no_page']:.2f} % of a core",
        f"dashboard CPU, page open:      {r['dashboard_cpu_pct_page_open']:.2f} % of a core",
        f"Chromium CPU, page open:       {r['chromium_cpu_pct_page_open']:.2f} % of a core",
        f"first contentful paint (ms):   {r['first_contentful_paint_ms']}",
        f"first data in the table (ms):  {r['first_data_ms']}",
    ])  # fmt: skip


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/dashboard"))
    parser.add_argument("--seconds", type=float, default=60, help="CPU measured with the page open")
    parser.add_argument("--loads", type=int, default=5, help="page loads for the first paint")
    parser.add_argument("--downloads", type=int, default=8, help="UEs downloading meanwhile")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly (bed.down) on SIGTERM too
    save_results(measure(args), args.out, "dashboard", plot, table)


if __name__ == "__main__":
    main()
