"""The whole RAN-aware chain on the emulated testbed, for the MELD and RAPID experiments.

    RAN emulator ─FlexRAN API→ rnis-adapter ─AMQP→ RabbitMQ ─→ PEP (MEC namespace) ─BPF maps→ kernel

``RanAwareBed`` brings up a testbed topology from a scenario file, a content server (one
port per server congestion control), the RNIS adapter (root namespace, polling the
emulator every 8 ms like the thesis's MELD), and the PEP in the MEC namespace with the
MELD/RAPID extension, intercepting some ports (TPROXY) and leaving others end to end.

The testbed's management link reaches the root namespace, but RabbitMQ's ``guest`` user
only logs in over loopback; the bed therefore relays the PEP's AMQP connection from the
MEC namespace's loopback to the broker's (``_AmqpRelay``) instead of adding users to the
shared broker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from mec_common.ports import free_port
from mts_lab import REPO, traffic
from mts_lab.line import in_netns
from mts_lab.results import pyplot

if TYPE_CHECKING:
    from mts_testbed.topology import Topology

BROKER = ("127.0.0.1", 5672)
API = "http://127.0.0.1:8102"
TOKEN = "bed"  # noqa: S105 - the API token of a throwaway PEP on a loopback address


# ---- AMQP from the MEC namespace to the broker -------------------------------------------------


# The radio feed's path on the MEC host (the RNIS adapter, the PEP that writes the kernel's
# maps and relays the data) at the emulator's niceness (mts_testbed.builder): on this shared
# 2-core machine, at load 15-20, the other sessions' builds and tests delayed the feed by
# 50 ms to over 1 s at nice 0 (stale MELD verdicts; docs/results.md, MELD discrimination).
# A deployment gives these processes their own CPU; every mode of a run shares the setting.
FEED_NICE = ("nice", "-n", "-10")


class _AmqpRelay:
    """TCP relay: 127.0.0.1:5672 inside a namespace → the broker on the root's loopback."""

    def __init__(self, netns: str) -> None:
        self.listener = in_netns(netns, lambda: socket.create_server(("127.0.0.1", BROKER[1])))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inner, _ = self.listener.accept()
            except OSError:
                return
            try:
                outer = socket.create_connection(BROKER, timeout=5)
            except OSError:
                inner.close()
                continue
            outer.settimeout(None)
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


# ---- the bed -------------------------------------------------------------------------------------


@dataclass
class Download:
    proc: subprocess.Popen[str]
    started: float  # Unix time at the UE
    size: int


@dataclass
class BedConfig:
    scenario: Path
    servers: dict[int, str]  # port -> server congestion control
    intercepted: list[int]  # ports the PEP splits (the others go end to end)
    ran_cca: str = "cubic"  # PEP_MELD_CCA
    mode: str = "off"  # PEP_MELD_MODE at start
    poll_period: str = "8ms"
    pep_env: dict[str, str] = field(default_factory=dict)


