"""``make bench-pep``: this PEP against direct routing and HAProxy, on one topology, in one run.

    client ─ [pep namespace: routes; runs the PEP (transparent) and HAProxy (TCP mode)] ─ server

For each system, interleaved round by round so that background load hits all alike:
iperf3 throughput with 1 and 8 streams in both directions, the proxy process's CPU time
per Gbit relayed, connections per second (connect, 1-byte exchange, close), short flows
(a small request and a 10 kB or 100 kB response from 64 concurrent clients: completion
p50/p99 and flows/s), and many concurrent idle connections (user-space memory (RSS) each
adds to the proxy process, and the latency of a new connection while they are open).
Every sample records the machine's load. JSON and PNG go to ``--out``.

Traffic for the rate, short-flow and idle cases comes from ``build/bin/tcpload`` (Go,
``testbed/tcpload``), so the client is not what limits a run on two cores.

Also: ``python -m mts_lab.pep.bench echo HOST PORT`` (an epoll echo server holding any number of
connections; used by the tests).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import platform
import resource
import selectors
import shutil
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
from mts_lab.results import pyplot, save_figure, save_results
from mts_lab.schedstat import schedstat, thread_ids

IPERF_PEP, IPERF_DIRECT = 5201, 5202  # the PEP intercepts the first, not the second
HAPROXY_IPERF = 5203
TPROXY_PORT = 5999
# A variant with VIA=socks5: the load connects through it (compare-flows). Below the lab's
# ephemeral ports (1024-65535, line.py): 1080 was once held by an earlier variant's WAN
# legs in TIME_WAIT, and the PEP could not listen on it (EADDRINUSE, 27 Nov 00:05 UTC).
SOCKS5_PORT = 1000
# tcpload servers: one process per port, since one process holds at most RLIMIT_NOFILE
# (20,000 here) connections; the idle case spreads its connections over all of them.
LOAD_PORTS = 6
LOAD_PEP = tuple(range(7100, 7100 + LOAD_PORTS))  # intercepted by the PEP
LOAD_DIRECT = tuple(range(7200, 7200 + LOAD_PORTS))  # routed past it (and HAProxy's backends)
# HAProxy's frontends, one per server process: the client spreads over the same six server
# processes through every system (with one, HAProxy's server side was cheaper per
# connection than the PEP's and direct routing's six: a bias, measured in docs/results.md).
HAPROXY_LOAD = tuple(range(7000, 7000 + LOAD_PORTS))
PER_PROCESS = 16_000  # idle connections per client process (below the descriptor limit)
HAPROXY_MAXCONN = 9000  # one process, 2 descriptors per connection, limit 20,000
SYSTEMS = ("direct", "pep", "core", "haproxy")
# The PEP's settings per system, each relay chosen explicitly: "pep" its Python relay, "core"
# its compiled io_uring relay core (the default relay where it can run: docs/pep.md); one PEP
# process at a time, restarted between them.
PEP_SETTINGS: dict[str, dict[str, str]] = {
    "pep": {"PEP_RELAY_CORE": "python"},
    "core": {"PEP_RELAY_CORE": "uring"},
}
TPROXY_SYSTEMS = ("pep", "core", "floor")  # behind the TPROXY rules
SHORT_FLOWS = {"10kB": 10_000, "100kB": 100_000}  # response size; the request is 500 bytes
SHORT_REQUEST = 500
SHORT_CLIENTS = 64
CLK_TCK = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
PEP_API_PORT = 8102  # the first PEP process's; extra processes take the next ones
TCPLOAD = Path(__file__).resolve().parents[5] / "build" / "bin" / "tcpload"
RELAY_FLOOR = TCPLOAD.with_name("relay-floor")
RELAY_FLOOR_URING = TCPLOAD.with_name("relay-floor-uring")
FLOOR_TABLE = "mts_floor"
FLOW_CASES = {  # name: (clients, request bytes, response bytes)
    "connections": (16, 1, 1),
    "10kB": (SHORT_CLIENTS, SHORT_REQUEST, SHORT_FLOWS["10kB"]),
    "100kB": (SHORT_CLIENTS, SHORT_REQUEST, SHORT_FLOWS["100kB"]),
}


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


# ---- the systems under test -----------------------------------------------------------------


@dataclass
class Bench:
    lab: Lab
    workdir: Path
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    servers: list[subprocess.Popen[Any]] = field(default_factory=list)  # tcpload serve
    pep: subprocess.Popen[Any] | None = None
    # More PEP processes on the same listeners (SO_REUSEPORT), for the A/B of relay
    # processes against relay threads (variant setting PROCESSES=N; docs/pep.md).
    extra_peps: list[subprocess.Popen[Any]] = field(default_factory=list)
    pep_settings: dict[str, str] = field(default_factory=dict)  # the running PEP's overrides
    haproxy: subprocess.Popen[Any] | None = None
    floor: subprocess.Popen[Any] | None = None  # relay-floor (a variant of it), in A/B runs only

    def start(self) -> None:
        lab = self.lab
        for port in (IPERF_PEP, IPERF_DIRECT):
            self._spawn(lab.server_ns, ["iperf3", "-s", "-p", str(port)])
        if not TCPLOAD.exists():
            raise RuntimeError(f"{TCPLOAD} is missing: make build")
        # The servers accept TCP Fast Open without opting in (relay-floor's tfo variant; no
        # other system sends data on its SYNs). Read when a server calls listen().
        lab.sh(lab.server_ns, f"sysctl -qw net.ipv4.tcp_fastopen={0x403}")
        for port in (*LOAD_PEP, *LOAD_DIRECT):
            self.servers.append(
                self._spawn_ready(lab.server_ns, [str(TCPLOAD), "serve", f"{lab.server_ip}:{port}"])
            )
        self.pep = self._start_pep(PEP_SETTINGS["pep"])
        self.haproxy = self._start_haproxy()
        for port in (HAPROXY_IPERF, *HAPROXY_LOAD):
            _wait_listening(lab, lab.pep_ns, port)
        self.wait_pep_ready()
        for port in (IPERF_PEP, IPERF_DIRECT):
            _wait_listening(lab, lab.server_ns, port)

    def _spawn(self, ns: str, cmd: list[str], **kw: Any) -> subprocess.Popen[Any]:
        proc = self.lab.popen(ns, cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        self.procs.append(proc)
        return proc

    def _spawn_ready(self, ns: str, cmd: list[str]) -> subprocess.Popen[Any]:
        proc = self.lab.popen(ns, cmd, stdout=subprocess.PIPE, text=True)
        self.procs.append(proc)
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{cmd} did not start")
        return proc

    def restart_pep(self, overrides: dict[str, str]) -> None:
        """Run the PEP again with other settings (for A/B comparisons)."""
        self.stop_pep()
        self.pep = self._start_pep(overrides)
        self.wait_pep_ready()

    def use(self, system: str, **settings: str) -> None:
        """Before measuring ``system``: if it is the PEP ("pep" or "core"), the PEP runs with
        that relay (and ``settings``), restarted only if it runs otherwise."""
        wanted = {**PEP_SETTINGS[system], **settings} if system in PEP_SETTINGS else None
        if wanted is not None and wanted != self.pep_settings:
            self.restart_pep(wanted)

    def stop_pep(self) -> None:
        """Stop the PEP (it removes its TPROXY rules) and its extra processes."""
        for proc in [*self.extra_peps, *([self.pep] if self.pep is not None else [])]:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            self.procs.remove(proc)
        self.pep, self.extra_peps = None, []

    def start_floor(self, options: tuple[str, ...] = ()) -> None:
        """``relay-floor`` in the PEP's place, behind the same TPROXY rules (PEP stopped).

        ``options``: relay-floor's (``sockmap``, ``defer-accept``, ``quickack``,
        ``cpu-affinity``, ``tfo``); ``uring`` runs ``relay-floor-uring`` (which takes
        ``cpu-affinity``)."""
        from mec_common import tproxy

        lab = self.lab
        self.stop_pep()
        intercept = tproxy.Intercept(
            sources=(ipaddress.IPv4Network(f"{lab.client_ip}/32"),),
            destinations=(ipaddress.IPv4Network(f"{lab.server_ip}/32"),),
            ports=(IPERF_PEP, *LOAD_PEP),
        )
        setup = tproxy.TproxySetup(FLOOR_TABLE, TPROXY_PORT, 0x51, 151, (intercept,))
        tproxy.install(setup, tproxy.Runner(lab.pep_ns))
        binary = RELAY_FLOOR_URING if "uring" in options else RELAY_FLOOR
        rest = [o for o in options if o != "uring"]
        self.floor = self._spawn(lab.pep_ns, [str(binary), str(TPROXY_PORT), "2", *rest])
        _wait_listening(lab, lab.pep_ns, TPROXY_PORT)

    def stop_floor(self) -> None:
        from mec_common import tproxy
        from mts_testbed.netns import stop_processes

        if self.floor is not None:
            stop_processes([self.floor])
            self.procs.remove(self.floor)
            self.floor = None
        tproxy.remove(tproxy.Installed(FLOOR_TABLE, 0x51, 151), tproxy.Runner(self.lab.pep_ns))

    def _start_pep(self, overrides: dict[str, str] | None = None) -> subprocess.Popen[Any]:
        """The PEP; with ``PROCESSES=N`` in ``overrides`` also N-1 more PEP processes that
        open the same listeners (``SO_REUSEPORT``) beside it, each with its own API port
        and no interception rules of its own."""
        self.pep_settings = dict(overrides or {})
        settings = dict(overrides or {})
        processes = int(settings.pop("PROCESSES", "1"))
        if settings.pop("VIA", "transparent") == "socks5":
            settings.setdefault("PEP_SOCKS5_PORT", str(SOCKS5_PORT))
        main = self._start_pep_process(settings)
        for i in range(1, processes):
            extra = {**settings, "PEP_HTTP_PORT": str(PEP_API_PORT + i),
                     "PEP_TPROXY_INSTALL_RULES": "false"}  # fmt: skip
            self.extra_peps.append(self._start_pep_process(extra, f"pep-{i}.log"))
        return main

    def _start_pep_process(
        self, overrides: dict[str, str], log_name: str = "pep.log"
    ) -> subprocess.Popen[Any]:
        lab = self.lab
        env = {
            **os.environ,
            "PEP_API_TOKENS": "bench",
            "PEP_HTTP_HOST": "127.0.0.1",
            "PEP_STATE_DIR": str(self.workdir),
            "PEP_TRANSPARENT_PORT": str(TPROXY_PORT),
            "PEP_TPROXY_PORTS": ",".join(map(str, (IPERF_PEP, *LOAD_PEP))),
            "PEP_ALLOWED_CLIENTS": f"{lab.client_ip}/32",
            "PEP_ALLOWED_DESTINATIONS": f"{lab.server_ip}/32",
            "PEP_MAX_FLOWS": "200000",
            "PEP_MAX_FLOWS_PER_CLIENT": "200000",
            "PEP_BACKLOG_INTERVAL_MS": "0",
            "PEP_RAN_AWARE": "false",
            "PEP_LOG_LEVEL": "WARNING",
            **overrides,
        }
        log = (self.workdir / log_name).open("wb")
        cmd = [sys.executable, "-m", "mec_pep", "serve"]
        proc = lab.popen(lab.pep_ns, cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def wait_pep_ready(self, timeout: float = 60) -> None:
        """Until /healthz of every PEP process says its relay (and the TPROXY rules) are in
        place."""
        deadline = time.monotonic() + timeout
        assert self.pep is not None
        for i, proc in enumerate([self.pep, *self.extra_peps]):
            port = PEP_API_PORT + i
            while not _healthy(self.lab, proc, port):
                if proc.poll() is not None:
                    raise RuntimeError(f"a PEP process ended: see {self.workdir}/pep*.log")
                if time.monotonic() > deadline:
                    raise TimeoutError("the PEP did not become healthy")
                time.sleep(0.2)

    def restart_haproxy(self, *, pinned: bool) -> None:
        """HAProxy again, with its threads pinned one per CPU (``cpu-map``) or not."""
        from mts_testbed.netns import stop_processes

        assert self.haproxy is not None
        stop_processes([self.haproxy])
        self.procs.remove(self.haproxy)
        self.haproxy = self._start_haproxy(pinned=pinned)
        for port in (HAPROXY_IPERF, *HAPROXY_LOAD):
            _wait_listening(self.lab, self.lab.pep_ns, port)

    def _start_haproxy(self, *, pinned: bool = False) -> subprocess.Popen[Any]:
        lab = self.lab
        config = self.workdir / "haproxy.cfg"
        cpus = sorted(os.sched_getaffinity(0))
        cpu_map = f"auto:1/1-{len(cpus)} {' '.join(map(str, cpus))}"  # thread i on cpus[i]
        pinning = f"  nbthread {len(cpus)}\n  cpu-map {cpu_map}\n"
        config.write_text(
            f"global\n  maxconn {HAPROXY_MAXCONN}\n"  # the descriptor limit caps it anyway
            + (pinning if pinned else "")
            + "defaults\n  mode tcp\n  timeout connect 5s\n"
            "  timeout client 120s\n  timeout server 120s\n"
            f"listen iperf\n  bind {lab.pep_client_side_ip}:{HAPROXY_IPERF}\n"
            f"  server s {lab.server_ip}:{IPERF_DIRECT}\n"
            + "".join(
                f"listen load{i}\n  bind {lab.pep_client_side_ip}:{front}\n"
                f"  server s {lab.server_ip}:{back}\n"
                for i, (front, back) in enumerate(zip(HAPROXY_LOAD, LOAD_DIRECT, strict=True))
            )
        )
        return self._spawn(lab.pep_ns, ["haproxy", "-db", "-f", str(config)])

    def stop(self) -> None:
        from mts_testbed.netns import stop_processes

        stop_processes(self.procs)

    def target(self, system: str) -> tuple[str, int]:
        """iperf3's server through ``system``."""
        lab = self.lab
        if system == "haproxy":
            return lab.pep_client_side_ip, HAPROXY_IPERF
        if system in TPROXY_SYSTEMS:
            return lab.server_ip, IPERF_PEP
        return lab.server_ip, IPERF_DIRECT

    def load_targets(self, system: str) -> list[str]:
        """tcpload's servers through ``system`` (the same six server processes for all)."""
        lab = self.lab
        if system == "haproxy":
            return [f"{lab.pep_client_side_ip}:{port}" for port in HAPROXY_LOAD]
        ports = LOAD_PEP if system in TPROXY_SYSTEMS else LOAD_DIRECT
        return [f"{lab.server_ip}:{port}" for port in ports]

    def process(self, system: str) -> subprocess.Popen[Any] | None:
        procs = {"pep": self.pep, "core": self.pep, "haproxy": self.haproxy, "floor": self.floor}
        return procs.get(system)

    def processes(self, system: str) -> list[subprocess.Popen[Any]]:
        """Every process of ``system`` (the PEP's extra processes too)."""
        main = self.process(system)
        return [
            *([main] if main is not None else []),
            *(self.extra_peps if system in PEP_SETTINGS else []),
        ]


