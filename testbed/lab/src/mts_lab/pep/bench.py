"""``make bench-pep``: this PEP against direct routing and HAProxy, on one topology, in one run.

    client ─ [pep namespace: routes; runs the PEP (transparent) and HAProxy (TCP mode)] ─ server

For each system, interleaved round by round so that background load hits all alike:
iperf3 throughput with 1 and 8 streams in both directions, the proxy process's CPU time
per Gbit relayed, connections per second (connect, 1-byte echo, close), and the user-space
memory (RSS) each idle connection adds to the proxy process. JSON and PNG go to ``--out``.

Also: ``python -m mts_lab.pep.bench echo HOST PORT`` (an epoll echo server holding any number of
connections) and ``... connrate HOST PORT SECONDS`` (a connection-rate client); both are
used by the benchmark and by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mts_lab.line import Lab, in_netns
from mts_lab.results import save_results

IPERF_PEP, IPERF_DIRECT = 5201, 5202  # the PEP intercepts the first, not the second
ECHO_PEP, ECHO_DIRECT = 7001, 7002
HAPROXY_IPERF, HAPROXY_ECHO = 5203, 7003
TPROXY_PORT = 5999
SYSTEMS = ("direct", "pep", "haproxy")
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ---- helper processes (echo server, connection-rate client) --------------------------------


def echo_server(host: str, port: int) -> None:
    """Accept and echo on any number of connections; prints "ready" once listening."""
    listener = socket.create_server((host, port), backlog=65535)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                _accept_all(listener, sel)
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except ConnectionError:
                data = b""
            if data:
                sock.sendall(data)  # small echoes only: they fit in the send buffer
            else:
                sel.unregister(sock)
                sock.close()


def _accept_all(listener: socket.socket, sel: selectors.BaseSelector) -> None:
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(False)
        sel.register(conn, selectors.EVENT_READ)


def connection_rate(host: str, port: int, seconds: float) -> None:
    """Connect, echo one byte, close, as fast as possible; prints connections completed."""
    done = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(b"x")
            if sock.recv(1) != b"x":
                raise RuntimeError("echo mismatch")
        done += 1
    print(done, flush=True)


# ---- the systems under test -----------------------------------------------------------------


@dataclass
class Bench:
    lab: Lab
    workdir: Path
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    pep: subprocess.Popen[Any] | None = None
    haproxy: subprocess.Popen[Any] | None = None

    def start(self) -> None:
        lab = self.lab
        for port in (IPERF_PEP, IPERF_DIRECT):
            self._spawn(lab.server_ns, ["iperf3", "-s", "-p", str(port)])
        for port in (ECHO_PEP, ECHO_DIRECT):
            self._spawn_ready(lab.server_ns, [*_self_cmd(), "echo", lab.server_ip, str(port)])
        self.pep = self._start_pep()
        self.haproxy = self._start_haproxy()
        for port in (HAPROXY_IPERF, HAPROXY_ECHO):
            _wait_listening(lab, lab.pep_ns, port)
        self.wait_pep_ready()
        for port in (IPERF_PEP, IPERF_DIRECT):
            _wait_listening(lab, lab.server_ns, port)

    def _spawn(self, ns: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        proc = self.lab.popen(ns, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        return proc

    def _spawn_ready(self, ns: str, cmd: list[str]) -> None:
        proc = self.lab.popen(ns, cmd, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{cmd} did not start")

    def restart_pep(self, overrides: dict[str, str]) -> None:
        """Run the PEP again with other settings (for A/B comparisons)."""
        assert self.pep is not None
        self.pep.send_signal(signal.SIGTERM)
        self.pep.wait(30)
        self.procs.remove(self.pep)
        self.pep = self._start_pep(overrides)
        self.wait_pep_ready()

    def _start_pep(self, overrides: dict[str, str] | None = None) -> subprocess.Popen[Any]:
        lab = self.lab
        env = {
            **os.environ,
            "PEP_API_TOKENS": "bench",
            "PEP_HTTP_HOST": "127.0.0.1",
            "PEP_STATE_DIR": str(self.workdir),
            "PEP_TRANSPARENT_PORT": str(TPROXY_PORT),
            "PEP_TPROXY_PORTS": f"{IPERF_PEP},{ECHO_PEP}",
            "PEP_ALLOWED_CLIENTS": f"{lab.client_ip}/32",
            "PEP_ALLOWED_DESTINATIONS": f"{lab.server_ip}/32",
            "PEP_MAX_FLOWS_PER_CLIENT": "20000",
            "PEP_BACKLOG_INTERVAL_MS": "0",
            "PEP_RAN_AWARE": "false",
            "PEP_LOG_LEVEL": "WARNING",
            **(overrides or {}),
        }
        log = (self.workdir / "pep.log").open("wb")
        cmd = [sys.executable, "-m", "mec_pep", "serve"]
        proc = lab.popen(lab.pep_ns, cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def wait_pep_ready(self, timeout: float = 60) -> None:
        """Until /healthz says the relay and the TPROXY rules are in place."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.pep is not None
            if self.pep.poll() is not None:
                raise RuntimeError((self.workdir / "pep.log").read_text())
            try:
                ok = in_netns(self.lab.pep_ns, _pep_healthy)
            except OSError:
                ok = False
            if ok:
                return
            time.sleep(0.2)
        raise TimeoutError("the PEP did not become healthy")

    def _start_haproxy(self) -> subprocess.Popen[Any]:
        lab = self.lab
        config = self.workdir / "haproxy.cfg"
        config.write_text(
            "global\n  maxconn 9000\n"  # the descriptor limit (20000 here) caps it anyway
            "defaults\n  mode tcp\n  timeout connect 5s\n"
            "  timeout client 120s\n  timeout server 120s\n"
            f"listen iperf\n  bind {lab.pep_client_side_ip}:{HAPROXY_IPERF}\n"
            f"  server s {lab.server_ip}:{IPERF_DIRECT}\n"
            f"listen echo\n  bind {lab.pep_client_side_ip}:{HAPROXY_ECHO}\n"
            f"  server s {lab.server_ip}:{ECHO_DIRECT}\n"
        )
        return self._spawn(lab.pep_ns, ["haproxy", "-db", "-f", str(config)])

    def stop(self) -> None:
        from mts_testbed.netns import stop_processes

        stop_processes(self.procs)

    def target(self, system: str, *, echo: bool = False) -> tuple[str, int]:
        lab = self.lab
        if system == "haproxy":
            return lab.pep_client_side_ip, HAPROXY_ECHO if echo else HAPROXY_IPERF
        if system == "pep":
            return lab.server_ip, ECHO_PEP if echo else IPERF_PEP
        return lab.server_ip, ECHO_DIRECT if echo else IPERF_DIRECT

    def process(self, system: str) -> subprocess.Popen[Any] | None:
        return {"pep": self.pep, "haproxy": self.haproxy}.get(system)


