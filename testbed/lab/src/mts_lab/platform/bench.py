"""``make bench-platform``: Mp1 service discovery and notification fan-out.

1. Starts the platform as its own process (SQLite in a temp dir), registers N services.
2. Discovery: wrk (C, keep-alive) sends ``GET /services?ser_name=svc-XXXX`` cycling over
   all names, then ``GET /services`` (the whole registry); requests/s and latency
   percentiles from wrk's own histogram.
3. Fan-out: S real HTTP callback servers each hold an availability subscription; the
   time from registering a service to the last of the S notifications arriving.

Writes ``<out>/platform.json`` and ``<out>/platform.png`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform as host
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from mec_common.ports import free_port
from mec_platform.testing import SIMPLE_APPD
from mts_lab.results import pyplot

SM = "/mec_service_mgmt/v1"


def start_platform(
    state: Path, settings: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    secret = "bench-admin-secret"  # noqa: S105 - a throwaway platform
    env = {**os.environ, "PLATFORM_STATE_DIR": str(state), "PLATFORM_HTTP_HOST": "127.0.0.1",
           "PLATFORM_HTTP_PORT": str(port), "PLATFORM_ADMIN_CLIENT_SECRET": secret,
           "PLATFORM_LOG_LEVEL": "WARNING", **(settings or {})}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "mec_platform.cli", "serve"], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # generous: the shared machine may be busy
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url, secret
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit("bench: the platform did not start")
        time.sleep(0.2)


def token(url: str, client_id: str, secret: str) -> str:
    r = httpx.post(f"{url}/oauth2/token", data={"grant_type": "client_credentials"},
                   auth=(client_id, secret))  # fmt: skip
    r.raise_for_status()
    return str(r.json()["access_token"])


def setup_app(url: str, admin_secret: str) -> tuple[str, httpx.Client]:
    admin = httpx.Client(base_url=url, headers={
        "Authorization": f"Bearer {token(url, 'admin', admin_secret)}"})  # fmt: skip
    admin.post("/app_pkgm/v1/app_packages", content=SIMPLE_APPD).raise_for_status()
    iid = admin.post("/app_lcm/v1/app_instances", json={"appDId": "test-app"}).json()["id"]
    creds = admin.post(f"/app_lcm/v1/app_instances/{iid}/credentials").json()
    app_token = token(url, creds["clientId"], creds["clientSecret"])
    return iid, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {app_token}"})


def service(name: str) -> dict[str, Any]:
    return {"serName": name, "version": "v1", "state": "ACTIVE", "serializer": "JSON",
            "transportId": "rest-http"}  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, app_token: str, services: int, query: str, seconds: int,
            connections: int, pid: int) -> dict[str, Any]:  # fmt: skip
    script = Path(__file__).with_name("discovery.lua")
    env = {**os.environ, "MTS_TOKEN": app_token, "MTS_SERVICES": str(services),
           "MTS_QUERY": query}  # fmt: skip
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script),
           url]  # fmt: skip
    cpu_before = cpu_seconds(pid)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    cpu = cpu_seconds(pid) - cpu_before
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    result["requests_per_s"] = result["requests"] / (result["duration_us"] / 1e6)
    # What one core of this machine sustains, whatever else runs: requests per CPU second.
    result["platform_cpu_s"] = cpu
    result["requests_per_cpu_s"] = result["requests"] / cpu if cpu else None
    result.update(query=query, connections=connections, seconds=seconds)
    return result


class Callbacks:
    """S callback endpoints, each its own listening socket, served by one uvicorn server
    (uvloop + httptools) in a thread; arrival times are recorded as they come."""

    def __init__(self, count: int) -> None:
        self.arrived: list[float] = []
        self.cond = threading.Condition()
        self.sockets = []
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            self.sockets.append(sock)
        config = uvicorn.Config(self._app, log_config=None, access_log=False,
                                lifespan="off", backlog=1024, interface="asgi3")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": self.sockets},
                                       daemon=True)  # fmt: skip
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    async def _app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        with self.cond:
            self.arrived.append(time.perf_counter())
            self.cond.notify_all()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{s.getsockname()[1]}/notify" for s in self.sockets]

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        for sock in self.sockets:
            sock.close()


def fanout(app: httpx.Client, iid: str, subscribers: int, rounds: int) -> dict[str, Any]:
    callbacks = Callbacks(subscribers)
    try:
        for url in callbacks.urls():
            app.post(f"{SM}/applications/{iid}/subscriptions", json={
                "subscriptionType": "SerAvailabilityNotificationSubscription",
                "callbackReference": url,
                "filteringCriteria": {"serNames": ["fanout"]}}).raise_for_status()  # fmt: skip
        times = []
        for _ in range(rounds):
            with callbacks.cond:
                callbacks.arrived.clear()
            start = time.perf_counter()
            created = app.post(f"{SM}/applications/{iid}/services", json=service("fanout"))
            created.raise_for_status()
            with callbacks.cond:
                if not callbacks.cond.wait_for(lambda: len(callbacks.arrived) >= subscribers, 30):
                    raise SystemExit(f"bench: only {len(callbacks.arrived)} notifications")
                times.append((max(callbacks.arrived) - start) * 1e3)
            app.delete(f"{SM}/applications/{iid}/services/{created.json()['serInstanceId']}")
            time.sleep(0.3)  # let the REMOVED notifications drain
        return {"subscribers": subscribers, "rounds": rounds, "ms": times,
                "median_ms": statistics.median(times), "max_ms": max(times),
                "p95_ms": sorted(times)[max(0, round(0.95 * len(times)) - 1)]}  # fmt: skip
    finally:
        callbacks.close()


def plot(result: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    runs = result["discovery"]
    labels = [f"{r['query']}, c={r['connections']}\n{r['requests_per_s']:.0f} req/s" for r in runs]
    for key, offset in (("p50", -0.25), ("p90", 0), ("p99", 0.25)):
        ax1.bar([i + offset for i in range(len(runs))],
                [r["latency_us"][key] / 1e3 for r in runs], width=0.25, label=key)  # fmt: skip
    ax1.axhline(20, color="red", linestyle="--", linewidth=1, label="goal p99 20 ms")
    ax1.set_xticks(range(len(runs)), labels)
    ax1.set_ylabel("latency (ms)")
    ax1.set_title(f"Discovery, {result['services']} services registered")
    ax1.legend()
    fan = result["fanout"]
    ax2.plot(range(1, len(fan["ms"]) + 1), fan["ms"], "o-")
    ax2.set_xlabel("round")
    ax2.xaxis.get_major_locator().set_params(integer=True)
    ax2.set_ylabel("time to last notification (ms)")
    ax2.set_title(f"Fan-out to {fan['subscribers']} HTTP subscribers")
    ax2.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mts_lab.platform.bench", description=__doc__)
    p.add_argument("--out", type=Path, default=Path("docs/results/platform"))
    p.add_argument("--services", type=int, default=1000)
    p.add_argument("--subscribers", type=int, default=100)
    p.add_argument("--seconds", type=int, default=10, help="duration of each wrk run")
    p.add_argument(
        "--connections",
        default="4,16,64",
        help="wrk connections for the by-name runs, comma-separated (%(default)s)",
    )
    p.add_argument("--rounds", type=int, default=20, help="fan-out repetitions")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("bench: wrk is missing (make system installs it)")

    state = Path(tempfile.mkdtemp(prefix="mts-bench-platform-"))
    proc, url, secret = start_platform(state)
    try:
        iid, app = setup_app(url, secret)
        print(f"registering {args.services} services ...", file=sys.stderr)
        for i in range(args.services):
            app.post(f"{SM}/applications/{iid}/services",
                     json=service(f"svc-{i:04d}")).raise_for_status()  # fmt: skip
        app_token = app.headers["Authorization"].removeprefix("Bearer ")
        discovery = []
        runs = [("name", int(c)) for c in args.connections.split(",")] + [("all", 16)]
        for query, connections in runs:
            print(f"discovery ({query}, {connections} connections) for {args.seconds} s ...",
                  file=sys.stderr)  # fmt: skip
            discovery.append(run_wrk(url, app_token, args.services, query, args.seconds,
                                     connections, proc.pid))  # fmt: skip
        print(f"fan-out to {args.subscribers} subscribers ...", file=sys.stderr)
        fan = fanout(app, iid, args.subscribers, args.rounds)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)

    result = {
        "command": "make bench-platform",
        "services": args.services,
        "discovery": discovery,
        "fanout": fan,
        "host": {
            "cpus": os.cpu_count(),
            "kernel": host.release(),
            "loadavg_1m": os.getloadavg()[0],
        },
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "platform.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out / "platform.png")
    print(f"\n{'query, conns':<16}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'errors':>8}{'req/CPU-s':>11}")  # fmt: skip
    for r in discovery:
        lat, label = r["latency_us"], f"{r['query']}, {r['connections']}"
        print(
            f"{label:<16}{r['requests_per_s']:>10.0f}{lat['p50'] / 1e3:>9.2f}"
            f"{lat['p99'] / 1e3:>9.2f}{lat['max'] / 1e3:>9.2f}"
            f"{r['non_2xx'] + r['socket_errors']:>8}{r['requests_per_cpu_s'] or 0:>11.0f}"
        )
    print(
        f"\nfan-out to {fan['subscribers']} subscribers: median {fan['median_ms']:.1f} ms, "
        f"p95 {fan['p95_ms']:.1f} ms, max {fan['max_ms']:.1f} ms ({fan['rounds']} rounds)"
    )
    print(f"load average during the run: {result['host']['loadavg_1m']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