def _healthy(lab: Lab, proc: subprocess.Popen[Any], port: int) -> bool:
    if proc.poll() is not None:
        return False
    try:
        return in_netns(lab.pep_ns, lambda: _pep_healthy(port))
    except OSError:
        return False


def _pep_healthy(port: int = PEP_API_PORT) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        return sock.recv(64).startswith(b"HTTP/1.1 200")


def _pep_stats(port: int = PEP_API_PORT) -> dict[str, Any]:
    """The PEP's refusal and abort counters (GET /pep/v1/stats)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /pep/v1/stats HTTP/1.0\r\nAuthorization: Bearer bench\r\n\r\n")
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    stats: dict[str, Any] = json.loads(raw.split(b"\r\n\r\n", 1)[1])
    return {k: stats.get(k) for k in ("accepted", "established", "refused", "aborted")}


def _self_cmd() -> list[str]:
    return [sys.executable, "-m", "mts_lab.pep.bench"]


def _wait_listening(lab: Lab, ns: str, port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f":{port} " in lab.sh(ns, "ss -ltnH"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port} in {ns}")


def cpu_seconds(procs: list[subprocess.Popen[Any]]) -> float:
    """User + system CPU time of processes (all their threads)."""
    return sum(sum(cpu_split(proc)) for proc in procs)


def cpu_split_all(procs: list[subprocess.Popen[Any]]) -> tuple[float, float]:
    """(user, system) CPU seconds of processes (all their threads)."""
    splits = [cpu_split(proc) for proc in procs]
    return sum(u for u, _ in splits), sum(s for _, s in splits)


def run_queue_wait_s(procs: list[subprocess.Popen[Any]]) -> float:
    """Seconds the processes' threads have waited, runnable, for a CPU (schedstat)."""
    stats = (schedstat(p.pid, tid) for p in procs for tid in thread_ids(p.pid))
    return sum(s.wait_ns for s in stats if s is not None) / 1e9  # None: a thread that ended


