"""Path manager on the emulated RAN: Table 7.2 scaled 1/10 (``make experiment-pathmgr``).

One UE on four cells (``testbed/configs/multipath-4path.yaml``: LoS/NLoS Markov chains,
90/10 Mbit/s, mean dwell 3 s/2.5 s). The RNIS adapter polls the emulator and feeds the path
manager; the path manager switches the subflows of an MPTCP connection from the MEC host to
the UE. The sender in the MEC namespace stands in for the PEP's RAN leg (the PEP's RAN leg is
not MPTCP yet): it offers 100 Mbit/s (Table 7.2: 1 Gbit/s) in 1500-byte records stamped at
enqueue, and publishes its backlog (its own queue + the MPTCP socket's unsent bytes) on the
PEP's backlog contract every 2 ms. The receiver in the UE namespace measures each record's
delay from enqueue to arrival (one host, one clock).

Scaling: rates 1/10; thresholds with the rate so that crossing times stay those of the
thesis (Q_HT 50 packets, Q_LT 25 for CDF, 1 for FPT and reactive); times unscaled (150/200 ms,
T_R 50 ms). The path change delay is the real one of MPTCP (netlink + MP_PRIO), not 20 ms.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mec_common.amqp import AmqpPublisher
from mec_common.health import Health
from mts_testbed.topology import Topology
from path_manager.control import Mode
from path_manager.mptcp import in_netns
from path_manager.service import PathManager, PmSettings

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
RECORD = 1500
IPPROTO_MPTCP = 262
SIOCOUTQ, SIOCOUTQNSD = 0x5411, 0x894B  # unacked bytes; bytes not sent yet
ROOT = Path(__file__).resolve().parents[3]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Testbed:
    """``testbed up`` with the 4-path scenario, MPTCP set up on both ends, RNIS adapter."""

    def __init__(self, exchange: str, scenario: Path) -> None:
        self.name = "pmx" + uuid.uuid4().hex[:6]
        sh(str(ROOT / ".venv/bin/testbed"), "up", "--config", str(scenario), "--name", self.name)
        self.topology = Topology.load(self.name)
        self.ue = self.topology.ues[0]
        self.mec = self.topology.mec.ns
        sh("ip", "netns", "exec", self.mec, "sysctl", "-q", "net.mptcp.pm_type=1")
        sh("ip", "netns", "exec", self.ue.ns, "ip", "mptcp", "limits", "set", "subflows", "4",
           "add_addr_accepted", "4")  # fmt: skip
        for p in self.ue.paths[1:]:
            sh("ip", "netns", "exec", self.ue.ns, "ip", "mptcp", "endpoint", "add", p.ip,
               "dev", p.ifname, "subflow")  # fmt: skip
        # The emulator reports each UE address itself (ueIpv4 extension): no IP map needed.
        env = dict(os.environ, RNIS_FLEXRAN_URL=self.topology.emulator.url,
                   RNIS_FLEXRAN_TOKEN=self.topology.emulator.token, RNIS_AMQP_URL=AMQP_URL,
                   RNIS_AMQP_EXCHANGE=exchange,
                   RNIS_HTTP_HOST="127.0.0.1", RNIS_HTTP_PORT=str(_free_port()),
                   RNIS_API_TOKENS=uuid.uuid4().hex, RNIS_POLL_PERIOD="5ms",
                   RNIS_LOG_LEVEL="INFO")  # fmt: skip
        self.adapter_log = Path(tempfile.gettempdir()) / f"{self.name}-rnis-adapter.log"
        with self.adapter_log.open("w") as log_file:
            self.adapter = subprocess.Popen(
                [str(ROOT / "build/bin/rnis-adapter"), "serve"], env=env,
                stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def close(self) -> None:
        self.adapter.terminate()
        self.adapter.wait(10)
        sh(str(ROOT / ".venv/bin/testbed"), "down", "--name", self.name, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Transfer:
    """Paced sender (MEC) → receiver (UE) over MPTCP, with backlog samples and delays."""

    def __init__(self, tb: Testbed, rate_bps: float, publisher: AmqpPublisher) -> None:
        self.rate = rate_bps / (8 * RECORD)  # records/s
        self.publisher = publisher
        self.ue_ip = tb.ue.paths[0].ip
        with in_netns(tb.mec):
            self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        self.listener.bind(("10.20.0.1", 0))
        self.listener.listen()
        with in_netns(tb.ue.ns):
            self.client = socket.socket(socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
        self.client.bind((self.ue_ip, 0))
        self.client.connect(("10.20.0.1", self.listener.getsockname()[1]))
        self.conn, _ = self.listener.accept()
        self.conn.setblocking(False)
        self.stop = threading.Event()
        self.queue_samples: list[tuple[float, float]] = []  # (t, packets)
        self.delays: list[tuple[float, float]] = []  # (arrival t, delay s)
        self.t0 = time.monotonic()

    def run(self, seconds: float) -> None:
        receiver = threading.Thread(target=self._receive, daemon=True)
        receiver.start()
        self._send(seconds)
        self.stop.set()
        receiver.join(5)

    def _send(self, seconds: float) -> None:
        pending: collections.deque[memoryview] = collections.deque()
        queued = 0  # bytes in the app queue
        generated, next_report = 0, 0.0
        pad = b"\0" * (RECORD - 16)
        while (now := time.monotonic()) - self.t0 < seconds:
            due = int((now - self.t0) * self.rate) - generated
            for _ in range(due):
                pending.append(memoryview(struct.pack("=QQ", generated, time.monotonic_ns())
                                          + pad))  # fmt: skip
                generated += 1
                queued += RECORD
            while pending:
                try:
                    sent = self.conn.send(pending[0])
                except BlockingIOError:
                    break
                queued -= sent
                if sent == len(pending[0]):
                    pending.popleft()
                else:
                    pending[0] = pending[0][sent:]
            if now >= next_report:
                backlog = queued + _outq(self.conn)
                unsent = queued + _outq(self.conn, SIOCOUTQNSD)
                self.queue_samples.append((now - self.t0, unsent / RECORD))
                message = {"schema": 1, "ue": self.ue_ip, "backlog_bytes": backlog,
                           "unsent_bytes": unsent, "ts_ns": time.time_ns()}  # fmt: skip
                self.publisher.publish(
                    "pep.v1.backlog." + self.ue_ip.replace(".", "_"), orjson.dumps(message)
                )
                next_report = now + 0.002
            select.select([], [self.conn] if pending else [], [], 0.0005)

    def _receive(self) -> None:
        buffer = bytearray()
        self.client.settimeout(0.2)
        while not self.stop.is_set():
            try:
                data = self.client.recv(1 << 20)
            except TimeoutError:
                continue
            if not data:
                return
            now_ns = time.monotonic_ns()
            buffer += data
            whole = len(buffer) // RECORD
            for i in range(whole):
                _, sent_ns = struct.unpack_from("=QQ", buffer, i * RECORD)
                self.delays.append((now_ns / 1e9 - self.t0, (now_ns - sent_ns) / 1e9))
            del buffer[: whole * RECORD]

    def close(self) -> None:
        for s in (self.conn, self.client, self.listener):
            s.close()


def _outq(sock: socket.socket, request: int = SIOCOUTQ) -> int:
    try:
        raw = fcntl.ioctl(sock.fileno(), request, struct.pack("=i", 0))
        return int(struct.unpack("=i", raw)[0])
    except OSError:
        return 0


def delete_exchange(name: str) -> None:
    """The experiment's exchanges are its own: remove them from the shared broker."""
    sh("rabbitmqctl", "-q", "eval",
       f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{name}">>), false, <<"pmx">>).',
       check=False)  # fmt: skip


