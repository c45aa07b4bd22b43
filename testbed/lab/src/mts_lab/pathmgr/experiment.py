"""Path manager on the emulated RAN (``make experiment-pathmgr``): research 004's emulation.

One UE on four cells (``multipath-4path-short-queue.yaml``: LoS/NLoS Markov chains, mean
dwell 3 s/2.5 s). The RNIS adapter polls the emulator and feeds the path manager. Two data
planes (``--data-plane``):

``tunnel`` (the default; the research's UDP proxy)::

    MEC ns: records.py send-udp ──▶ mptun0 ─▶ tunnel MEC end (FIFO ingress queue, scheduler
        over the enabled paths) ══ UDP, one path per cell ══▶ UE ns: tunnel UE end ─▶
        records.py receive-udp

  The MEC end publishes its backlog toward the UE (ingress queue, in flight, bytes read;
  the PEP's schema) every 2 ms; the path manager (this process) enables and disables the
  tunnel's paths through its REST API (``TunnelActuator``). A full ingress queue drops, as
  the research's proxy did, so losses count as never delivered.

``mptcp``::

    server ns: records.py send ──TCP──▶ MEC ns: the PEP (transparent, RAN leg MPTCP)
        ──MPTCP, one subflow per cell──▶ UE ns: records.py receive

  The PEP splits the connection (TPROXY), relays it to the UE over MPTCP and publishes the
  UE's backlog every 2 ms; the path manager switches the subflows through the userspace
  MPTCP PM of the MEC namespace.

The sender offers a paced load in records stamped at generation; the UE's receiver records
each record's delay. Sender and receiver are processes of their own. Every scheme of run
``r`` sees the same channel: a fresh testbed with emulator seed ``seed + r`` and the
transfer started at the same emulator time (``--start-at``), so the LoS/NLoS sequence of
the measured window is the same for all schemes of a run (checked: the emulator's own
per-cell LoS is recorded every 100 ms).

Scaling (Table 7.2 / 50): LoS/NLoS 18/2 Mbit/s per path, 20 Mbit/s offered; thresholds
scaled with the rate so that crossing times stay those of the thesis (Q_HT 10 packets,
Q_LT 5 for CDF, 1 for FPT and reactive); times unscaled (150/200 ms, T_R 50 ms). The path
change is MPTCP's own (netlink + MP_PRIO), not a 20 ms sleep.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from mec_common.health import Health
from mec_common.ports import free_port
from mts_lab import REPO
from mts_lab.meld.bed import environment, mean_ci95
from mts_lab.results import pyplot, save_figure
from mts_lab.tunnel.bed import API_PORT, UE_ADDR, PathSpec
from mts_lab.tunnel.emulated import EmulatedTunnel
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
    """``testbed up`` with the 4-path scenario and emulator seed ``seed``, RNIS adapter."""

    def __init__(self, exchange: str, scenario: Path, seed: int) -> None:
        self.name = "pmx" + uuid.uuid4().hex[:6]
        config = yaml.safe_load(scenario.read_text())
        config["seed"] = seed
        seeded = Path(tempfile.gettempdir()) / f"{self.name}-scenario.yaml"
        seeded.write_text(yaml.safe_dump(config))
        try:
            sh(str(REPO / ".venv/bin/testbed"), "up", "--config", str(seeded), "--name", self.name)
        finally:
            seeded.unlink()
        self.topology = Topology.load(self.name)
        self.ue = self.topology.ues[0]
        self.mec = self.topology.mec.ns
        emulator = self.topology.emulator
        self.emulator = httpx.Client(
            base_url=f"{emulator.url}/emulator/v1", timeout=5,
            headers={"Authorization": f"Bearer {emulator.token}"},
        )  # fmt: skip
        # The emulator reports each UE address itself (ueIpv4 extension): no IP map needed.
        env = dict(os.environ, RNIS_FLEXRAN_URL=self.topology.emulator.url,
                   RNIS_FLEXRAN_TOKEN=self.topology.emulator.token, RNIS_AMQP_URL=AMQP_URL,
                   RNIS_AMQP_EXCHANGE=exchange,
                   RNIS_HTTP_HOST="127.0.0.1", RNIS_HTTP_PORT=str(free_port()),
                   RNIS_API_TOKENS=uuid.uuid4().hex, RNIS_POLL_PERIOD="5ms",
                   RNIS_LOG_LEVEL="INFO")  # fmt: skip
        self.adapter_log = Path(tempfile.gettempdir()) / f"{self.name}-rnis-adapter.log"
        with self.adapter_log.open("w") as log_file:
            self.adapter = subprocess.Popen(
                [str(REPO / "build/bin/rnis-adapter"), "serve"], env=env,
                stdout=log_file, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def emulator_seconds(self) -> float:
        """The emulator's clock (its channel is a function of it and of the seed)."""
        t = self.emulator.get("/timing").raise_for_status().json()
        return float((t["ticks"] + t["skipped"]) * t["tick_us"] / 1e6)

    def cells_in_los(self) -> int:
        """The UE's cells in LoS now, as the emulator has them (ground truth)."""
        ips = {p.ip for p in self.ue.paths}
        bearers = self.emulator.get("/bearers").raise_for_status().json()
        return len({b["bs_id"] for b in bearers if b["ip"] in ips and b["channel"]["los"]})

    def close(self) -> None:
        self.emulator.close()
        self.adapter.terminate()
        self.adapter.wait(10)
        sh(str(REPO / ".venv/bin/testbed"), "down", "--name", self.name, check=False)