def machine_idle_s() -> float:
    """Idle + iowait CPU seconds of the whole machine since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / CLK_TCK


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine since boot (/proc/stat: all but idle and
    iowait; softirq work included, whichever context ran it)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


CPU_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def per_cpu_seconds() -> list[dict[str, float]]:
    """Each CPU's seconds since boot per state (/proc/stat ``cpuN`` lines; ``softirq`` is
    the time in softirq context, the kernel's receive path among it, whichever task it
    interrupted)."""
    cpus = []
    for line in Path("/proc/stat").read_text().splitlines()[1:]:
        if not line.startswith("cpu"):
            break
        ticks = [int(x) for x in line.split()[1:9]]
        cpus.append({k: t / CLK_TCK for k, t in zip(CPU_STATES, ticks, strict=True)})
    return cpus


def per_cpu_since(before: list[dict[str, float]], wall: float) -> list[dict[str, float]]:
    """Per CPU, the share of ``wall`` in each state since ``before`` (0-100 %)."""
    return [
        {k: round(100 * (a[k] - b[k]) / wall, 1) for k in CPU_STATES}
        for a, b in zip(per_cpu_seconds(), before, strict=True)
    ]


def _reaped_children_s() -> float:
    """User + system CPU seconds of this process's waited-for children (the clients)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def kernel_threads_ticks() -> dict[int, int]:
    """User + system CPU ticks of every kernel thread (children of kthreadd: kworkers,
    ksoftirqd), by pid: the work a proxy hands to the kernel's own threads (a sockmap's
    redirect backlog runs in a kworker), which its own process CPU does not show."""
    ticks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended
        if fields[1] == "2":  # ppid: kthreadd
            ticks[int(stat.parent.name)] = int(fields[11]) + int(fields[12])
    return ticks


def kernel_threads_s_since(before: dict[int, int]) -> float:
    """CPU seconds of kernel threads since ``before`` (threads that ended in between are
    missing: their last ticks are lost, never counted negative)."""
    after = kernel_threads_ticks()
    return sum(max(t - before.get(pid, 0), 0) for pid, t in after.items()) / CLK_TCK


