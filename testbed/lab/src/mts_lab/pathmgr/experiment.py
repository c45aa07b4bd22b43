"""Path manager on the emulated RAN with the PEP as the sender (``make experiment-pathmgr``).

One UE on four cells (``multipath-4path-short-queue.yaml``: LoS/NLoS Markov chains, mean
dwell 3 s/2.5 s). The RNIS adapter polls the emulator and feeds the path manager. Data:

    server ns: records.py send ──TCP──▶ MEC ns: the PEP (transparent, RAN leg MPTCP)
        ──MPTCP, one subflow per cell──▶ UE ns: records.py receive

The server offers a paced load in 1500-byte records stamped at generation; the PEP splits
the connection (TPROXY), relays it to the UE over MPTCP and publishes the UE's backlog
(schema 2, with ``received_bytes``) every 2 ms; the path manager (this process) switches
the subflows through the userspace MPTCP PM of the MEC namespace; the UE's receiver
records each record's delay. Sender and receiver are processes of their own.

Scaling (Table 7.2 / 50): LoS/NLoS 18/2 Mbit/s per path, 20 Mbit/s offered; thresholds
scaled with the rate so that crossing times stay those of the thesis (Q_HT 10 packets,
Q_LT 5 for CDF, 1 for FPT and reactive); times unscaled (150/200 ms, T_R 50 ms). The path
change is MPTCP's own (netlink + MP_PRIO), not a 20 ms sleep.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
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

from mec_common.health import Health
from mts_lab import REPO
from mts_lab.results import pyplot, save_figure
from mts_testbed.topology import Topology
from path_manager.control import ControlMode
from path_manager.manager import PathManager
from path_manager.settings import PmSettings

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
RECORD = 1500


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Testbed:
    """``testbed up`` with the 4-path scenario, MPTCP set up on both ends, RNIS adapter."""

    def __init__(self, exchange: str, scenario: Path) -> None:
        self.name = "pmx" + uuid.uuid4().hex[:6]
        sh(str(REPO / ".venv/bin/testbed"), "up", "--config", str(scenario), "--name", self.name)
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
                [str(REPO / "build/bin/rnis-adapter"), "serve"], env=env,
                stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def close(self) -> None:
        self.adapter.terminate()
        self.adapter.wait(10)
        sh(str(REPO / ".venv/bin/testbed"), "down", "--name", self.name, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SERVER_PORT = 5201


class Pep:
    """The PEP in the MEC namespace: transparent, RAN leg over MPTCP, backlog every 2 ms."""

    def __init__(self, tb: Testbed, exchange: str, amqp_url: str, ran_sndbuf: int) -> None:
        self.state = Path(tempfile.mkdtemp(prefix=f"{tb.name}-pep-"))
        env = dict(
            os.environ, PEP_API_TOKENS=uuid.uuid4().hex, PEP_HTTP_HOST="127.0.0.1",
            PEP_STATE_DIR=str(self.state), PEP_LOG_FORMAT="console", PEP_AMQP_URL=amqp_url,
            PEP_BACKLOG_EXCHANGE=exchange, PEP_BACKLOG_INTERVAL_MS="2",
            PEP_ALLOWED_CLIENTS="10.30.0.0/16", PEP_ALLOWED_DESTINATIONS="10.10.0.0/24",
            PEP_TRANSPARENT_PORT="5999", PEP_TPROXY_PORTS=str(SERVER_PORT),
            PEP_RAN_MPTCP="true", PEP_RAN_SNDBUF=str(ran_sndbuf), PEP_RAN_AWARE="false",
        )  # fmt: skip
        self.log_path = self.state / "pep.log"
        with self.log_path.open("wb") as log_file:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", tb.mec, sys.executable, "-m", "mec_pep", "serve"],
                env=env, stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while "listening" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the PEP did not start:\n{self.log_path.read_text()}")
            time.sleep(0.2)
        time.sleep(1.0)  # all listeners and the TPROXY rules

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Transfer:
    """Sender (server ns) and receiver (UE ns) as processes, through the PEP."""

    def __init__(self, tb: Testbed, rate_bps: float, seconds: float) -> None:
        self.out = Path(tempfile.mkdtemp(prefix=f"{tb.name}-rx-")) / "delays.npy"
        records = str(Path(__file__).with_name("records.py"))
        self.sender = subprocess.Popen(
            ["ip", "netns", "exec", tb.topology.server.ns, sys.executable, records, "send",
             "--port", str(SERVER_PORT), "--rate", str(rate_bps), "--seconds", str(seconds + 1)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        # A fixed pause was too short on a loaded machine: the PEP found nobody listening
        # and reset the UE's connection.
        assert self.sender.stdout is not None
        if self.sender.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the sender did not start ({self.sender.wait()})")
        self.t0 = time.monotonic()
        self.receiver = subprocess.Popen(
            ["ip", "netns", "exec", tb.ue.ns, sys.executable, records, "receive",
             "--server", tb.topology.server.addresses["wan0"], "--port", str(SERVER_PORT),
             "--bind", tb.ue.paths[0].ip, "--seconds", str(seconds), "--out", str(self.out)],
        )  # fmt: skip

    def wait(self) -> list[tuple[float, float]]:
        """(arrival time since t0, delay) of every record."""
        self.receiver.wait()
        self.sender.wait(30)
        if self.receiver.returncode != 0 or not self.out.exists():
            raise RuntimeError(f"receiver failed ({self.receiver.returncode})")
        arrivals, delays = np.load(self.out)
        return list(zip((arrivals - self.t0).tolist(), delays.tolist(), strict=True))


def delete_exchange(name: str) -> None:
    """The experiment's exchanges are its own: remove them from the shared broker."""
    sh("rabbitmqctl", "-q", "eval",
       f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{name}">>), false, <<"pmx">>).',
       check=False)  # fmt: skip