def _pep_healthy() -> bool:
    with socket.create_connection(("127.0.0.1", 8102), timeout=2) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        return sock.recv(64).startswith(b"HTTP/1.1 200")


def _self_cmd() -> list[str]:
    return [sys.executable, "-m", "mts_lab.pep.bench"]


def _wait_listening(lab: Lab, ns: str, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f":{port} " in lab.sh(ns, "ss -ltnH"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port} in {ns}")


def cpu_seconds(proc: subprocess.Popen[Any] | None) -> float:
    """User + system CPU time of a process (all its threads)."""
    if proc is None:
        return 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_kib(proc: subprocess.Popen[Any] | None) -> int:
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# ---- measurements ---------------------------------------------------------------------------


def iperf3(
    bench: Bench, system: str, streams: int, download: bool, seconds: float
) -> dict[str, Any]:
    host, port = bench.target(system)
    cmd = ["iperf3", "-c", host, "-p", str(port), "-t", str(seconds), "-P", str(streams), "-J"]
    if download:
        cmd.append("-R")
    proc = bench.process(system)
    cpu_before = cpu_seconds(proc)
    out = bench.lab.sh(bench.lab.client_ns, " ".join(cmd))
    cpu = cpu_seconds(proc) - cpu_before
    report = json.loads(out)
    if "error" in report:
        raise RuntimeError(f"iperf3 through {system}: {report['error']}")
    received = report["end"]["sum_received"]
    gbit = received["bytes"] * 8 / 1e9
    return {
        "gbps": received["bits_per_second"] / 1e9,
        "cpu_s": cpu,
        "cpu_s_per_gbit": cpu / gbit if proc is not None and gbit else None,
    }


def connections_per_second(bench: Bench, system: str, seconds: float, clients: int) -> float:
    host, port = bench.target(system, echo=True)
    cmd = [*_self_cmd(), "connrate", host, str(port), str(seconds)]
    procs = [
        bench.lab.popen(bench.lab.client_ns, cmd, stdout=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    total = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=seconds + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"connrate client failed for {system}")
        total += int(out.strip())
    return total / seconds


def idle_memory(bench: Bench, system: str, count: int) -> dict[str, float]:
    """RSS the proxy process gains per idle connection (after one warm-up connection)."""
    target = bench.target(system, echo=True)
    proc = bench.process(system)

    def echo_one() -> socket.socket:
        sock = socket.create_connection(target, timeout=10)
        sock.sendall(b"w")
        sock.recv(1)
        return sock

    warm = in_netns(bench.lab.client_ns, echo_one)
    time.sleep(0.5)
    before = rss_kib(proc)
    socks = in_netns(
        bench.lab.client_ns,
        lambda: [socket.create_connection(target, timeout=30) for _ in range(count)],
    )
    try:
        for sock in socks[:: max(1, count // 50)]:  # make sure they are relayed end to end
            sock.sendall(b"p")
            if sock.recv(1) != b"p":
                raise RuntimeError("idle connection does not echo")
        time.sleep(1.0)
        after = rss_kib(proc)
    finally:
        for sock in socks:
            sock.close()
        warm.close()
    return {"connections": count, "rss_kib_before": before, "rss_kib_after": after,
            "kib_per_connection": (after - before) / count}  # fmt: skip


# ---- the run --------------------------------------------------------------------------------


def run(out: Path, seconds: float, rounds: int, idle: int, conn_seconds: float) -> dict[str, Any]:
    lab = Lab.create("pb")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-bench-")))
    try:
        bench.start()
        results = _measure(bench, seconds, rounds, idle, conn_seconds)
    finally:
        bench.stop()
        lab.down()
    results["environment"] = _environment(seconds, rounds)
    save_results(results, out, "bench", plot, table)
    return results


def _measure(
    bench: Bench, seconds: float, rounds: int, idle: int, conn_seconds: float
) -> dict[str, Any]:
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(rounds):
        for streams in (1, 8):
            for download in (True, False):
                case = f"{'download' if download else 'upload'}_{streams}"
                for system in SYSTEMS:
                    sample = iperf3(bench, system, streams, download, seconds)
                    samples.setdefault(case, {}).setdefault(system, []).append(sample)
                    print(f"round {r + 1}/{rounds} {case:<11} {system:<8} "
                          f"{sample['gbps']:6.2f} Gbit/s", flush=True)  # fmt: skip
    rates: dict[str, list[float]] = {}
    for r in range(rounds):
        for system in SYSTEMS:
            rate = connections_per_second(bench, system, conn_seconds, clients=4)
            rates.setdefault(system, []).append(rate)
            print(f"round {r + 1}/{rounds} conn/s      {system:<8} {rate:8.0f}", flush=True)
    memory = {}
    for system in ("pep", "haproxy"):
        memory[system] = idle_memory(bench, system, idle)
        print(f"idle memory {system:<8} {memory[system]['kib_per_connection']:.2f} KiB/conn",
              flush=True)  # fmt: skip
    return {"throughput": _summarize(samples), "connections_per_second": _rates(rates),
            "idle_memory": memory}  # fmt: skip


def _summarize(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for case, by_system in samples.items():
        summary[case] = {}
        for system, runs in by_system.items():
            per_gbit = [s["cpu_s_per_gbit"] for s in runs if s["cpu_s_per_gbit"] is not None]
            summary[case][system] = {
                "gbps_median": statistics.median(s["gbps"] for s in runs),
                "gbps_samples": [round(s["gbps"], 3) for s in runs],
                "cpu_s_per_gbit_median": statistics.median(per_gbit) if per_gbit else None,
            }
        direct = summary[case]["direct"]["gbps_median"]
        haproxy = summary[case]["haproxy"]["gbps_median"]
        pep = summary[case]["pep"]["gbps_median"]
        summary[case]["pep_vs_direct"] = pep / direct if direct else None
        summary[case]["pep_vs_haproxy"] = pep / haproxy if haproxy else None
    return summary


def _rates(rates: dict[str, list[float]]) -> dict[str, Any]:
    return {s: {"median": statistics.median(v), "samples": [round(x) for x in v]}
            for s, v in rates.items()}  # fmt: skip


def _environment(seconds: float, rounds: int) -> dict[str, Any]:
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "iperf_seconds": seconds,
        "rounds": rounds,
        "haproxy": subprocess.run(
            ["haproxy", "-v"], capture_output=True, text=True
        ).stdout.splitlines()[0],
        "pep": "transparent mode, defaults (2 relay threads, splice, 16 MiB forced buffers)",
    }


def table(results: dict[str, Any]) -> str:
    lines = ["case         direct Gb/s  pep Gb/s  haproxy Gb/s  pep/direct  pep/haproxy  "
             "CPU-s/Gbit pep  haproxy"]  # fmt: skip
    for case, r in results["throughput"].items():
        cpu_pep = r["pep"]["cpu_s_per_gbit_median"]
        cpu_hap = r["haproxy"]["cpu_s_per_gbit_median"]
        lines.append(
            f"{case:<12} {r['direct']['gbps_median']:>11.2f} {r['pep']['gbps_median']:>9.2f} "
            f"{r['haproxy']['gbps_median']:>13.2f} {r['pep_vs_direct']:>11.2f} "
            f"{r['pep_vs_haproxy']:>12.2f} {cpu_pep:>15.3f} {cpu_hap:>8.3f}"
        )
    rates = results["connections_per_second"]
    lines.append("connections/s: " + ", ".join(f"{s} {rates[s]['median']:.0f}" for s in SYSTEMS))
    memory = results["idle_memory"]
    lines.append(
        "user-space memory per idle connection: "
        + ", ".join(f"{s} {m['kib_per_connection']:.2f} KiB" for s, m in memory.items())
    )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, 4, figsize=(17, 4.2), gridspec_kw={"width_ratios": [3, 3, 1.4, 1.4]}
    )
    cases = list(results["throughput"])
    colors = {"direct": "#888888", "pep": "#1f77b4", "haproxy": "#ff7f0e"}
    width = 0.27
    for i, system in enumerate(SYSTEMS):
        xs = [c + (i - 1) * width for c in range(len(cases))]
        ys = [results["throughput"][c][system]["gbps_median"] for c in cases]
        axes[0].bar(xs, ys, width, label=system, color=colors[system])
    axes[0].set_xticks(range(len(cases)), [c.replace("_", "\n") + " str." for c in cases])
    axes[0].set_ylabel("Gbit/s (median)")
    axes[0].set_title("iperf3 throughput")
    axes[0].legend()
    for i, system in enumerate(("pep", "haproxy")):
        xs = [c + (i - 0.5) * width for c in range(len(cases))]
        ys = [results["throughput"][c][system]["cpu_s_per_gbit_median"] or 0 for c in cases]
        axes[1].bar(xs, ys, width, label=system, color=colors[system])
    axes[1].set_xticks(range(len(cases)), [c.replace("_", "\n") + " str." for c in cases])
    axes[1].set_ylabel("process CPU-seconds per Gbit")
    axes[1].set_title("proxy CPU cost")
    axes[1].legend()
    rates = results["connections_per_second"]
    axes[2].bar(SYSTEMS, [rates[s]["median"] for s in SYSTEMS], color=[colors[s] for s in SYSTEMS])
    axes[2].set_title("connections/s")
    memory = results["idle_memory"]
    axes[3].bar(list(memory), [m["kib_per_connection"] for m in memory.values()],
                color=[colors[s] for s in memory])  # fmt: skip
    axes[3].set_title("KiB per idle connection")
    fig.suptitle(f"PEP vs direct vs HAProxy — {results['environment']['date']}, "
                 f"{results['environment']['cpus']} CPUs, load at end "
                 f"{results['environment']['loadavg_at_end'][0]:.1f}")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare(variants: dict[str, dict[str, str]], cases: list[str], rounds: int,
            seconds: float, out: Path) -> dict[str, Any]:  # fmt: skip
    """A/B: PEP settings variants (and HAProxy) on the same topology, interleaved."""
    lab = Lab.create("pa")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-ab-")))
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        bench.start()
        for r in range(rounds):
            for name, overrides in [*variants.items(), ("haproxy", {})]:
                if name != "haproxy":
                    bench.restart_pep(overrides)
                for case in cases:
                    direction, streams = case.split("_")
                    system = "haproxy" if name == "haproxy" else "pep"
                    sample = iperf3(bench, system, int(streams), direction == "download", seconds)
                    samples.setdefault(case, {}).setdefault(name, []).append(sample)
                    print(f"round {r + 1}/{rounds} {case:<11} {name:<12} "
                          f"{sample['gbps']:6.2f} Gbit/s", flush=True)  # fmt: skip
    finally:
        bench.stop()
        lab.down()
    summary = {
        case: {name: _medians(runs) for name, runs in by_name.items()}
        for case, by_name in samples.items()
    }
    results = {
        "variants": variants,
        "summary": summary,
        "environment": _environment(seconds, rounds),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.json").write_text(json.dumps(results, indent=2) + "\n")
    for case, by_name in summary.items():
        print(case, ", ".join(f"{n} {v['gbps_median']:.2f} Gbit/s "
                              f"({v['cpu_s_per_gbit_median']:.3f} CPU-s/Gbit)"
                              for n, v in by_name.items()))  # fmt: skip
    return results


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "gbps_median": statistics.median(x["gbps"] for x in runs),
        "gbps_samples": [round(x["gbps"], 3) for x in runs],
        "cpu_s_per_gbit_median": statistics.median(x["cpu_s_per_gbit"] for x in runs),
    }


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """NAME or NAME:PEP_X=1,PEP_Y=2"""
    name, _, assignments = text.partition(":")
    pairs = [a.split("=", 1) for a in assignments.split(",") if a]
    return name, {k: v for k, v in pairs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.bench",
        description="Benchmark the PEP against direct routing and HAProxy (needs root).",
    )
    sub = parser.add_subparsers(dest="command")
    echo = sub.add_parser("echo", help="run an echo server (helper)")
    echo.add_argument("host")
    echo.add_argument("port", type=int)
    rate = sub.add_parser("connrate", help="run a connection-rate client (helper)")
    rate.add_argument("host")
    rate.add_argument("port", type=int)
    rate.add_argument("seconds", type=float)
    ab = sub.add_parser("compare", help="A/B of PEP settings against each other and HAProxy")
    ab.add_argument("variants", nargs="+", help="NAME[:PEP_SETTING=VALUE,...]")
    ab.add_argument("--cases", default="download_8,upload_8", help="DIRECTION_STREAMS,...")
    ab.add_argument("--rounds", type=int, default=4)
    ab.add_argument("--seconds", type=float, default=3.0)
    ab.add_argument("--out", type=Path, default=Path("docs/results/pep"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep"), help="output dir")
    parser.add_argument("--seconds", type=float, default=4.0, help="per iperf3 run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--idle", type=int, default=5000, help="idle connections for memory")
    parser.add_argument("--conn-seconds", type=float, default=3.0, help="per conn/s run")
    args = parser.parse_args(argv)
    if args.command == "echo":
        echo_server(args.host, args.port)
    elif args.command == "connrate":
        connection_rate(args.host, args.port, args.seconds)
    elif args.command == "compare":
        variants = dict(_variant(v) for v in args.variants)
        compare(variants, args.cases.split(","), args.rounds, args.seconds, args.out)
    else:
        run(args.out, args.seconds, args.rounds, args.idle, args.conn_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