SERVER_PORT = 5201


def setup_mptcp(tb: Testbed) -> None:
    """The userspace MPTCP PM in the MEC namespace; the UE joins its other cells."""
    sh("ip", "netns", "exec", tb.mec, "sysctl", "-q", "net.mptcp.pm_type=1")
    sh("ip", "netns", "exec", tb.ue.ns, "ip", "mptcp", "limits", "set", "subflows", "4",
       "add_addr_accepted", "4")  # fmt: skip
    for p in tb.ue.paths[1:]:
        sh("ip", "netns", "exec", tb.ue.ns, "ip", "mptcp", "endpoint", "add", p.ip,
           "dev", p.ifname, "subflow")  # fmt: skip


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

    size = RECORD
    t0: float

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


UDP_PORT = 5300
UDP_RECORD = 1372  # a 1400-byte inner packet (the tunnel's MTU is 1440)


class UdpTransfer:
    """Datagrams from the MEC namespace to the UE through the tunnel (records.py *-udp)."""

    size = UDP_RECORD

    def __init__(self, tb: Testbed, rate_bps: float, seconds: float) -> None:
        self.seconds = seconds
        self.out = Path(tempfile.mkdtemp(prefix=f"{tb.name}-rx-")) / "delays.npy"
        records = str(Path(__file__).with_name("records.py"))
        self.receiver = subprocess.Popen(
            ["ip", "netns", "exec", tb.ue.ns, sys.executable, records, "receive-udp",
             "--bind", UE_ADDR, "--port", str(UDP_PORT), "--seconds", str(seconds + 2),
             "--out", str(self.out)], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.receiver.stdout is not None
        if self.receiver.stdout.readline().strip() != "listening":
            raise RuntimeError(f"the receiver did not start ({self.receiver.wait()})")
        self.sender = subprocess.Popen(
            ["ip", "netns", "exec", tb.mec, sys.executable, records, "send-udp", "--to", UE_ADDR,
             "--port", str(UDP_PORT), "--rate", str(rate_bps), "--seconds", str(seconds),
             "--size", str(UDP_RECORD)], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.sender.stdout is not None
        word, _, start_ns = self.sender.stdout.readline().partition(" ")
        if word != "start":
            raise RuntimeError(f"the sender did not start ({self.sender.wait()})")
        self.t0 = int(start_ns) / 1e9

    def wait(self) -> list[tuple[float, float]]:
        """(arrival time since t0, delay) of every record received (one per sequence number)."""
        self.sender.wait(self.seconds + 30)
        self.receiver.wait(30)
        if self.receiver.returncode != 0 or not self.out.exists():
            raise RuntimeError(f"receiver failed ({self.receiver.returncode})")
        arrivals, delays, seqs = np.load(self.out)
        _, first = np.unique(seqs, return_index=True)  # a duplicate is not a delivery
        return [(float(arrivals[i] - self.t0), float(delays[i])) for i in sorted(first)]


class MptcpPlane:
    """The PEP over kernel MPTCP (the second data plane)."""

    name = "mptcp"

    def __init__(self, tb: Testbed, exchange: str, amqp_url: str, args: argparse.Namespace) -> None:
        self.tb = tb
        setup_mptcp(tb)
        self.pep = Pep(tb, exchange, amqp_url, args.ran_sndbuf)

    def pm_settings(self) -> dict[str, Any]:
        return {"actuation": "mptcp", "mptcp_netns": self.tb.mec}

    def transfer(self, rate_bps: float, seconds: float) -> Transfer | UdpTransfer:
        return Transfer(self.tb, rate_bps, seconds)

    def state(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self.pep.close()


class TunnelPlane:
    """The multipath tunnel: MEC end on the MEC host, UE end in the UE, a path per cell."""

    name = "tunnel"

    def __init__(self, tb: Testbed, exchange: str, amqp_url: str, args: argparse.Namespace) -> None:
        self.tb = tb
        paths = [
            PathSpec(i + 1, cwnd_bytes=args.cwnd_bytes, rnis_ue=p.ip)
            for i, p in enumerate(tb.ue.paths)
        ]  # fmt: skip
        self.api = f"http://{tb.topology.mgmt['mec_peer']}:{API_PORT}/tunnel/v1"
        self.bed = EmulatedTunnel(
            topology=tb.topology, paths=paths,
            env={"TUNNEL_QUEUE": args.queue, "TUNNEL_QUEUE_LIMIT_BYTES": str(args.queue_limit),
                 "TUNNEL_SCHEDULER": args.scheduler, "TUNNEL_CWND": args.cwnd,
                 "TUNNEL_CWND_TARGET": args.cwnd_target},
            side_env={"mec": {"TUNNEL_HTTP_HOST": "0.0.0.0", "TUNNEL_AMQP_URL": amqp_url,
                              "TUNNEL_RNIS_EXCHANGE": args.rnis_exchange,
                              "TUNNEL_BACKLOG_EXCHANGE": exchange,
                              "TUNNEL_BACKLOG_UE": tb.ue.paths[0].ip}},
        )  # fmt: skip
        self.bed.up()

    def pm_settings(self) -> dict[str, Any]:
        paths = {p.ip: {"api": self.api, "path": i + 1} for i, p in enumerate(self.tb.ue.paths)}
        return {"actuation": "tunnel", "tunnel_paths": json.dumps(paths),
                "tunnel_token": self.bed.token}  # fmt: skip

    def transfer(self, rate_bps: float, seconds: float) -> Transfer | UdpTransfer:
        return UdpTransfer(self.tb, rate_bps, seconds)

    def state(self) -> dict[str, Any]:
        """The MEC end's paths and counters at the end of the run."""
        return {"paths": self.bed.get("mec", "/tunnel/v1/paths"),
                "stats": self.bed.get("mec", "/tunnel/v1/stats")}  # fmt: skip

    def close(self) -> None:
        self.bed.down()


Plane = TunnelPlane | MptcpPlane
PLANES: dict[str, type[Plane]] = {"tunnel": TunnelPlane, "mptcp": MptcpPlane}


def delete_exchange(name: str) -> None:
    """The experiment's exchanges are its own: remove them from the shared broker."""
    sh("rabbitmqctl", "-q", "eval",
       f'rabbit_exchange:delete(rabbit_misc:r(<<"/">>, exchange, <<"{name}">>), false, <<"pmx">>).',
       check=False)  # fmt: skip


def run_scheme(
    tb: Testbed,
    plane: Plane,
    mode: ControlMode,
    args: argparse.Namespace,
    rnis: str,
    backlog_exchange: str,
) -> dict[str, Any]:
    q_high = 500.0 / args.scale  # thresholds scale with the rate: same crossing times
    q_low = 250.0 / args.scale if mode in (ControlMode.CDF, ControlMode.CDF_R) else 1.0
    settings = PmSettings(
        amqp_url=AMQP_URL, rnis_exchange=rnis, pep_exchange=backlog_exchange, mode=mode,
        q_high=q_high, q_low=q_low, reactive_guard=0.050, api_tokens=["x"], los_cqi=10,
        nlos_cqi=6, queue_measure=args.queue_measure, **plane.pm_settings(),
    )  # fmt: skip
    manager = PathManager(settings, Health())
    manager.start()
    try:
        return measure_scheme(tb, plane, manager, mode, args)
    finally:
        manager.close()


def measure_scheme(
    tb: Testbed, plane: Plane, manager: PathManager, mode: ControlMode, args: argparse.Namespace
) -> dict[str, Any]:
    """One transfer with the path manager controlling the UE (run_scheme)."""
    settings = manager.settings
    assert manager.backlog.connected.wait(10)
    ue_ip = IPv4Address(tb.ue.paths[0].ip)
    ue = manager.put_ue(ue_ip, [IPv4Address(p.ip) for p in tb.ue.paths])
    time.sleep(1.0)  # radio state from the feed
    late = wait_for_emulator(tb, args.start_at)
    transfer = plane.transfer(args.rate, args.seconds)
    emulator_t0 = tb.emulator_seconds()
    paths_series: list[tuple[float, int]] = []
    queue_series: list[tuple[float, float]] = []
    los_series: list[tuple[float, int]] = []
    truth_series: list[tuple[float, int]] = []
    parts_series: list[list[float | None]] = []
    sampling = threading.Event()
    packet = settings.packet_bytes

    def sample() -> None:  # what the control sees, every 10 ms
        while not sampling.is_set():
            now = time.monotonic()
            t = now - transfer.t0
            paths_series.append((t, sum(ue.active.values())))
            queue_series.append((t, ue.queue_bytes / packet))
            los_series.append((t, sum(r.in_los for r in ue.paths.values())))
            # The queue's parts (why a reactive trigger fired): the data plane's unsent
            # packets, then per path its RLC queue (None: no fresh RNIS value), whether it is
            # active and whether RNIS sees it in LoS.
            rlc = [r.radio_queue(now, manager.radio) for r in ue.paths.values()]
            parts_series.append([round(t, 3), round(ue.unsent_bytes / packet, 2)]
                                + [None if q is None else round(q / packet, 2) for q in rlc]
                                + [int(ue.active[k]) for k in ue.paths]
                                + [int(r.in_los) for r in ue.paths.values()])  # fmt: skip
            time.sleep(0.01)

    def sample_truth() -> None:  # the emulator's channel, every 100 ms
        while not sampling.wait(0.1):
            truth_series.append((time.monotonic() - transfer.t0, tb.cells_in_los()))

    samplers = [threading.Thread(target=f, daemon=True) for f in (sample, sample_truth)]
    for sampler in samplers:
        sampler.start()
    delays = transfer.wait()
    sampling.set()
    for sampler in samplers:
        sampler.join()
    assert ue.control is not None
    counters = ue.control.counters
    decisions = [d.as_dict() for d in ue.control.log if d.action.value != "none"]
    return {
        "mode": mode.value,
        "data_plane": plane.name,
        "t0": transfer.t0,
        "emulator_t0": emulator_t0,
        # the window's anchor (window_stats): the aligned start, or the actual one if late
        "start_at": emulator_t0 if late else args.start_at,
        "started_late": late,
        "q_high": settings.q_high,
        "q_low": settings.q_low,
        "queue_measure": args.queue_measure,
        "seconds": args.seconds,
        "offered_bps": args.rate,
        "record_bytes": transfer.size,
        "delivered_bps": len(delays) * transfer.size * 8 / args.seconds,
        "reactive_changes": counters.reactive_changes,
        "predictive_changes": counters.predictive_changes,
        "predictive_controls": counters.predictive_controls,
        "prediction_ms_p90": float(np.percentile(list(counters.prediction_seconds), 90) * 1e3)
        if counters.prediction_seconds else None,
        "control_interval_ms_min": float(min(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "control_interval_ms_max": float(max(counters.control_intervals) * 1e3)
        if counters.control_intervals else None,
        "actuation_errors": getattr(manager.actuator, "errors", 0),
        "queue": queue_series,
        "paths": paths_series,
        "los": los_series,
        "los_truth": truth_series,
        "queue_parts": parts_series,
        "queue_parts_paths": [str(k) for k in ue.paths],
        "delays": delays,
        "decisions": decisions,
        "rnis_samples": {str(k): v.samples for k, v in ue.paths.items()},
        "data_plane_state": plane.state(),
    }  # fmt: skip


def wait_for_emulator(tb: Testbed, start_at: float) -> bool:
    """Sleep until the emulator's clock reads ``start_at`` s; True if it was already past."""
    now = tb.emulator_seconds()
    if now > start_at:
        log(f"the emulator is at {now:.1f} s, past --start-at {start_at:.1f} s: not aligned")
        return True
    time.sleep(start_at - now)
    return False


def window_stats(r: dict[str, Any], warmup: float) -> dict[str, Any]:
    """Delivery and delay of the records generated in the measured window. The window is on
    the emulator's clock, ``start_at + [warmup, seconds - 1.5]`` (the last 1.5 s may still be
    on its way), so every scheme of a run is measured over the same channel. A record not
    received is lost: its delay is infinite (a quantile that falls on it is None)."""
    shift = r["emulator_t0"] - r["start_at"]  # transfer time + shift = emulator time - start_at
    end = r["seconds"] - 1.5
    generated = [(t - d + shift, d) for t, d in r["delays"]]
    received = np.array([d for g, d in generated if warmup <= g < end])
    expected = r["offered_bps"] / (8 * r["record_bytes"]) * (end - warmup)
    if r["data_plane"] == "mptcp":  # TCP loses nothing: what was sent is the reference
        expected = len(received)
    lost = max(0, round(expected) - len(received))
    delays = np.concatenate([received, np.full(lost, np.inf)]) * 1e3

    def quantile(q: float) -> float | None:
        value = float(np.quantile(delays, q, method="inverted_cdf"))
        return value if np.isfinite(value) else None

    return {
        "records": len(received),
        "lost_share": lost / expected if expected else 0.0,
        "delay_ms": {q: quantile(float(q) / 100) for q in ("50", "90", "99")}
        if len(delays)
        else None,
        "delivered_mbps": len(received) * r["record_bytes"] * 8 / (end - warmup) / 1e6,
    }


def in_window(series: list[tuple[float, float]], r: dict[str, Any], warmup: float) -> list[float]:
    """The values of a (transfer time, value) series in the measured window (window_stats)."""
    shift = r["emulator_t0"] - r["start_at"]
    return [v for t, v in series if warmup <= t + shift < r["seconds"] - 1.5]


def summarize(results: list[dict[str, Any]], warmup: float) -> list[dict[str, Any]]:
    """Statistics after the warm-up (the first path alone cannot carry the load at start)."""
    out = []
    for r in results:
        paths = np.array(in_window(r["paths"], r, warmup))
        truth = in_window(r["los_truth"], r, warmup)
        queue = in_window(r["queue"], r, warmup)
        out.append({
            "mode": r["mode"],
            "run": r.get("run", 0),
            "data_plane": r["data_plane"],
            **window_stats(r, warmup),
            "mean_paths": float(paths.mean()) if len(paths) else None,
            "min_paths": int(paths.min()) if len(paths) else None,
            "changes": r["reactive_changes"] + r["predictive_changes"],
            "reactive_changes": r["reactive_changes"],
            # Cells in LoS (the emulator's truth; RNIS's view below): with all four in NLoS
            # (4 x 2 < 20 Mbit/s) the backlog grows whatever the scheme.
            "all_nlos_share": float(np.mean([n == 0 for n in truth])) if truth else None,
            "mean_los_paths": float(np.mean(truth)) if truth else None,
            "rnis_all_nlos_share": float(np.mean([n == 0 for n in in_window(r["los"], r, warmup)])),
            "emulator_t0": r["emulator_t0"],
            "queue_p99_packets": float(np.percentile(queue, 99)) if queue else None,
            "predictive_controls": r["predictive_controls"],
            "prediction_ms_p90": r["prediction_ms_p90"],
            "control_interval_ms": [r["control_interval_ms_min"], r["control_interval_ms_max"]],
            "actuation_errors": r["actuation_errors"],
            # a tunnel path's timeouts (>= 200 ms without an ack): a stalled host shows here
            "path_timeouts": sum(p["timeouts"] for p in r["data_plane_state"].get("paths", [])),
        })  # fmt: skip
    return out


LATER_THAN_MS = (20, 100)
SCHEME_FIGURES = ("reactive_changes", "changes", "mean_paths", "min_paths", "delivered_mbps",
                  "lost_share", "queue_p99_packets", "all_nlos_share",
                  *(f"later_{ms}ms" for ms in LATER_THAN_MS))  # fmt: skip
# Scheme a minus scheme b on the same channel (Table 7.2's comparisons: the predictive
# schemes against reactive, FPT against CDF, each hybrid against its pure version).
PAIRS = (("cdf", "reactive"), ("fpt", "reactive"), ("fpt", "cdf"), ("cdf+r", "cdf"),
         ("fpt+r", "fpt"), ("fpt+r", "cdf+r"))  # fmt: skip
PAIRED_FIGURES = ("reactive_changes", "mean_paths", "lost_share", "delay_p50_ms",
                  *(f"later_{ms}ms" for ms in LATER_THAN_MS))  # fmt: skip


def later_than(run: dict[str, Any]) -> dict[str, float]:
    """Share of the window's offered records that arrived later than x ms or never, from a
    compacted run (its delay CDF and lost share: the same window, ``window_stats``)."""
    cdf = np.array(run["delay_cdf_s"]) * 1e3
    lost = float(run["lost_share"])
    return {
        f"later_{ms}ms": lost + (1 - lost) * (float(np.mean(cdf > ms)) if len(cdf) else 1.0)
        for ms in LATER_THAN_MS
    }


def queue_parts(run: dict[str, Any]) -> dict[str, Any]:
    """What the queue the control saw was made of (``queue_parts``, every 10 ms): at the
    reactive triggers (the largest sample of the 30 ms before each), and per active path by
    its state over the whole run. Packets."""
    parts = run.get("queue_parts")
    if not parts:
        return {}
    n = len(run["queue_parts_paths"])
    rows = np.array([[np.nan if v is None else v for v in p] for p in parts], dtype=float)
    t, unsent, rlc = rows[:, 0], rows[:, 1], np.nan_to_num(rows[:, 2 : 2 + n])
    active, los = rows[:, 2 + n : 2 + 2 * n] > 0, rows[:, 2 + 2 * n : 2 + 3 * n] > 0
    rlc_active = (rlc * active).sum(axis=1)
    at = []
    for d in run["decisions"]:
        if d["trigger"] == "reactive":
            i = int(np.searchsorted(t, d["time"] - run["t0"]))
            window = slice(max(0, i - 3), min(len(t), i + 1))
            if window.stop > window.start:
                at.append(window.start + int(np.argmax((unsent + rlc.sum(axis=1))[window])))
    changes = [d for d in run["decisions"] if d["action"] != "none"]
    gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(changes)
            if b["trigger"] == "reactive" and a["trigger"] == "predictive"
            and a["action"] == "remove"]  # fmt: skip
    return {
        "at_reactive_triggers": {
            # the change before it: a predictive REMOVE, and how long before (median)
            "after_predictive_remove": len(gaps) / len(at) if at else None,
            "after_predictive_remove_ms_p50": float(np.median(gaps) * 1e3) if gaps else None,
            "unsent": float(unsent[at].mean()) if at else None,
            "rlc_active_paths": float(rlc_active[at].mean()) if at else None,
            "rlc_inactive_paths": float((rlc * ~active)[at].sum(axis=1).mean()) if at else None,
            "active_paths": float(active[at].sum(axis=1).mean()) if at else None,
        },
        "rlc_per_active_path": {
            "los": float(rlc[active & los].mean()) if (active & los).any() else None,
            "nlos": float(rlc[active & ~los].mean()) if (active & ~los).any() else None,
        },
        "rlc_active_paths_mean": float(rlc_active.mean()),
    }


def paired(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair of schemes, the mean and 95 % CI of their per-run differences: the schemes of
    a run see the same channel, so the channel's run-to-run spread cancels."""
    rows = {(s["mode"], s["run"]): s | {"delay_p50_ms": (s["delay_ms"] or {}).get("50")}
            for s in summary}  # fmt: skip
    out = []
    for a, b in PAIRS:
        shared = sorted(run for mode, run in rows if mode == a and (b, run) in rows)
        if not shared:
            continue
        row: dict[str, Any] = {"a": a, "b": b, "runs": len(shared)}
        for name in PAIRED_FIGURES:
            diffs = [rows[a, r][name] - rows[b, r][name] for r in shared
                     if rows[a, r][name] is not None and rows[b, r][name] is not None]  # fmt: skip
            row[name] = list(mean_ci95(diffs)) if diffs else None
        out.append(row)
    return out


def per_scheme(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and 95 % CI half-width over runs, per scheme (delay quantiles of each run)."""
    out = []
    for mode in dict.fromkeys(s["mode"] for s in summary):
        runs = [s for s in summary if s["mode"] == mode]
        row: dict[str, Any] = {"mode": mode, "runs": len(runs)}
        for name in SCHEME_FIGURES:
            values = [float(s[name]) for s in runs if s[name] is not None]
            row[name] = list(mean_ci95(values)) if values else None
        for q in ("50", "90", "99"):
            values = [s["delay_ms"][q] for s in runs if s["delay_ms"]]
            finite = [v for v in values if v is not None]
            row[f"delay_p{q}_ms"] = list(mean_ci95(finite)) if finite else None
            row[f"delay_p{q}_lost_runs"] = len(values) - len(finite)  # the quantile fell on a loss
        out.append(row)
    return out


def compact(run: dict[str, Any], warmup: float, window: float = 0.2) -> dict[str, Any]:
    """A run for the result file: min/max per 200 ms window and the delay CDF at 1000 points
    of the records generated in the measured window (``window_stats``)."""
    out = {k: v for k, v in run.items() if k not in ("queue", "delays", "paths", "los")}
    out["los_truth"] = [[round(t, 2), n] for t, n in run["los_truth"]]
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
    generated = [(t - d, d) for t, d in run["delays"]]
    delays = np.sort(np.array(in_window(generated, run, warmup)))
    out["delay_cdf_s"] = (
        np.quantile(delays, np.linspace(0, 1, 1001)).tolist() if len(delays) else []
    )
    return out


def plot(all_runs: list[dict[str, Any]], schemes: list[dict[str, Any]], out: Path,
         scale: float) -> None:  # fmt: skip
    """Plots from compacted runs (see ``compact``): time series per scheme (the first run),
    delay CDFs (all runs of a scheme pooled, losses as never delivered) and the figures per
    scheme with their 95 % CIs."""
    plt = pyplot()
    first = min(r.get("run", 0) for r in all_runs)
    runs = [r for r in all_runs if r.get("run", 0) == first]
    plane = runs[0]["data_plane"]

    fig, axes = plt.subplots(3, len(runs), figsize=(4 * len(runs), 8), sharex=True, squeeze=False)
    for col, r in enumerate(runs):
        ax_p, ax_q, ax_d = axes[:, col]
        paths = np.array(r["paths_every_100ms"])
        if len(paths):
            ax_p.step(paths[:, 0], paths[:, 1], where="post", label="in use")
        los = np.array(r["los_truth"])
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
    title = {"tunnel": "the multipath tunnel", "mptcp": "the PEP over MPTCP"}[plane]
    fig.suptitle(
        f"{title} on the emulated RAN, Table 7.2 scaled 1/{scale:.0f}, run {first}: min-max per"
        " 200 ms (red dots: reactive changes; dashed: cells in LoS)"
    )
    save_figure(fig, out / "timeseries.png", dpi=100)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in dict.fromkeys(r["mode"] for r in all_runs):
        mine = [r for r in all_runs if r["mode"] == mode]
        delays = np.sort(np.concatenate([np.array(r["delay_cdf_s"]) for r in mine])) * 1e3
        lost = float(np.mean([r["lost_share"] for r in mine]))
        if len(delays):
            ax.plot(delays, np.linspace(0, 1 - lost, len(delays)),
                    label=f"{mode} ({len(mine)} runs)")  # fmt: skip
    ax.set(xscale="log", xlabel="delay, generation → UE (ms)", ylabel="CDF",
           title=f"Delay CDF per scheme, {title} (lost records never arrive)")  # fmt: skip
    ax.legend()
    ax.grid(alpha=0.3)
    save_figure(fig, out / "delay_cdf.png")

    panels = (
        ("reactive_changes", "reactive triggers"),
        ("mean_paths", "mean paths in use"),
        ("delivered_mbps", "delivered (Mbit/s)"),
        ("delay_p90_ms", "delay p90 (ms)"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.5))
    for ax, (name, label) in zip(axes, panels, strict=True):
        names = [s["mode"] for s in schemes]
        values = [s[name] or [np.nan, np.nan] for s in schemes]
        ax.bar(names, [v[0] for v in values], yerr=[v[1] for v in values], capsize=4)
        ax.set(title=label)
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(f"per scheme, mean and 95 % CI over runs ({title})")
    save_figure(fig, out / "schemes.png")


# Settings that make runs comparable: holds to be merged must agree on all of them.
MERGE_SETTINGS = ("data_plane", "seconds", "warmup", "start_at", "scenario", "rate", "scale",
                  "modes", "queue_measure", "scheduler", "queue", "queue_limit", "cwnd",
                  "cwnd_target", "cwnd_bytes")  # fmt: skip


def merge(dirs: list[Path], out: Path) -> None:
    """Join results measured in several holds of the measurement lock (each a directory of
    its own with other seeds, e.g. one seed per hold) into one result: run r is the r-th
    smallest seed, the CIs are over all runs. Holds with other settings or a seed measured
    twice are refused."""
    parts = [(d, json.loads((d / "emulated.json").read_text())) for d in dirs]
    reference = parts[0][1]["settings"]
    seen: dict[int, Path] = {}
    for d, part in parts:
        differ = [k for k in MERGE_SETTINGS if part["settings"].get(k) != reference.get(k)]
        if differ:
            raise SystemExit(f"{d}: settings differ from {dirs[0]}: {', '.join(differ)}")
        for seed in {r["seed"] for r in part["runs"]}:
            if seed in seen:
                raise SystemExit(f"seed {seed} is in both {seen[seed]} and {d}")
            seen[seed] = d
    seeds = sorted(seen)
    modes = reference["modes"].split(",")
    pairs = [
        (s | {"run": seeds.index(r["seed"])}, r | {"run": seeds.index(r["seed"])})
        for _, part in parts
        for s, r in zip(part["summary"], part["runs"], strict=True)
    ]
    pairs.sort(key=lambda p: (p[1]["run"], modes.index(p[1]["mode"])))
    summary = [s for s, _ in pairs]
    runs = [r for _, r in pairs]
    holds = [{"dir": str(d), "command": p["command"], "environment": p["environment"]}
             for d, p in parts]  # fmt: skip
    settings = reference | {"seed": seeds, "runs": len(seeds), "out": str(out)}
    write_results(out, settings, summary, runs, {"holds": holds}, merged=True)


def write_results(out: Path, settings: dict[str, Any], summary: list[dict[str, Any]],
                  runs: list[dict[str, Any]], extra: dict[str, Any],
                  merged: bool = False) -> None:  # fmt: skip
    """emulated.json and the plots; the figures per scheme on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    for s, r in zip(summary, runs, strict=True):
        s.update(later_than(r))
        if "queue_parts" in r:
            s["queue_parts"] = queue_parts(r)
    schemes = per_scheme(summary)
    # A merged result keeps what the queue's parts gave, not the 10 ms series themselves
    # (~0.3 MB per run; they stay in each hold's own result).
    kept = [{k: v for k, v in r.items() if k != "queue_parts"} for r in runs] if merged else runs
    (out / "emulated.json").write_text(json.dumps({
        "command": " ".join(sys.argv), "environment": environment(), **extra,
        "settings": settings, "schemes": schemes, "paired": paired(summary),
        "summary": summary, "runs": kept,
    }, default=str) + "\n")  # fmt: skip
    plot(runs, schemes, out, settings["scale"])
    for s in schemes:
        print(json.dumps(s))


def amqp_user() -> tuple[str, str]:
    """A broker user for the PEP in the MEC namespace (guest may only log in on loopback)."""
    user, password = f"pmx-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    sh("rabbitmqctl", "-q", "add_user", user, password)
    sh("rabbitmqctl", "-q", "set_permissions", "-p", "/", user, ".*", ".*", ".*")
    return user, password


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-plane",
        choices=sorted(PLANES),
        default="tunnel",
        help="tunnel (the multipath tunnel, UDP records) or mptcp (the PEP)",
    )
    parser.add_argument("--seconds", type=float, default=45.0, help="per scheme (45)")
    parser.add_argument("--warmup", type=float, default=5.0, help="left out of stats (5)")
    parser.add_argument("--runs", type=int, default=1, help="runs per scheme (run r: seed + r)")
    parser.add_argument("--seed", type=int, default=1, help="emulator seed of run 0 (1)")
    parser.add_argument("--start-at", type=float, default=28.0,
                        help="emulator time (s) at which every transfer starts (28: after"
                        " the set-up on a loaded machine)")  # fmt: skip
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
        help="the queue the control sees (PM_QUEUE_MEASURE; pep+rlc: the data plane's unsent"
        " bytes + the RLC queues)",
    )
    parser.add_argument(
        "--ran-sndbuf",
        type=int,
        default=262144,
        help="mptcp: PEP_RAN_SNDBUF, the MPTCP connection's and each subflow's send buffer",
    )
    tunnel = parser.add_argument_group("tunnel data plane (TUNNEL_*)")
    tunnel.add_argument("--scheduler", default="lowrtt", choices=["lowrtt", "rr", "rnis"])
    tunnel.add_argument("--queue", default="fifo", choices=["fifo", "fq_codel"],
                        help="ingress queue (fifo: the research's proxy queue)")  # fmt: skip
    tunnel.add_argument("--queue-limit", type=int, default=200 * 1400,
                        help="ingress queue bytes (280000: 200 packets, the simulation's "
                        "10,000-packet buffer scaled 1/50)")  # fmt: skip
    tunnel.add_argument(
        "--cwnd",
        default="delay",
        choices=["static", "adaptive", "delay"],
        help="the paths' windows (delay: the radio queues stay short, as the research's paced"
        " proxy kept its sockets' queues)",
    )
    tunnel.add_argument("--cwnd-target", default="2ms", help="TUNNEL_CWND_TARGET (2ms)")
    tunnel.add_argument("--cwnd-bytes", type=int, default=20000,
                        help="per-path window (static) or start (20000)")  # fmt: skip
    parser.add_argument("--out", type=Path, help="results directory (docs/results/pathmgr/"
                        "tunnel or .../emulated for mptcp)")  # fmt: skip
    parser.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                        help="measure nothing: join these results directories (holds of the"
                        " same settings, other seeds) into --out")  # fmt: skip
    args = parser.parse_args()
    out: Path = args.out or REPO / "docs/results/pathmgr" / (
        "emulated" if args.data_plane == "mptcp" else "tunnel"
    )
    if args.merge:
        merge(args.merge, out)
        return
    rnis = f"pmx-rnis-{uuid.uuid4().hex[:8]}"
    args.rnis_exchange = rnis
    backlog_exchange = f"pmx-backlog-{uuid.uuid4().hex[:8]}"
    user, password = amqp_user()
    results = []
    try:
        for run in range(args.runs):
            for mode in args.modes.split(","):
                log(f"run {run} {mode}: {args.seconds:.0f} s at {args.rate / 1e6:.0f} Mbit/s "
                    f"over {args.data_plane}")  # fmt: skip
                # A fresh testbed per scheme and run with the run's seed, the transfer at
                # the same emulator time: every scheme of a run sees the same channel
                # (common random numbers, as in the simulation).
                tb = Testbed(rnis, args.scenario, args.seed + run)
                plane: Plane | None = None
                try:
                    amqp = f"amqp://{user}:{password}@{tb.topology.mgmt['mec_host']}:5672/%2F"
                    plane = PLANES[args.data_plane](tb, backlog_exchange, amqp, args)
                    result = run_scheme(tb, plane, ControlMode(mode), args, rnis,
                                        backlog_exchange)  # fmt: skip
                    result["run"], result["seed"] = run, args.seed + run
                    results.append(result)
                finally:
                    if plane is not None:
                        plane.close()
                    tb.close()
                log(f"run {run} {mode}: {summarize(results[-1:], args.warmup)[0]}")
    finally:
        for exchange in (rnis, backlog_exchange):
            delete_exchange(exchange)
        sh("rabbitmqctl", "-q", "delete_user", user, check=False)
    summary = summarize(results, args.warmup)
    runs = [
        compact(r, args.warmup) | {"lost_share": s["lost_share"]}
        for r, s in zip(results, summary, strict=True)
    ]
    settings = vars(args) | {"scenario": str(args.scenario), "out": str(out)}
    write_results(out, settings, summary, runs, {})


if __name__ == "__main__":
    main()
