"""``make bench-notify``: one healthy notification receiver beside N stalled ones (issue 20).

The platform runs as its own process with its default delivery settings (5 s per attempt,
5 attempts, 4 deliveries in flight per receiver). N stalled receivers (listening sockets
that complete the TCP handshake and never read) and then one healthy receiver (uvicorn)
hold availability subscriptions; each round registers a service, which notifies all N + 1,
and measures the time from the registration to the healthy receiver's notification. The
stalled receivers' queues keep growing over the rounds (their notifications time out and
are retried), as a real tarpit's would. Rounds run with N = 0 first, then with N.

Writes ``<out>/notify.json`` and ``<out>/notify.png`` and prints a table.
"""

from __future__ import annotations

import argparse
import os
import platform as host
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from mts_lab.platform.bench import SM, Callbacks, service, setup_app, start_platform
from mts_lab.results import Results, pyplot, save_results

SUBSCRIPTION = "SerAvailabilityNotificationSubscription"


def subscribe(app: httpx.Client, iid: str, url: str) -> None:
    body = {"subscriptionType": SUBSCRIPTION, "callbackReference": url,
            "filteringCriteria": {"serNames": ["fanout"]}}  # fmt: skip
    app.post(f"{SM}/applications/{iid}/subscriptions", json=body).raise_for_status()


def rounds(app: httpx.Client, iid: str, healthy: Callbacks, count: int) -> list[float]:
    """Milliseconds from each registration to the healthy receiver's notification."""
    times = []
    for _ in range(count):
        with healthy.cond:
            healthy.arrived.clear()
        start = time.perf_counter()
        created = app.post(f"{SM}/applications/{iid}/services", json=service("fanout"))
        created.raise_for_status()
        with healthy.cond:
            if not healthy.cond.wait_for(lambda: healthy.arrived, 60):
                raise SystemExit("bench: the healthy receiver got nothing in 60 s")
            times.append((healthy.arrived[0] - start) * 1e3)
        app.delete(f"{SM}/applications/{iid}/services/{created.json()['serInstanceId']}")
        time.sleep(0.5)
    return times


def summary(times: list[float]) -> dict[str, Any]:
    ordered = sorted(times)
    return {"ms": times, "median_ms": statistics.median(times), "max_ms": ordered[-1],
            "p95_ms": ordered[max(0, round(0.95 * len(ordered)) - 1)]}  # fmt: skip


def measure(stalled: int, count: int) -> dict[str, Any]:
    state = Path(tempfile.mkdtemp(prefix="mts-bench-notify-"))
    proc, url, secret = start_platform(
        state, {"PLATFORM_MAX_SUBSCRIPTIONS_PER_APP": str(stalled + 1)}
    )
    tarpits = []
    healthy = Callbacks(1)
    try:
        iid, app = setup_app(url, secret)
        app.timeout = httpx.Timeout(120)  # the platform is slow to answer on a busy machine
        for _ in range(stalled):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)  # handshakes complete in the kernel; nobody ever reads
            tarpits.append(sock)
            subscribe(app, iid, f"http://127.0.0.1:{sock.getsockname()[1]}/notify")
        subscribe(app, iid, healthy.urls()[0])  # last: behind every stalled one
        print(f"{stalled} stalled receivers: {count} rounds ...", file=sys.stderr)
        return {"stalled": stalled, **summary(rounds(app, iid, healthy, count)),
                "loadavg_1m": os.getloadavg()[0]}  # fmt: skip
    finally:
        healthy.close()
        proc.terminate()
        proc.wait(timeout=30)
        for sock in tarpits:
            sock.close()
        shutil.rmtree(state, ignore_errors=True)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in results["runs"]:
        ax.plot(range(1, len(run["ms"]) + 1), run["ms"], "o-",
                label=f"{run['stalled']} stalled receivers")  # fmt: skip
    ax.axhline(1000, color="grey", linestyle="--", label="goal: 1 s")
    ax.set_xlabel("round")
    ax.set_ylabel("healthy receiver notified after (ms)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def table(results: Results) -> str:
    lines = [f"{'stalled':>8}{'median ms':>11}{'p95 ms':>9}{'max ms':>9}{'load 1m':>9}"]
    for r in results["runs"]:
        lines.append(f"{r['stalled']:>8}{r['median_ms']:>11.1f}{r['p95_ms']:>9.1f}"
                     f"{r['max_ms']:>9.1f}{r['loadavg_1m']:>9.2f}")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mts_lab.platform.notify_bench",
                                description=__doc__)  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("docs/results/notify"))
    p.add_argument("--stalled", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args(argv)
    runs = [measure(0, args.rounds), measure(args.stalled, args.rounds)]
    results = {"command": "make bench-notify", "runs": runs,
               "host": {"cpus": os.cpu_count(), "kernel": host.release()},
               "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    save_results(results, args.out, "notify", plot, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
