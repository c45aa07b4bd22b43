"""The platform's /healthz latency while 300 clients keep failing to log in (issue 20,
defect 5: scrypt ran in the event loop, and 300 wrong-secret logins pushed /healthz from
1.4 ms to 4.5 s median).

The platform runs as its own process (``mec-platform serve``), so the load generator here
does not share its interpreter. Three phases: no load (10 s); 300 clients with one
wrong-secret login in flight each, 3 in a row (900 failed logins), with the default login
limits; the same with the limits lifted (only the worker threads keep scrypt off the event
loop). A prober asks /healthz every 20 ms throughout, on a connection and in a process of
its own.

    uv run python -m mts_lab.platform.logins_bench --out docs/results/security
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event as EventType
from pathlib import Path
from typing import Any

import aiohttp

from mec_common.ports import free_port
from mts_lab.results import Results, pyplot, save_results

GOAL_P99_MS = 50.0


def start_platform(state: Path, port: int, limits: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PLATFORM_HTTP_HOST": "127.0.0.1", "PLATFORM_HTTP_PORT": str(port),
           "PLATFORM_STATE_DIR": str(state), "PLATFORM_ADMIN_CLIENT_SECRET": "bench-secret",
           "PLATFORM_LOG_LEVEL": "WARNING", **limits}  # fmt: skip
    log = (state.parent / f"platform-{port}.log").open("wb")
    command = [sys.executable, "-m", "mec_platform.cli", "serve"]
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip


async def wait_up(url: str) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url + "/healthz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise TimeoutError("the platform did not start")


async def probe(url: str, stop: EventType, latencies: list[float]) -> None:
    """/healthz every 20 ms on a connection of its own (a monitoring system's view)."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http:
        while not stop.is_set():
            started = time.perf_counter()
            async with http.get(url + "/healthz") as r:
                await r.read()
            latencies.append((time.perf_counter() - started) * 1e3)
            await asyncio.sleep(0.02)


def probe_process(url: str, stop: EventType, out: Queue[list[float]]) -> None:
    """The prober in a process of its own: in the load generator's event loop, the 300
    clients' own work (connections, responses) would delay the probes and be counted as
    the platform's latency."""
    latencies: list[float] = []
    asyncio.run(probe(url, stop, latencies))
    out.put(latencies)


async def fail_logins(url: str, clients: int, rounds: int, statuses: Counter[str]) -> None:
    """``clients`` concurrent clients, each logging in with a wrong secret ``rounds`` times
    (one login in flight per client: ``clients`` concurrent failed logins)."""
    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    wrong = {"Authorization": "Basic " + base64.b64encode(b"admin:wrong").decode()}
    form = {"grant_type": "client_credentials"}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:

        async def client() -> None:
            for _ in range(rounds):
                try:
                    async with http.post(url + "/oauth2/token", headers=wrong, data=form) as r:
                        await r.read()
                        statuses[str(r.status)] += 1
                except aiohttp.ClientError as exc:  # counted: at load 15-20 a few were reset
                    statuses[type(exc).__name__] += 1

        await asyncio.gather(*(client() for _ in range(clients)))


async def phase(url: str, clients: int, rounds: int, idle_s: float) -> dict[str, Any]:
    statuses: Counter[str] = Counter()
    context = multiprocessing.get_context("spawn")
    stop, out = context.Event(), context.Queue()
    prober = context.Process(target=probe_process, args=(url, stop, out))
    prober.start()
    await asyncio.sleep(0.5)  # the prober's interpreter is up before the load starts
    started = time.monotonic()
    if clients:
        await fail_logins(url, clients, rounds, statuses)
    else:
        await asyncio.sleep(idle_s)
    seconds = time.monotonic() - started
    stop.set()
    latencies: list[float] = out.get(timeout=60)
    prober.join(30)
    ordered = sorted(latencies)
    return {
        "clients": clients,
        "seconds": seconds,
        "healthz_samples": len(ordered),
        "healthz_p50_ms": statistics.median(ordered),
        "healthz_p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "healthz_max_ms": ordered[-1],
        "logins": dict(sorted(statuses.items())),
        "logins_per_s": sum(statuses.values()) / seconds,
    }


LIFTED = {"PLATFORM_LOGIN_RATE_PER_S": "1000000", "PLATFORM_LOGIN_BURST": "1000000",
          "PLATFORM_LOGIN_MAX_PENDING": "1000000"}  # fmt: skip


def run(clients: int, rounds: int) -> Results:
    results: Results = {"goal_p99_ms": GOAL_P99_MS, "load_before": os.getloadavg(),
                        "cpus": os.cpu_count(), "phases": {}}  # fmt: skip
    plan = [("idle", {}, 0), ("failed logins, default limits", {}, clients),
            ("failed logins, limits lifted", LIFTED, clients)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-logins-") as tmp:
        for name, limits, n in plan:
            port = free_port()
            state = Path(tmp) / name.replace(" ", "-").replace(",", "")
            proc = start_platform(state, port, limits)
            try:
                url = f"http://127.0.0.1:{port}"
                asyncio.run(wait_up(url))
                results["phases"][name] = asyncio.run(phase(url, n, rounds, 10.0))
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
    results["load_after"] = os.getloadavg()
    return results


def table(r: Results) -> str:
    clients = max(p["clients"] for p in r["phases"].values())
    lines = [f"platform /healthz under {clients} concurrent failed logins (goal p99 <= "
             f"{r['goal_p99_ms']:.0f} ms; load {r['load_before'][0]:.1f} -> "
             f"{r['load_after'][0]:.1f} on {r['cpus']} CPUs)",
             f"{'phase':32} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'logins/s':>9}  "
             "statuses"]  # fmt: skip
    for name, p in r["phases"].items():
        lines.append(f"{name:32} {p['healthz_p50_ms']:8.1f} {p['healthz_p99_ms']:8.1f} "
                     f"{p['healthz_max_ms']:8.1f} {p['logins_per_s']:9.0f}  "
                     f"{p['logins']}")  # fmt: skip
    return "\n".join(lines)


def plot(r: Results, path: Path) -> None:
    plt = pyplot()

    names = list(r["phases"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, key in enumerate(("healthz_p50_ms", "healthz_p99_ms")):
        ax.bar([x + i * 0.4 for x in range(len(names))], [r["phases"][n][key] for n in names],
               width=0.4, label=key.split("_")[1])  # fmt: skip
    ax.axhline(r["goal_p99_ms"], color="red", linestyle="--", label="goal p99")
    ax.set_xticks([x + 0.2 for x in range(len(names))], names, fontsize=8)
    ax.set_ylabel("/healthz latency (ms)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/security"))
    parser.add_argument("--clients", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="failed logins per client")
    args = parser.parse_args()
    save_results(run(args.clients, args.rounds), args.out, "bench_logins", plot, table)


if __name__ == "__main__":
    main()