def run_scheme(
    tb: Testbed,
    mode: ControlMode,
    seconds: float,
    rate: float,
    rnis: str,
    pep_exchange: str,
    scale: float,
    queue_measure: str,
) -> dict[str, Any]:
    q_high = 500.0 / scale  # thresholds scale with the rate: same crossing times
    q_low = 250.0 / scale if mode in (ControlMode.CDF, ControlMode.CDF_R) else 1.0
    settings = PmSettings(
        amqp_url=AMQP_URL, rnis_exchange=rnis, pep_exchange=pep_exchange, actuation="mptcp",
        mptcp_netns=tb.mec, mode=mode, q_high=q_high, q_low=q_low, reactive_guard=0.050,
        api_tokens=["x"], los_cqi=10, nlos_cqi=6, queue_measure=queue_measure,
    )  # fmt: skip
    manager = PathManager(settings, Health())
    manager.start()
    assert manager.backlog.connected.wait(10)
    ue_ip = IPv4Address(tb.ue.paths[0].ip)
    ue = manager.put_ue(ue_ip, [IPv4Address(p.ip) for p in tb.ue.paths])
    time.sleep(1.0)  # radio state from the feed
    transfer = Transfer(tb, rate, seconds)
    paths_series: list[tuple[float, int]] = []
    queue_series: list[tuple[float, float]] = []
    los_series: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample() -> None:  # what the control sees, every 10 ms
        while not sampling.is_set():
            t = time.monotonic() - transfer.t0
            paths_series.append((t, sum(ue.active.values())))
            queue_series.append((t, ue.queue_bytes / settings.packet_bytes))
            los_series.append((t, sum(r.in_los for r in ue.paths.values())))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    delays = transfer.wait()
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
        "queue_measure": queue_measure,
        "seconds": seconds,
        "offered_bps": rate,
        "delivered_bps": len(delays) * RECORD * 8 / seconds,
        "reactive_changes": counters.reactive_changes,
        "predictive_changes": counters.predictive_changes,
        "predictive_controls": counters.predictive_controls,
        "prediction_ms_p90": float(np.percentile(list(counters.prediction_seconds), 90) * 1e3)
        if counters.prediction_seconds else None,
        "control_interval_ms_min": float(min(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "control_interval_ms_max": float(max(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "queue": queue_series,
        "paths": paths_series,
        "los": los_series,
        "delays": delays,
        "decisions": decisions,
        "rnis_samples": {str(k): v.samples for k, v in ue.paths.items()},
    }  # fmt: skip
    manager.close()
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
            "delivered_mbps": r["delivered_bps"] / 1e6,
            # Cells in LoS as RNIS saw them; with all four in NLoS (4 x 2 < 20 Mbit/s) the
            # backlog grows whatever the scheme: single runs see different channels.
            "all_nlos_share": float(np.mean([n == 0 for t, n in r["los"] if t >= warmup])),
            "mean_los_paths": float(np.mean([n for t, n in r["los"] if t >= warmup])),
            "queue_p99_packets": float(np.percentile(
                [q for t, q in r["queue"] if t >= warmup], 99)) if r["queue"] else None,
            "predictive_controls": r["predictive_controls"],
            "prediction_ms_p90": r["prediction_ms_p90"],
            "control_interval_ms": [r["control_interval_ms_min"], r["control_interval_ms_max"]],
        })  # fmt: skip
    return out


def compact(run: dict[str, Any], window: float = 0.2) -> dict[str, Any]:
    """A run for the result file: min/max per 200 ms window and the delay CDF at 1000 points."""
    out = {k: v for k, v in run.items() if k not in ("queue", "delays", "paths", "los")}
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
    los = np.array(run["los"])
    out["los_paths_every_100ms"] = los[::10].tolist() if len(los) else []
    delays = np.sort(np.array([d for _, d in run["delays"]]))
    out["delay_cdf_s"] = (
        np.quantile(delays, np.linspace(0, 1, 1001)).tolist() if len(delays) else []
    )
    return out


def plot(runs: list[dict[str, Any]], out: Path, scale: float) -> None:
    """Plots from compacted runs (see ``compact``): time series per scheme and delay CDFs."""
    plt = pyplot()

    fig, axes = plt.subplots(3, len(runs), figsize=(4 * len(runs), 8), sharex=True, squeeze=False)
    for col, r in enumerate(runs):
        ax_p, ax_q, ax_d = axes[:, col]
        paths = np.array(r["paths_every_100ms"])
        if len(paths):
            ax_p.step(paths[:, 0], paths[:, 1], where="post", label="in use")
        los = np.array(r.get("los_paths_every_100ms", []))
        if len(los):
            ax_p.step(los[:, 0], los[:, 1], where="post", ls="--", lw=0.8, label="in LoS")
        for d in r["decisions"]:
            if d["trigger"] == "reactive":
                ax_p.plot(d["time"] - r["t0"], 0.5, "r.", markersize=4)
        ax_p.set(title=r["mode"], ylim=(0, 4.5), ylabel="paths" if col == 0 else None)
        if col == 0:
            ax_p.legend(loc="lower right", fontsize=7)
        for ax, name, factor in ((ax_q, "queue_bands", 1.0), (ax_d, "delays_bands", 1e3)):
            bands = np.array(r[name])
            if len(bands):
                ax.fill_between(bands[:, 0], bands[:, 1] * factor, bands[:, 2] * factor,
                                step="post")  # fmt: skip
        ax_q.set(ylabel="queue seen (packets)" if col == 0 else None)
        ax_d.set(yscale="log", xlabel="time (s)", ylabel="delay (ms)" if col == 0 else None)
    fig.suptitle(
        f"PEP over MPTCP on the emulated RAN, Table 7.2 scaled 1/{scale:.0f}: min-max per 200 ms"
        " (red dots: reactive changes)"
    )
    save_figure(fig, out / "timeseries.png", dpi=100)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in runs:
        cdf = np.array(r["delay_cdf_s"]) * 1e3
        if len(cdf):
            ax.plot(cdf, np.linspace(0, 1, len(cdf)), label=r["mode"])
    ax.set(xscale="log", xlabel="delay, enqueue → UE (ms)", ylabel="CDF",
           title="Delay CDF per scheme (emulated RAN)")  # fmt: skip
    ax.legend()
    ax.grid(alpha=0.3)
    save_figure(fig, out / "delay_cdf.png")


def amqp_user() -> tuple[str, str]:
    """A broker user for the PEP in the MEC namespace (guest may only log in on loopback)."""
    user, password = f"pmx-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    sh("rabbitmqctl", "-q", "add_user", user, password)
    sh("rabbitmqctl", "-q", "set_permissions", "-p", "/", user, ".*", ".*", ".*")
    return user, password


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=45.0, help="per scheme (45)")
    parser.add_argument("--warmup", type=float, default=5.0, help="left out of stats (5)")
    parser.add_argument(
        "--scenario",
        type=Path,
        default=REPO / "testbed/configs/multipath-4path-short-queue.yaml",
        help="testbed scenario (4 cells, LoS/NLoS Markov)",
    )
    parser.add_argument("--rate", type=float, default=20e6, help="offered load, bit/s (2e7)")
    parser.add_argument("--scale", type=float, default=50.0, help="Table 7.2 / this (50)")
    parser.add_argument("--modes", default="reactive,cdf,fpt,cdf+r,fpt+r")
    parser.add_argument(
        "--queue-measure",
        default="pep+rlc",
        choices=["pep+rlc", "pep_unsent", "pep_backlog"],
        help="the queue the control sees (PM_QUEUE_MEASURE; pep+rlc)",
    )
    parser.add_argument(
        "--ran-sndbuf",
        type=int,
        default=262144,
        help="PEP_RAN_SNDBUF: the MPTCP connection's and each subflow's send buffer (262144)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/pathmgr/emulated")
    args = parser.parse_args()
    rnis = f"pmx-rnis-{uuid.uuid4().hex[:8]}"
    pep_exchange = f"pmx-pep-{uuid.uuid4().hex[:8]}"
    user, password = amqp_user()
    results = []
    try:
        for mode in args.modes.split(","):
            log(f"{mode}: {args.seconds:.0f} s at {args.rate / 1e6:.0f} Mbit/s through the PEP")
            # A fresh testbed per scheme: the emulator starts its channel from the
            # scenario's seed, so every scheme sees the same LoS/NLoS sequence (common
            # random numbers, as in the simulation), up to ~1 s of start-up jitter.
            tb = Testbed(rnis, args.scenario)
            pep = None
            try:
                pep_amqp = f"amqp://{user}:{password}@{tb.topology.mgmt['mec_host']}:5672/%2F"
                pep = Pep(tb, pep_exchange, pep_amqp, args.ran_sndbuf)
                run = run_scheme(tb, ControlMode(mode), args.seconds, args.rate, rnis, pep_exchange,
                                 args.scale, args.queue_measure)  # fmt: skip
                results.append(run)
            finally:
                if pep is not None:
                    pep.close()
                tb.close()
            log(f"{mode}: {summarize(results[-1:], args.warmup)[0]}")
    finally:
        for exchange in (rnis, pep_exchange):
            delete_exchange(exchange)
        sh("rabbitmqctl", "-q", "delete_user", user, check=False)
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