def cpu_split(proc: subprocess.Popen[Any] | None) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (all its threads)."""
    if proc is None:
        return 0.0, 0.0
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def rss_kib(proc: subprocess.Popen[Any] | None) -> int:
    assert proc is not None
    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# The kernel's software events while a bulk case runs, machine-wide (`perf stat -a`, when
# perf is installed): context switches and migrations per GB show how often a stream's
# stages hand off to each other. Software events only: this VM exposes no hardware counters.
PERF = shutil.which("perf")
PERF_EVENTS = ("context-switches", "cpu-migrations")
PERF_KEYS = tuple(f"{e.replace('-', '_')}_per_gb" for e in PERF_EVENTS)  # in each sample


def perf_stat_prefix(out: Path) -> str:
    """A shell prefix that counts PERF_EVENTS machine-wide while its command runs."""
    if PERF is None:
        return ""
    return f"{PERF} stat -a -x, -e {','.join(PERF_EVENTS)} -o {out} -- "


def perf_counts(out: Path) -> dict[str, int]:
    """The counts ``perf stat -x,`` wrote (empty without perf)."""
    counts = {}
    for line in out.read_text().splitlines() if out.exists() else []:
        fields = line.split(",")
        if len(fields) > 2 and fields[0].isdigit() and fields[2] in PERF_EVENTS:
            counts[fields[2]] = int(fields[0])
    return counts


# ---- measurements ---------------------------------------------------------------------------


def iperf3(
    bench: Bench, system: str, streams: int, download: bool, seconds: float
) -> dict[str, Any]:
    host, port = bench.target(system)
    cmd = ["iperf3", "-c", host, "-p", str(port), "-t", str(seconds), "-P", str(streams), "-J"]
    if download:
        cmd.append("-R")
    procs = bench.processes(system)
    perf_out = bench.workdir / "iperf3.perf"
    perf_out.unlink(missing_ok=True)
    cpu_before, kthreads_before = cpu_seconds(procs), kernel_threads_ticks()
    cpus_before, busy_before, started = per_cpu_seconds(), machine_busy_s(), time.monotonic()
    out = bench.lab.sh(bench.lab.client_ns, perf_stat_prefix(perf_out) + " ".join(cmd))
    wall = time.monotonic() - started
    cpus = per_cpu_since(cpus_before, wall)
    busy = machine_busy_s() - busy_before
    cpu = cpu_seconds(procs) - cpu_before
    kthreads = kernel_threads_s_since(kthreads_before)
    try:
        report = json.loads(out)
    except ValueError:
        raise RuntimeError(f"iperf3 through {system} wrote no report: {out[:200]!r}") from None
    if "error" in report:
        raise RuntimeError(f"iperf3 through {system}: {report['error']}")
    received = report["end"]["sum_received"]
    gbit = received["bytes"] * 8 / 1e9
    ends = report["end"].get("cpu_utilization_percent", {})  # iperf3's own processes
    host, remote = ends.get("host_total"), ends.get("remote_total")
    events = perf_counts(perf_out)
    gigabytes = received["bytes"] / 1e9
    # The whole machine's CPU per Gbit (iperf3's two ends, the proxy, softirq work, the
    # kernel's threads; other work on the machine too): on a saturated machine the
    # throughput of each system is the inverse of it, so the difference to direct
    # routing is what a proxy costs per byte wherever the kernel charged it.
    return {
        "load": os.getloadavg()[0],
        "gbps": received["bits_per_second"] / 1e9,
        "cpu_s": cpu,
        "cpu_s_per_gbit": cpu / gbit if procs and gbit else None,
        "machine_cpu_s_per_gbit": busy / gbit if gbit else None,
        "softirq_s_per_gbit": sum(c["softirq"] for c in cpus) * wall / 100 / gbit if gbit else None,
        "kthreads_s_per_gbit": kthreads / gbit if gbit else None,
        "per_cpu_pct": cpus,
        # the sending and the receiving iperf3, each % of one CPU (the client sends unless -R)
        "sender_cpu_pct": remote if download else host,
        "receiver_cpu_pct": host if download else remote,
        **{
            k: events[e] / gigabytes
            for e, k in zip(PERF_EVENTS, PERF_KEYS, strict=True)
            if e in events and gigabytes
        },
    }


def tcpload_flows(
    bench: Bench, system: str, *, clients: int, request: int, response: int, seconds: float,
    socks5: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``tcpload flows``: connect, request, whole response, close, by ``clients`` at once.

    Besides the client's figures: the proxy's user and system CPU per flow, and whether
    it was bound by its own cores or by the machine's: the cores its processes used
    (``proxy_cores``), the cores' worth of its threads that waited, runnable, for a CPU
    (``proxy_waiting_cores``), and the machine's idle share (``machine_idle_pct``). Per
    flow also the CPU of the kernel's threads (``kthreads_us_per_flow``) and of the whole
    machine (``machine_us_per_flow``: the client's and servers' share is the same for every
    system, so differences between systems are the proxies' whole cost). ``socks5``: the
    PEP's SOCKS5 address; each flow asks it for the servers' own (unintercepted) ports.
    """
    targets = bench.load_targets("direct" if socks5 else system)
    cmd = [str(TCPLOAD), "flows", "-targets", ",".join(targets), "-clients", str(clients),
           "-request", str(request), "-response", str(response), "-seconds", str(seconds),
           *(["-socks5", socks5] if socks5 else [])]  # fmt: skip
    procs = bench.processes(system)
    (user_before, sys_before), wait_before = cpu_split_all(procs), run_queue_wait_s(procs)
    kthreads_before, busy_before = kernel_threads_ticks(), machine_busy_s()
    ends_before = cpu_seconds(bench.servers) + _reaped_children_s()
    idle_before, started = machine_idle_s(), time.monotonic()
    out = bench.lab.sh(bench.lab.client_ns, " ".join(cmd))
    wall = time.monotonic() - started
    result: dict[str, Any] = json.loads(out)
    user_after, sys_after = cpu_split_all(procs)
    kthreads, busy = kernel_threads_s_since(kthreads_before), machine_busy_s() - busy_before
    ends = cpu_seconds(bench.servers) + _reaped_children_s() - ends_before  # client, servers
    user, sys_ = user_after - user_before, sys_after - sys_before
    result["cpu_s"] = user + sys_
    flows = max(result["flows"], 1)
    result["user_us_per_flow"] = user / flows * 1e6
    result["sys_us_per_flow"] = sys_ / flows * 1e6
    result["cpu_us_per_flow"] = (user + sys_) / flows * 1e6
    result["kthreads_us_per_flow"] = kthreads / flows * 1e6
    result["machine_us_per_flow"] = busy / flows * 1e6  # client, servers, others' work too
    # What a connection costs the benchmark's own processes and the kernel's threads,
    # wherever the kernel charged its work (veth runs a receiver's TCP in the sender's
    # context): client, servers, proxy. Background work of other sessions is not in it.
    result["bench_us_per_flow"] = (ends + user + sys_ + kthreads) / flows * 1e6
    result["proxy_cores"] = (user + sys_) / wall
    result["proxy_waiting_cores"] = (run_queue_wait_s(procs) - wait_before) / wall
    result["machine_idle_pct"] = 100 * (machine_idle_s() - idle_before) / wall / CPUS
    result["load"] = os.getloadavg()[0]
    if result["errors"]:
        print(f"  {system}: {result['errors']} failed flows ({result['first_error']})")
    return result


def connections_per_second(bench: Bench, system: str, seconds: float) -> dict[str, Any]:
    """New connections per second: connect, 1-byte exchange, close (16 clients at once)."""
    return tcpload_flows(bench, system, clients=16, request=1, response=1, seconds=seconds)


BOUND_KEYS = ("proxy_cores", "proxy_waiting_cores", "machine_idle_pct")