def run_scheme(
    tb: Testbed, mode: Mode, seconds: float, rate: float, rnis: str, scale: float
) -> dict[str, Any]:
    pep_exchange = f"pmx-pep-{uuid.uuid4().hex[:8]}"
    q_high = 500.0 / scale  # thresholds scale with the rate: same crossing times
    q_low = 250.0 / scale if mode in (Mode.CDF, Mode.CDF_R) else 1.0
    settings = PmSettings(
        amqp_url=AMQP_URL, rnis_exchange=rnis, pep_exchange=pep_exchange, actuation="mptcp",
        mptcp_netns=tb.mec, mode=mode, q_high=q_high, q_low=q_low, reactive_guard=0.050,
        api_tokens=["x"], los_cqi=10, nlos_cqi=6,
    )  # fmt: skip
    manager = PathManager(settings, Health())
    manager.start()
    publisher = AmqpPublisher(AMQP_URL, pep_exchange)
    publisher.start()
    assert manager.backlog.connected.wait(10) and publisher.connected.wait(10)
    ue_ip = IPv4Address(tb.ue.paths[0].ip)
    ue = manager.put_ue(ue_ip, [IPv4Address(p.ip) for p in tb.ue.paths])
    time.sleep(1.0)  # radio state from the feed
    transfer = Transfer(tb, rate, publisher)
    paths_series: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample_paths() -> None:
        while not sampling.is_set():
            paths_series.append((time.monotonic() - transfer.t0, sum(ue.active.values())))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample_paths, daemon=True)
    sampler.start()
    transfer.run(seconds)
    sampling.set()
    sampler.join()
    assert ue.control is not None
    counters = ue.control.counters
    decisions = [d.as_dict() for d in ue.control.log if d.action.value != "none"]
    result = {
        "mode": mode.value,
        "t0": transfer.t0,
        "q_high": q_high,
        "q_low": q_low,
        "seconds": seconds,
        "reactive_changes": counters.reactive_changes,
        "predictive_changes": counters.predictive_changes,
        "predictive_controls": counters.predictive_controls,
        "prediction_ms_p90": float(np.percentile(list(counters.prediction_seconds), 90) * 1e3)
        if counters.prediction_seconds else None,
        "control_interval_ms_min": float(min(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "control_interval_ms_max": float(max(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "queue": transfer.queue_samples,
        "paths": paths_series,
        "delays": transfer.delays,
        "decisions": decisions,
        "rnis_samples": {str(k): v.samples for k, v in ue.paths.items()},
    }  # fmt: skip
    transfer.close()
    publisher.close()
    manager.close()
    delete_exchange(pep_exchange)
    return result


def summarize(results: list[dict[str, Any]], warmup: float) -> list[dict[str, Any]]:
    """Statistics after the warm-up (the first path alone cannot carry the load at start)."""
    out = []
    for r in results:
        d = np.array([x[1] for x in r["delays"] if x[0] >= warmup]) * 1e3
        paths = np.array([x[1] for x in r["paths"] if x[0] >= warmup])
        out.append({
            "mode": r["mode"],
            "records": len(d),
            "delay_ms": {q: float(np.percentile(d, float(q))) for q in ("50", "90", "99")}
            if len(d) else None,
            "mean_paths": float(paths.mean()) if len(paths) else None,
            "min_paths": int(paths.min()) if len(paths) else None,
            "changes": r["reactive_changes"] + r["predictive_changes"],
            "reactive_changes": r["reactive_changes"],
            "backlog_p99_packets": float(np.percentile(
                [q for t, q in r["queue"] if t >= warmup], 99)) if r["queue"] else None,
            "predictive_controls": r["predictive_controls"],
            "prediction_ms_p90": r["prediction_ms_p90"],
            "control_interval_ms": [r["control_interval_ms_min"], r["control_interval_ms_max"]],
        })  # fmt: skip
    return out


def compact(run: dict[str, Any], window: float = 0.2) -> dict[str, Any]:
    """A run for the result file: min/max per 200 ms window and the delay CDF at 1000 points."""
    out = {k: v for k, v in run.items() if k not in ("queue", "delays", "paths")}
    for name in ("queue", "delays"):
        series = np.array(run[name])
        if not len(series):
            out[f"{name}_bands"] = []
            continue
        which = (series[:, 0] // window).astype(int)
        bands = []
        for w in np.unique(which):
            values = series[which == w, 1]
            bands.append([round(float(w * window), 3), float(values.min()), float(values.max())])
        out[f"{name}_bands"] = bands
    paths = np.array(run["paths"])
    out["paths_every_100ms"] = paths[::10].tolist() if len(paths) else []
    delays = np.sort(np.array([d for _, d in run["delays"]]))
    out["delay_cdf_s"] = (
        np.quantile(delays, np.linspace(0, 1, 1001)).tolist() if len(delays) else []
    )
    return out


def plot(runs: list[dict[str, Any]], out: Path, scale: float) -> None:
    """Plots from compacted runs (see ``compact``): time series per scheme and delay CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, len(runs), figsize=(4 * len(runs), 8), sharex=True, squeeze=False)
    for col, r in enumerate(runs):
        ax_p, ax_q, ax_d = axes[:, col]
        paths = np.array(r["paths_every_100ms"])
        if len(paths):
            ax_p.step(paths[:, 0], paths[:, 1], where="post")
        for d in r["decisions"]:
            if d["trigger"] == "reactive":
                ax_p.plot(d["time"] - r["t0"], 0.5, "r.", markersize=4)
        ax_p.set(title=r["mode"], ylim=(0, 4.5), ylabel="paths in use" if col == 0 else None)
        for ax, name, factor in ((ax_q, "queue_bands", 1.0), (ax_d, "delays_bands", 1e3)):
            bands = np.array(r[name])
            if len(bands):
                ax.fill_between(bands[:, 0], bands[:, 1] * factor, bands[:, 2] * factor,
                                step="post")  # fmt: skip
        ax_q.set(ylabel="backlog (packets)" if col == 0 else None)
        ax_d.set(yscale="log", xlabel="time (s)", ylabel="delay (ms)" if col == 0 else None)
    fig.suptitle(
        f"Emulated RAN, Table 7.2 scaled 1/{scale:.0f}: min-max per 200 ms"
        " (red dots: reactive changes)"
    )
    fig.tight_layout()
    fig.savefig(out / "timeseries.png", dpi=100)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in runs:
        cdf = np.array(r["delay_cdf_s"]) * 1e3
        if len(cdf):
            ax.plot(cdf, np.linspace(0, 1, len(cdf)), label=r["mode"])
    ax.set(xscale="log", xlabel="delay, enqueue → UE (ms)", ylabel="CDF",
           title="Delay CDF per scheme (emulated RAN)")  # fmt: skip
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "delay_cdf.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0, help="per scheme (45)")
    parser.add_argument("--warmup", type=float, default=5.0, help="left out of stats (5)")
    parser.add_argument(
        "--scenario",
        type=Path,
        default=Path(__file__).with_name("multipath-4path-short-queue.yaml"),
        help="testbed scenario (4 cells, LoS/NLoS Markov)",
    )
    parser.add_argument("--rate", type=float, default=20e6, help="offered load, bit/s (2e7)")
    parser.add_argument("--scale", type=float, default=50.0, help="Table 7.2 / this (50)")
    parser.add_argument("--modes", default="reactive,cdf,fpt,cdf+r,fpt+r")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/pathmgr/emulated")
    args = parser.parse_args()
    rnis = f"pmx-rnis-{uuid.uuid4().hex[:8]}"
    tb = Testbed(rnis, args.scenario)
    results = []
    try:
        for mode in args.modes.split(","):
            log(f"{mode}: {args.seconds:.0f} s at {args.rate / 1e6:.0f} Mbit/s")
            results.append(run_scheme(tb, Mode(mode), args.seconds, args.rate, rnis, args.scale))
            log(f"{mode}: {summarize(results[-1:], args.warmup)[0]}")
    finally:
        tb.close()
        delete_exchange(rnis)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = summarize(results, args.warmup)
    runs = [compact(r) for r in results]
    (args.out / "emulated.json").write_text(
        json.dumps({"command": " ".join(sys.argv), "summary": summary, "runs": runs}) + "\n"
    )
    plot(runs, args.out, args.scale)
    for s in summary:
        print(json.dumps(s))


if __name__ == "__main__":
    main()