class RanAwareBed:
    def __init__(self, config: BedConfig, workdir: Path, *, quiet: bool = True) -> None:
        from mts_testbed import builder

        self.config = config
        self.workdir = workdir
        self.name = f"rb{secrets.token_hex(2)}"
        self.exchange = f"rnis-{self.name}"
        self.procs: list[subprocess.Popen[Any]] = []
        self.relay: _AmqpRelay | None = None
        log = (lambda *a, **k: None) if quiet else print
        self.topo: Topology = builder.up(config.scenario, self.name, log=log)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- addresses
    @property
    def ue_ip(self) -> str:
        return self.topo.ue(1).paths[0].ip

    @property
    def server_ip(self) -> str:
        return self.topo.server.addresses["wan0"]

    # -- processes
    def _start(self) -> None:
        topo, cfg = self.topo, self.config
        # Every sender picks its congestion control per socket (the server per port, the PEP
        # per RAN leg): a namespace's default may not be settable (only the "allowed" ones).
        server = topo.popen(
            topo.server.ns,
            *traffic.command("serve", *(f"{p}:{c}" for p, c in cfg.servers.items())),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.procs.append(server)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        self._start_adapter()
        self.relay = _AmqpRelay(topo.mec.ns)
        self._start_pep()

    def _start_adapter(self) -> None:
        emu = self.topo.emulator
        port = free_port()
        self.adapter_url = f"http://127.0.0.1:{port}"
        self.adapter_token = secrets.token_hex(8)
        env = {
            **os.environ,
            "RNIS_FLEXRAN_URL": emu.url,
            "RNIS_FLEXRAN_TOKEN": emu.token,
            "RNIS_AMQP_URL": f"amqp://guest:guest@{BROKER[0]}:{BROKER[1]}/%2F",
            "RNIS_AMQP_EXCHANGE": self.exchange,
            "RNIS_HTTP_HOST": "127.0.0.1",
            "RNIS_HTTP_PORT": str(port),
            "RNIS_API_TOKENS": self.adapter_token,
            "RNIS_POLL_PERIOD": self.config.poll_period,
            "RNIS_LOG_LEVEL": "WARNING",
        }
        log = (self.workdir / f"{self.name}-rnis-adapter.log").open("wb")
        self.procs.append(subprocess.Popen(
            [*FEED_NICE, str(REPO / "build/bin/rnis-adapter"), "serve"], env=env, stdout=log,
            stderr=subprocess.STDOUT,
        ))  # fmt: skip

    def _start_pep(self) -> None:
        topo, cfg = self.topo, self.config
        env = {
            **os.environ,
            "PEP_API_TOKENS": TOKEN,
            "PEP_HTTP_HOST": "127.0.0.1",
            "PEP_STATE_DIR": str(self.workdir),
            "PEP_TRANSPARENT_PORT": "5999",
            "PEP_TPROXY_PORTS": ",".join(map(str, cfg.intercepted)),
            "PEP_ALLOWED_CLIENTS": "10.30.0.0/16",
            "PEP_ALLOWED_DESTINATIONS": f"{self.server_ip}/32",
            "PEP_BACKLOG_INTERVAL_MS": "0",
            "PEP_RAN_AWARE": "true",
            "PEP_MELD_INSTANCE": self.name,
            "PEP_MELD_CCA": cfg.ran_cca,
            "PEP_MELD_MODE": cfg.mode,
            "PEP_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{BROKER[1]}/%2F",
            "PEP_RNIS_EXCHANGE": self.exchange,
            "PEP_RNIS_UE_NETWORKS": ",".join(f"{p.ip}/32" for u in topo.ues for p in u.paths),
            "PEP_LOG_LEVEL": "WARNING",
            **cfg.pep_env,
        }
        log = (self.workdir / f"{self.name}-pep.log").open("wb")
        pep = topo.popen(topo.mec.ns, *FEED_NICE, sys.executable, "-m", "mec_pep", "serve",
                         env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(pep)
        self.pep_pid = pep.pid  # `ip netns exec` execs the PEP: this is its pid
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if self.api("GET", "/pep/v1/ran_aware/state").status_code == 200:
                    break
            if time.monotonic() > deadline or pep.poll() is not None:
                raise RuntimeError(f"the PEP did not start: {self.pep_log()}")
            time.sleep(0.3)

    def adapter_metrics(self) -> dict[str, float]:
        """The adapter's counters that time the feed's first hops (Prometheus text): polls
        of the RAN, their latency, the broker's publish confirms and their latency."""
        r = httpx.get(self.adapter_url + "/metrics", timeout=10,
                      headers={"Authorization": f"Bearer {self.adapter_token}"})  # fmt: skip
        r.raise_for_status()
        wanted = ("rnis_polls_total", "rnis_poll_latency_seconds", "rnis_amqp_confirm_latency")
        out: dict[str, float] = {}
        for line in r.text.splitlines():
            if line.startswith(wanted):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def pep_log(self) -> str:
        return (self.workdir / f"{self.name}-pep.log").read_text(errors="replace")[-3000:]

    # -- the PEP's API
    def api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return in_netns(self.topo.mec.ns, lambda: httpx.request(
            method, API + path, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10, **kw,
        ))  # fmt: skip

    def set_mode(self, mode: str) -> None:
        r = self.api("PUT", "/pep/v1/ran_aware/mode", json={"mode": mode})
        r.raise_for_status()

    def ue_state(self) -> dict[str, Any]:
        r = self.api("GET", f"/pep/v1/ran_aware/ues/{self.ue_ip}")
        r.raise_for_status()
        return dict(r.json())

    def wait_for_radio(self, timeout: float = 30.0) -> dict[str, Any]:
        """Until the PEP has fresh radio state for the UE (the feed is flowing)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            radio = self.ue_state()["radio"]
            if radio is not None and not radio["stale"]:
                return dict(radio)
            time.sleep(0.2)
        raise RuntimeError(f"no fresh radio state for {self.ue_ip}: {self.pep_log()}")

    @contextlib.contextmanager
    def radio_ages(self, period: float = 0.2) -> Iterator[list[float]]:
        """Sample the age of the UE's radio state in the kernel meanwhile (ms): a loaded
        machine delays the feed, and MELD/RAPID fall back to the growth function on
        state older than the staleness bound."""
        ages: list[float] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(period):
                radio = self.ue_state()["radio"]
                if radio is not None and radio["age_ms"] is not None:
                    ages.append(radio["age_ms"])

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            yield ages
        finally:
            done.set()
            watcher.join()

    def ran_legs(self, period: float = 0.02) -> contextlib.AbstractContextManager[Sockets]:
        """The PEP's RAN-leg sockets toward the UE meanwhile (``senders``): per PEP-side
        port (the server port it stands in for). What the kernel's window did between two
        loss decisions."""
        return self.senders(self.topo.mec.ns, period)

    @contextlib.contextmanager
    def senders(self, ns: str, period: float = 0.02) -> Iterator[Sockets]:
        """Sample the sockets toward the UE in namespace ``ns`` meanwhile (``ss -tin`` every
        ``period`` s; the PEP's RAN legs, or a server's end-to-end sockets): per local port,
        samples of cwnd and ssthresh (segments), srtt and min RTT (ms), BBR's bandwidth
        (Mbit/s) and min RTT (ms) for a BBR socket, and the time (Unix s)."""
        samples: Sockets = {}
        sample = f'echo "# $(date +%s.%N)"; ss -tinH dst {self.ue_ip}'
        # into a file: a pipe nobody reads meanwhile would stop the loop once it is full
        with tempfile.TemporaryFile("w+") as out:
            proc = self.topo.popen(ns, "sh", "-c",
                                   f"while :; do {sample}; sleep {period}; done",
                                   stdout=out, text=True)  # fmt: skip
            try:
                yield samples
            finally:
                proc.terminate()
                proc.wait(10)
                out.seek(0)
                samples.update(parse_senders(out.read()))

    # -- traffic
    def fetch(self, port: int, size: int) -> Download:
        """Start a download of ``size`` bytes from the server at the UE (mts_lab.traffic)."""
        proc = self.topo.popen(
            self.topo.ue(1).ns, *traffic.command("fetch", self.server_ip, str(port), str(size)),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())["started"]
        return Download(proc, float(started), size)

    @staticmethod
    def result(download: Download, timeout: float = 900) -> dict[str, Any]:
        """Wait for a download: ``fct_s``, ``bytes``, ``timeline`` [(s, bytes)], ``started``."""
        out, _ = download.proc.communicate(timeout=timeout)
        if download.proc.returncode != 0:
            raise RuntimeError("download failed")
        result = dict(json.loads(out))
        if result["bytes"] != download.size:
            raise RuntimeError(f"got {result['bytes']} of {download.size} bytes")
        result["started"] = download.started
        return result

    @contextlib.contextmanager
    def ping(self, interval: float = 0.1) -> Iterator[list[tuple[float, float]]]:
        """Ping the server from the UE meanwhile; yields the (time s, RTT ms) list it fills."""
        samples: list[tuple[float, float]] = []
        proc = self.topo.popen(self.topo.ue(1).ns, "ping", "-D", "-n", "-i", str(interval),
                               self.server_ip, stdout=subprocess.PIPE, text=True)  # fmt: skip
        start = time.time()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if "time=" in line and line.startswith("["):
                    stamp = float(line[1 : line.index("]")])
                    rtt = float(line.split("time=")[1].split()[0])
                    samples.append((round(stamp - start, 3), rtt))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            yield samples
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(5)
            reader.join(5)

    def udp(
        self, port: int, rate_bps: float, seconds: float, size: int = 1250
    ) -> tuple[subprocess.Popen[str], subprocess.Popen[str]]:
        """A CBR UDP stream server → UE (mts_lab.traffic); returns (sink, sender)."""
        pps = rate_bps / 8 / size
        count = int(pps * seconds)
        sink = self.topo.popen(
            self.topo.ue(1).ns, sys.executable, "-m", "mts_lab.traffic", "sink",
            self.ue_ip, str(port), "--count", str(count), "--timeout", "3",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert sink.stderr is not None and sink.stderr.readline().strip() == "ready"
        sender = self.topo.popen(
            self.topo.server.ns, sys.executable, "-m", "mts_lab.traffic", "send",
            self.ue_ip, str(port), "--rate", str(pps), "--count", str(count),
            "--size", str(size), text=True,
        )  # fmt: skip
        return sink, sender

    def close(self) -> None:
        from mts_testbed import builder
        from mts_testbed.netns import stop_processes

        stop_processes(self.procs)
        if self.relay is not None:
            self.relay.close()
        builder.down(self.name, log=lambda *a, **k: None)


_SS_SOCKET = re.compile(r"^\S+\s+\d+\s+\d+\s+\S+:(\d+)\s")
_SS_FIELDS = {  # what `ss -ti` prints for a TCP socket -> our key
    "cwnd": re.compile(r"\bcwnd:(\d+)"),
    "ssthresh": re.compile(r"\bssthresh:(\d+)"),
    "srtt_ms": re.compile(r"\brtt:([\d.]+)/"),
    "minrtt_ms": re.compile(r"\bminrtt:([\d.]+)"),
    "bbr_mrtt_ms": re.compile(r"\bbbr:\(.*?\bmrtt:([\d.]+)"),
}
_SS_BBR_BW = re.compile(r"\bbbr:\(bw:([\d.]+)([KMG]?)bps")  # ss scales the unit
_UNIT_MBPS = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}
Sockets = dict[int, list[dict[str, float]]]  # local port -> samples of its socket


def parse_senders(text: str) -> Sockets:
    """``# <unix time>`` lines, each followed by ``ss -tinH`` of the sockets: per local
    port, one sample per time with the fields of _SS_FIELDS (absent ones left out)."""
    out: Sockets = {}
    t, port = None, None
    for line in text.splitlines():
        if line.startswith("# "):
            t = float(line[2:])
        elif m := _SS_SOCKET.match(line):
            port = int(m.group(1))
        elif t is not None and port is not None and "cwnd:" in line:
            sample = {"t": t}
            for key, pattern in _SS_FIELDS.items():
                if f := pattern.search(line):
                    sample[key] = float(f.group(1))
            if bw := _SS_BBR_BW.search(line):
                sample["bbr_bw_mbps"] = float(bw.group(1)) * _UNIT_MBPS[bw.group(2)]
            out.setdefault(port, []).append(sample)
            port = None
    return out


# ---- the experiments' loop ---------------------------------------------------------------------


@contextlib.contextmanager
def running_bed(config: BedConfig, workdir: Path) -> Iterator[RanAwareBed]:
    """A bed whose radio state already reaches the PEP; taken down on exit."""
    bed = RanAwareBed(config, workdir)
    try:
        bed.wait_for_radio()
        yield bed
    finally:
        bed.close()


def alternating(runs: int, arms: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(run, arm) for each run and each arm (a mode, a variant), the arms' order rotated by
    one every run, so that drift in the machine's load hits every arm alike."""
    for run in range(runs):
        k = run % len(arms)
        for arm in [*arms[k:], *arms[:k]]:
            yield run, arm


def modes_main(
    doc: str,
    run: Callable[..., Any],
    *,
    out: Path,
    runs: int,
    size: int,
    modes: Sequence[str],
    resummarize: Callable[[Path], None] | None = None,
    scenario: Path | None = None,
) -> None:
    """The command line of an experiment over congestion controls and modes (``--out``,
    ``--runs``, ``--size``, ``--ccas``, ``--modes``), which calls ``run`` with them; with
    ``resummarize``, ``--summarize`` redoes only the summary and plot of the saved runs in
    OUT; with ``scenario`` (the default), ``--scenario`` passes another to ``run``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--runs", type=int, default=runs)
    parser.add_argument("--size", type=int, default=size, help="bytes per download")
    parser.add_argument("--ccas", default="reno,cubic")
    parser.add_argument("--modes", default=",".join(modes))
    if resummarize is not None:
        parser.add_argument(
            "--summarize", action="store_true", help="only redo the summary and plot of OUT's runs"
        )
    if scenario is not None:
        parser.add_argument("--scenario", type=Path, default=scenario, help="testbed scenario")
    args = parser.parse_args()
    if resummarize is not None and args.summarize:
        resummarize(args.out)
        return
    given = {"scenario": args.scenario.resolve()} if scenario is not None else {}
    run(args.ccas.split(","), args.modes.split(","), args.runs, args.size, args.out, **given)


def figure_per_cca(
    results: dict[str, Any], columns: int, size: tuple[float, float]
) -> tuple[Any, list[tuple[Any, str, dict[str, Any]]]]:
    """A figure with a row of ``columns`` axes per congestion control of an experiment's
    results (``size``: width, height of a row): the figure and (axes, CCA, its summary) per
    row."""
    ccas = list(results["summary"])
    fig, axes = pyplot().subplots(
        len(ccas), columns, figsize=(size[0], size[1] * len(ccas)), squeeze=False
    )
    return fig, [(row, cca, results["summary"][cca]) for row, cca in zip(axes, ccas, strict=True)]


# ---- statistics shared by the experiments ------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of its 95 % confidence interval (Student's t)."""
    from scipy import stats

    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan")
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, float(half)


def environment() -> dict[str, Any]:
    """Where and when: results on a shared machine need the load next to them."""
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": os.uname().release,
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
    }