def _bound(x: dict[str, Any]) -> str:
    """What bound a run: the proxy's cores used and waited for, the machine's idle share."""
    return (f"proxy {x['proxy_cores']:.2f} cores (+{x['proxy_waiting_cores']:.2f} waiting) "
            f"idle {x['machine_idle_pct']:.0f}%")  # fmt: skip


def short_flows(bench: Bench, system: str, size: int, seconds: float) -> dict[str, Any]:
    return tcpload_flows(
        bench, system, clients=SHORT_CLIENTS, request=SHORT_REQUEST, response=size,
        seconds=seconds,
    )  # fmt: skip


def idle_connections(bench: Bench, system: str, count: int) -> dict[str, Any]:
    """``count`` idle connections through ``system``: RSS per connection, new-connection latency.

    Each connection is checked end to end (a 1-byte exchange) when opened, with up to 3
    attempts (failed attempts are counted, and for the PEP its refusal/abort counters kept).
    The latency of a new connection (connect, 1-byte exchange, close; one client) is
    measured before they are opened and while they are open.
    """
    proc = bench.process(system)
    targets = ",".join(bench.load_targets(system))
    quiet = tcpload_flows(bench, system, clients=1, request=1, response=1, seconds=1.0)
    time.sleep(0.5)
    before = rss_kib(proc) if proc is not None else 0
    holders = []
    started = time.monotonic()
    try:
        for offset in range(0, count, PER_PROCESS):
            n = min(PER_PROCESS, count - offset)
            cmd = [str(TCPLOAD), "idle", "-targets", targets, "-count", str(n)]
            holders.append(bench.lab.popen(bench.lab.client_ns, cmd, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True))  # fmt: skip
        reports = []
        for holder in holders:
            assert holder.stdout is not None
            line = holder.stdout.readline()
            if not line:
                raise RuntimeError(f"{system}: an idle client failed ({holder.wait()})")
            reports.append(json.loads(line))
        opened_s = time.monotonic() - started
        opened = sum(r["open"] for r in reports)
        time.sleep(1.0)
        after = rss_kib(proc) if proc is not None else 0
        busy = tcpload_flows(bench, system, clients=1, request=1, response=1, seconds=2.0)
    finally:
        for holder in holders:
            assert holder.stdin is not None
            holder.stdin.close()
        for holder in holders:
            holder.wait(60)
        settle_s = wait_connections_gone(bench.lab)
    errors = [r["first_error"] for r in reports if r.get("first_error")]
    return {
        "connections": opened,
        "asked": count,
        "failed_attempts": sum(r["failed"] for r in reports),
        "first_error": errors[0] if errors else None,
        "pep_stats": in_netns(bench.lab.pep_ns, _pep_stats) if system in PEP_SETTINGS else None,
        "open_seconds": opened_s,
        "rss_kib_before": before,
        "rss_kib_after": after,
        "kib_per_connection": (after - before) / opened if proc is not None else None,
        "new_connection_ms_quiet": {"p50": quiet["p50_ms"], "p99": quiet["p99_ms"]},
        "new_connection_ms_loaded": {"p50": busy["p50_ms"], "p99": busy["p99_ms"]},
        "settle_s": settle_s,
        "load": os.getloadavg()[0],
    }


def wait_connections_gone(lab: Lab, timeout: float = 120, left: int = 32) -> float:
    """Wait until the lab's namespaces hold at most ``left`` TCP connections (listeners and
    TIME-WAIT not counted); the seconds it took.

    Closing 100,000 idle connections goes on for seconds after their clients exit (the
    proxy and the servers close their ends one by one), and the next system's "before"
    latency measured meanwhile was that teardown's, not the system's: a new connection's
    p99 of 0.5 s through the core right after the Python relay's case, 1 ms five seconds
    later (2026-11-27 02:47 UTC).
    """
    started = time.monotonic()
    count = "ss -Htan state all exclude listening exclude time-wait | wc -l"
    while time.monotonic() - started < timeout:
        open_now = sum(int(lab.sh(ns, count)) for ns in (lab.client_ns, lab.pep_ns, lab.server_ns))
        if open_now <= left:
            return time.monotonic() - started
        time.sleep(0.5)
    raise TimeoutError(f"{open_now} TCP connections still open {timeout:.0f} s after the idle case")


# ---- the run --------------------------------------------------------------------------------


def run(out: Path, seconds: float, rounds: int, idle: int, conn_seconds: float) -> dict[str, Any]:
    load_at_start = os.getloadavg()
    lab = Lab.create("pb")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-bench-")))
    try:
        bench.start()
        results = _measure(bench, seconds, rounds, idle, conn_seconds)
    finally:
        bench.stop()
        lab.down()
    results["environment"] = _environment(seconds, rounds, load_at_start)
    save_results(results, out, "bench", plot, table)
    return results


def _measure(
    bench: Bench, seconds: float, rounds: int, idle: int, conn_seconds: float
) -> dict[str, Any]:
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    turn = 0
    for r in range(rounds):
        for streams in (1, 8):
            for download in (True, False):
                case = f"{'download' if download else 'upload'}_{streams}"
                turn += 1
                for system in _interleaved(turn):
                    bench.use(system)
                    sample = iperf3(bench, system, streams, download, seconds)
                    samples.setdefault(case, {}).setdefault(system, []).append(sample)
                    print(f"round {r + 1}/{rounds} {case:<11} {system:<8} "
                          f"{sample['gbps']:6.2f} Gbit/s  load {sample['load']:.1f}",
                          flush=True)  # fmt: skip
    flow_samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in range(rounds):
        for system in _interleaved(r):
            bench.use(system)
            cases = {"connections": connections_per_second(bench, system, conn_seconds)}
            for name, size in SHORT_FLOWS.items():
                cases[name] = short_flows(bench, system, size, conn_seconds)
            for name, x in cases.items():
                flow_samples.setdefault(name, {}).setdefault(system, []).append(x)
                print(f"round {r + 1}/{rounds} {name:<11} {system:<8} "
                      f"{x['flows_per_s']:8.0f} flows/s  p50 {x['p50_ms']:.2f} ms  "
                      f"p99 {x['p99_ms']:.2f} ms  {_bound(x)}  load {x['load']:.1f}",
                      flush=True)  # fmt: skip
    return {"throughput": _summarize(samples), **_flow_summary(flow_samples),
            "idle_connections": _idle_all(bench, idle)}  # fmt: skip


def _interleaved(turn: int) -> tuple[str, ...]:
    """SYSTEMS, with the PEP's two relays in turns (one PEP restart per turn, not two)."""
    return SYSTEMS if turn % 2 == 0 else ("direct", "core", "pep", "haproxy")


def _idle_all(bench: Bench, count: int) -> dict[str, Any]:
    """The idle case per system; HAProxy (one process) up to its descriptor limit.

    The PEP gets enough relay threads for ``count`` flows: each thread's descriptor table
    holds at most RLIMIT_NOFILE descriptors, two per flow.
    """
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    threads = max(2, -(-2 * count // (limit - 2000)) + 1)  # headroom: REUSEPORT is uneven
    results: dict[str, Any] = {}
    for system in SYSTEMS:
        bench.use(system, PEP_RELAY_THREADS=str(threads))
        n = min(count, HAPROXY_MAXCONN - 100) if system == "haproxy" else count
        results[system] = idle_connections(bench, system, n)
        m = results[system]
        per = m["kib_per_connection"]
        print(f"idle {system:<8} {m['connections']} connections ({m['failed_attempts']} failed "
              f"attempts: {m['first_error']}; PEP {m['pep_stats']}) in {m['open_seconds']:.1f} s, "
              f"{'-' if per is None else f'{per:.2f}'} KiB each, new connection p50/p99 "
              f"{m['new_connection_ms_quiet']['p50']:.2f}/{m['new_connection_ms_quiet']['p99']:.2f}"
              f" ms before, {m['new_connection_ms_loaded']['p50']:.2f}/"
              f"{m['new_connection_ms_loaded']['p99']:.2f} ms while open, closed in "
              f"{m['settle_s']:.1f} s", flush=True)  # fmt: skip
    results["pep_relay_threads"] = threads
    return results


def _flow_summary(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Medians over rounds of flows/s and of the per-round completion p50/p99."""
    summary: dict[str, Any] = {"connections_per_second": {}, "short_flows": {}}
    for case, by_system in samples.items():
        entry: dict[str, Any] = {}
        for system, runs in by_system.items():
            entry[system] = {
                "median": statistics.median(x["flows_per_s"] for x in runs),
                "p50_ms": statistics.median(x["p50_ms"] for x in runs),
                "p99_ms": statistics.median(x["p99_ms"] for x in runs),
                "errors": sum(x["errors"] for x in runs),
                "samples": [round(x["flows_per_s"]) for x in runs],
                "p99_samples": [x["p99_ms"] for x in runs],
                "load": [round(x["load"], 1) for x in runs],
                **{k: statistics.median(x[k] for x in runs) for k in BOUND_KEYS},
            }
        haproxy = entry["haproxy"]["median"]
        for relay in PEP_SETTINGS:
            entry[f"{relay}_vs_haproxy"] = entry[relay]["median"] / haproxy if haproxy else None
        if case == "connections":
            summary["connections_per_second"] = entry
        else:
            summary["short_flows"][case] = entry
    return summary


def _summarize(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for case, by_system in samples.items():
        summary[case] = {system: _medians(runs) for system, runs in by_system.items()}
        direct = summary[case]["direct"]["gbps_median"]
        haproxy = summary[case]["haproxy"]["gbps_median"]
        for relay in PEP_SETTINGS:
            gbps = summary[case][relay]["gbps_median"]
            summary[case][f"{relay}_vs_direct"] = gbps / direct if direct else None
            summary[case][f"{relay}_vs_haproxy"] = gbps / haproxy if haproxy else None
    return summary


def _environment(
    seconds: float, rounds: int, load_at_start: tuple[float, float, float] | None = None
) -> dict[str, Any]:
    """The conditions of a run. The load averages (1/5/15 min) include the benchmark's own
    traffic; whatever else ran on the machine shows as load at the start."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_at_start": load_at_start,
        "loadavg_at_end": os.getloadavg(),
        "iperf_seconds": seconds,
        "rounds": rounds,
        "haproxy": subprocess.run(
            ["haproxy", "-v"], capture_output=True, text=True
        ).stdout.splitlines()[0],
        "pep": "transparent mode, the Python relay (PEP_RELAY_CORE=python), otherwise defaults "
        "(2 relay threads, splice, 16 MiB forced buffers)",
        "core": "the same with PEP_RELAY_CORE=uring (2 C relay threads, one io_uring each)",
    }


def table(results: dict[str, Any]) -> str:
    lines = ["case        " + "".join(f"{s + ' Gb/s':>13}" for s in SYSTEMS)
             + "  pep/direct core/direct  pep/haproxy core/haproxy  CPU-s/Gbit pep core "
             "haproxy"]  # fmt: skip
    for case, r in results["throughput"].items():
        cpu = [r[s]["cpu_s_per_gbit_median"] for s in ("pep", "core", "haproxy")]
        lines.append(
            f"{case:<12}" + "".join(f"{r[s]['gbps_median']:>13.2f}" for s in SYSTEMS)
            + f"{r['pep_vs_direct']:>12.2f}{r['core_vs_direct']:>12.2f}"
            f"{r['pep_vs_haproxy']:>13.2f}{r['core_vs_haproxy']:>13.2f}  "
            + " ".join(f"{c:.3f}" for c in cpu)
        )  # fmt: skip
    rates = results["connections_per_second"]
    lines.append("connections/s (median): " + ", ".join(
        f"{s} {rates[s]['median']:.0f}" for s in SYSTEMS) + f"; pep/haproxy "
        f"{rates['pep_vs_haproxy']:.2f}, core/haproxy {rates['core_vs_haproxy']:.2f}")  # fmt: skip
    for name, r in results["short_flows"].items():
        lines.append(f"short flows {name}: " + ", ".join(
            f"{s} {r[s]['median']:.0f}/s p50 {r[s]['p50_ms']:.2f} p99 {r[s]['p99_ms']:.2f} ms"
            for s in SYSTEMS))  # fmt: skip
    idle = results["idle_connections"]
    for system in SYSTEMS:
        m = idle[system]
        per = m["kib_per_connection"]
        lines.append(
            f"idle {system}: {m['connections']} connections, "
            f"{'-' if per is None else f'{per:.2f} KiB each'}, new connection p99 "
            f"{m['new_connection_ms_quiet']['p99']:.2f} ms -> "
            f"{m['new_connection_ms_loaded']['p99']:.2f} ms while open"
        )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    fig, axes = plt.subplots(
        1, 5, figsize=(21, 4.2), gridspec_kw={"width_ratios": [3, 3, 1.4, 1.8, 1.4]}
    )
    cases = list(results["throughput"])
    colors = {"direct": "#888888", "pep": "#1f77b4", "core": "#2ca02c", "haproxy": "#ff7f0e"}
    width = 0.2
    middle = (len(SYSTEMS) - 1) / 2
    for i, system in enumerate(SYSTEMS):
        xs = [c + (i - middle) * width for c in range(len(cases))]
        ys = [results["throughput"][c][system]["gbps_median"] for c in cases]
        axes[0].bar(xs, ys, width, label=system, color=colors[system])
    axes[0].set_xticks(range(len(cases)), [c.replace("_", "\n") + " str." for c in cases])
    axes[0].set_ylabel("Gbit/s (median)")
    axes[0].set_title("iperf3 throughput")
    axes[0].legend()
    for i, system in enumerate(("pep", "core", "haproxy")):
        xs = [c + (i - 1) * width for c in range(len(cases))]
        ys = [results["throughput"][c][system]["cpu_s_per_gbit_median"] or 0 for c in cases]
        axes[1].bar(xs, ys, width, label=system, color=colors[system])
    axes[1].set_xticks(range(len(cases)), [c.replace("_", "\n") + " str." for c in cases])
    axes[1].set_ylabel("process CPU-seconds per Gbit")
    axes[1].set_title("proxy CPU cost")
    axes[1].legend()
    rates = results["connections_per_second"]
    axes[2].bar(SYSTEMS, [rates[s]["median"] for s in SYSTEMS], color=[colors[s] for s in SYSTEMS])
    axes[2].set_title("connections/s")
    short = results["short_flows"]
    for i, system in enumerate(SYSTEMS):
        xs = [c + (i - middle) * width for c in range(len(short))]
        axes[3].bar(xs, [short[c][system]["p99_ms"] for c in short], width, label=system,
                    color=colors[system])  # fmt: skip
    axes[3].set_xticks(range(len(short)), list(short))
    axes[3].set_title(f"short flows, {SHORT_CLIENTS} clients: p99 ms")
    idle = results["idle_connections"]
    kinds = [s for s in ("pep", "core", "haproxy") if idle[s]["kib_per_connection"] is not None]
    axes[4].bar(kinds, [idle[s]["kib_per_connection"] for s in kinds],
                color=[colors[s] for s in kinds])  # fmt: skip
    axes[4].set_title("KiB per idle connection\n" + ", ".join(
        f"{s} {idle[s]['connections']:,}" for s in kinds))  # fmt: skip
    fig.suptitle("PEP (pep: Python relay, core: compiled) vs direct vs HAProxy — "
                 f"{results['environment']['date']}, "
                 f"{results['environment']['cpus']} CPUs, load at end "
                 f"{results['environment']['loadavg_at_end'][0]:.1f}")  # fmt: skip
    save_figure(fig, path)


def compare(variants: dict[str, dict[str, str]], cases: list[str], rounds: int,
            seconds: float, out: Path, *,
            floors: dict[str, tuple[str, ...]] | None = None) -> dict[str, Any]:  # fmt: skip
    """A/B: PEP settings variants, HAProxy, direct routing and ``relay-floor`` variants
    (name -> options) on the same topology, interleaved round by round."""
    floors = floors or {}
    lab = Lab.create("pa")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-ab-")))
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    failures: list[dict[str, Any]] = []
    names = [*variants, "haproxy", "direct", *floors]
    try:
        bench.start()
        for r in range(rounds):
            for name in names:
                system = name if name in ("haproxy", "direct") else (
                    "floor" if name in floors else "pep")  # fmt: skip
                if name in floors:
                    bench.start_floor(floors[name])
                elif system == "pep":
                    bench.restart_pep(variants[name])
                for case in cases:
                    direction, streams = case.split("_")
                    try:
                        sample = iperf3(bench, system, int(streams), direction == "download",
                                        seconds)  # fmt: skip
                    except RuntimeError as exc:  # counted, not hidden: the round goes on
                        failures.append({"round": r + 1, "case": case, "name": name,
                                         "error": str(exc)})  # fmt: skip
                        print(f"round {r + 1}/{rounds} {case:<11} {name:<12} failed: {exc}")
                        continue
                    samples.setdefault(case, {}).setdefault(name, []).append(sample)
                    print(f"round {r + 1}/{rounds} {case:<11} {name:<12} "
                          f"{sample['gbps']:6.2f} Gbit/s machine "
                          f"{sample['machine_cpu_s_per_gbit']:.3f} CPU-s/Gbit, softirq "
                          f"{sample['softirq_s_per_gbit']:.3f}, load {sample['load']:.1f}",
                          flush=True)  # fmt: skip
                if name in floors:
                    bench.stop_floor()
                    bench.restart_pep(next(iter(variants.values()), {}))
    finally:
        bench.stop()
        lab.down()
    summary = {
        case: {name: _medians(runs) for name, runs in by_name.items()}
        for case, by_name in samples.items()
    }
    results = _save_ab(out / "compare.json", variants, summary, seconds, rounds,
                       floors=floors, samples=samples, failures=failures)  # fmt: skip
    for case, by_name in summary.items():
        print(case, ", ".join(f"{n} {v['gbps_median']:.2f} Gbit/s (machine "
                              f"{v['machine_cpu_s_per_gbit_median']:.3f} CPU-s/Gbit)"
                              for n, v in by_name.items()))  # fmt: skip
    return results


def compare_flows(
    variants: dict[str, dict[str, str]], rounds: int, seconds: float, out: Path, *,
    floors: dict[str, tuple[str, ...]], haproxy_pinned: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Per-connection cost: PEP variants, HAProxy (also with its threads pinned, as
    ``haproxy-pinned``) and ``relay-floor`` variants (name -> options), interleaved rounds.
    A PEP variant with ``VIA=socks5`` is measured through its SOCKS5 port.

    Per case: flows/s, completion p50/p99, and the proxy process's user and system CPU
    per flow; the medians over rounds, every sample with the machine's load.
    """
    lab = Lab.create("pf")
    bench = Bench(lab, Path(tempfile.mkdtemp(prefix="pep-flows-")))
    names = ["direct", *variants, "haproxy", *(["haproxy-pinned"] if haproxy_pinned else []),
             *floors]  # fmt: skip
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    try:
        bench.start()
        for r in range(rounds):
            for name in names:
                system = name if name in ("direct", "haproxy") else (
                    "floor" if name in floors else "haproxy" if name == "haproxy-pinned"
                    else "pep")  # fmt: skip
                if name in floors:
                    bench.start_floor(floors[name])
                elif name == "haproxy-pinned":
                    bench.restart_haproxy(pinned=True)
                elif name not in ("direct", "haproxy"):
                    bench.restart_pep(variants[name])
                via = variants.get(name, {}).get("VIA") if system == "pep" else None
                socks5 = f"{lab.pep_client_side_ip}:{SOCKS5_PORT}" if via == "socks5" else None
                for case, (clients, request, response) in FLOW_CASES.items():
                    x = tcpload_flows(bench, system, clients=clients, request=request,
                                      response=response, seconds=seconds,
                                      socks5=socks5)  # fmt: skip
                    samples.setdefault(case, {}).setdefault(name, []).append(x)
                    print(f"round {r + 1}/{rounds} {case:<11} {name:<10} "
                          f"{x['flows_per_s']:7.0f}/s p50 {x['p50_ms']:6.2f} "
                          f"p99 {x['p99_ms']:7.2f} ms user {x['user_us_per_flow']:5.1f} "
                          f"sys {x['sys_us_per_flow']:5.1f} kthreads "
                          f"{x['kthreads_us_per_flow']:5.1f} machine "
                          f"{x['machine_us_per_flow']:5.1f} bench "
                          f"{x['bench_us_per_flow']:5.1f} us/flow {_bound(x)} "
                          f"load {x['load']:.1f}", flush=True)  # fmt: skip
                if name == "haproxy-pinned":
                    bench.restart_haproxy(pinned=False)
                if name in floors:
                    bench.stop_floor()
                    bench.restart_pep(next(iter(variants.values()), {}))
    finally:
        bench.stop()
        lab.down()  # with the namespace go the rules of a relay-floor run
    keys = ("flows_per_s", "p50_ms", "p99_ms", "user_us_per_flow", "sys_us_per_flow",
            "cpu_us_per_flow", "kthreads_us_per_flow", "machine_us_per_flow", "bench_us_per_flow",
            *BOUND_KEYS)  # fmt: skip
    summary = {
        case: {
            name: {
                **{k: statistics.median(x[k] for x in runs) for k in keys},
                "flows_per_s_samples": [round(x["flows_per_s"]) for x in runs],
                "load": [round(x["load"], 1) for x in runs],
            }
            for name, runs in by_name.items()
        }
        for case, by_name in samples.items()
    }
    results = _save_ab(out / "compare-flows.json", variants, summary, seconds, rounds,
                       floors=floors, samples=samples)  # fmt: skip
    for case, by_name in summary.items():
        hap = by_name["haproxy"]["flows_per_s"]
        print(case, ", ".join(
            f"{n} {v['flows_per_s']:.0f}/s ({v['flows_per_s'] / hap:.2f}x haproxy, "
            f"p99 {v['p99_ms']:.1f} ms, {v['user_us_per_flow'] + v['sys_us_per_flow']:.0f} us "
            f"CPU, +{v['kthreads_us_per_flow']:.0f} kernel threads, "
            f"machine {v['machine_us_per_flow']:.0f}, bench {v['bench_us_per_flow']:.0f})"
            for n, v in by_name.items()))  # fmt: skip
    return results


def _save_ab(
    path: Path, variants: dict[str, dict[str, str]], summary: dict[str, Any], seconds: float,
    rounds: int, **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    results = {"variants": variants, **extra, "summary": summary,
               "environment": _environment(seconds, rounds)}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return results


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    proxy = [x["cpu_s_per_gbit"] for x in runs if x["cpu_s_per_gbit"] is not None]
    return {
        "gbps_median": statistics.median(x["gbps"] for x in runs),
        "gbps_samples": [round(x["gbps"], 3) for x in runs],
        "cpu_s_per_gbit_median": statistics.median(proxy) if proxy else None,
        **{
            f"{k}_median": statistics.median(x[k] for x in runs)
            for k in ("machine_cpu_s_per_gbit", "softirq_s_per_gbit", "kthreads_s_per_gbit")
        },
        **{  # recorded where available (iperf3's report, perf)
            f"{k}_median": statistics.median(values)
            for k in ("sender_cpu_pct", "receiver_cpu_pct", *PERF_KEYS)
            if (values := [x[k] for x in runs if x.get(k) is not None])
        },
        "load": [round(x["load"], 1) for x in runs],
    }


def _variant(text: str) -> tuple[str, dict[str, str]]:
    """NAME or NAME:PEP_X=1,PEP_Y=2"""
    name, _, assignments = text.partition(":")
    pairs = [a.split("=", 1) for a in assignments.split(",") if a]
    return name, {k: v for k, v in pairs}


def _floors(specs: list[str]) -> dict[str, tuple[str, ...]]:
    """--floor NAME[:OPTION,...] arguments -> name: relay-floor options."""
    return {name: tuple(o for o in opts.split(",") if o)
            for name, _, opts in (f.partition(":") for f in specs)}  # fmt: skip


FLOOR_HELP = "also build/bin/relay-floor with these options (uring: relay-floor-uring); repeat"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.bench",
        description="Benchmark the PEP against direct routing and HAProxy (needs root).",
    )
    sub = parser.add_subparsers(dest="command")
    echo = sub.add_parser("echo", help="run an echo server (helper)")
    echo.add_argument("host")
    echo.add_argument("port", type=int)
    ab = sub.add_parser("compare", help="A/B of PEP settings against each other and HAProxy")
    variant_help = "NAME[:PEP_SETTING=VALUE,...]; NAME alone: the PEP's defaults (relay: auto)"
    ab.add_argument("variants", nargs="+", help=variant_help)
    ab.add_argument("--cases", default="download_8,upload_8", help="DIRECTION_STREAMS,...")
    ab.add_argument("--rounds", type=int, default=4)
    ab.add_argument("--seconds", type=float, default=3.0)
    ab.add_argument("--out", type=Path, default=Path("docs/results/pep"))
    ab.add_argument("--floor", action="append", default=[], metavar="NAME[:OPTION,...]",
                    help=FLOOR_HELP)  # fmt: skip
    flows = sub.add_parser(
        "compare-flows", help="A/B of per-connection cost (conn/s, short flows, CPU per flow)"
    )
    flows.add_argument("variants", nargs="*", help=variant_help)
    flows.add_argument("--rounds", type=int, default=3)
    flows.add_argument("--seconds", type=float, default=3.0)
    flows.add_argument("--floor", action="append", default=[], metavar="NAME[:OPTION,...]",
                       help=FLOOR_HELP)  # fmt: skip
    flows.add_argument("--haproxy-pinned", action="store_true",
                       help="also HAProxy with one thread per CPU, pinned (cpu-map)")  # fmt: skip
    flows.add_argument("--out", type=Path, default=Path("docs/results/pep"))
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep"), help="output dir")
    parser.add_argument("--seconds", type=float, default=4.0, help="per iperf3 run")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are reported)")
    parser.add_argument("--idle", type=int, default=100_000, help="idle connections to hold")
    parser.add_argument("--conn-seconds", type=float, default=3.0,
                        help="per connections/s and short-flow run")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "echo":
        echo_server(args.host, args.port)
    elif args.command == "compare-flows":
        variants = dict(_variant(v) for v in args.variants)
        compare_flows(variants, args.rounds, args.seconds, args.out, floors=_floors(args.floor),
                      haproxy_pinned=args.haproxy_pinned)  # fmt: skip
    elif args.command == "compare":
        variants = dict(_variant(v) for v in args.variants)
        compare(
            variants,
            args.cases.split(","),
            args.rounds,
            args.seconds,
            args.out,
            floors=_floors(args.floor),
        )
    else:
        run(args.out, args.seconds, args.rounds, args.idle, args.conn_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
