"""``make experiment-pep-split``: what splitting the connection buys on a fluctuating radio.

The research PEP's step test (000 §3.2), on the emulated RAN: a long-RTT WAN leg (100 ms
RTT, 100 Mbit/s) and a radio leg whose capacity steps from 15 to 70 Mbit/s some seconds
into a download. The UE downloads a file from the server end to end (E2E) or through the
PEP (transparent mode in the MEC namespace); the completion time is measured at the UE.
The research reports −38.5 % (E2E FQ-CoDel 23.29 s → PEP 14.31 s, 32 MB). Each radio queue
discipline (FQ-CoDel, and a FIFO sized to the BDP like the research's BFIFO) is run with
E2E and PEP alternately, ``--runs`` times. The sender's socket toward the UE (the PEP's RAN
leg, or the server end to end) is sampled every 0.1 s with ``ss -ti`` (cwnd, srtt, unacked,
retransmissions): what limits the rate around the step.

The research's Table 5.2 rides along: an interactive flow beside the bulk download, the
UE pinging the server (ICMP, 100 B IP packets at 20 per second, like the research's
ultra_ping "Skype" flow; end to end, the PEP does not split it). As in the research, its
delay statistics cover the longest completion time of a run's E2E/PEP pair, so the pings
of the faster transfer go on until the slower one's FCT (E2E runs first in each pair).

The content server and the downloader are ``mts_lab.traffic``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from mts_lab import traffic
from mts_lab.meld.bed import mean_ci95
from mts_lab.results import pyplot, save_figure, save_results

PORT_PEP, PORT_E2E = 5001, 5002  # the PEP intercepts the first only
# The research's hosts ran Cubic. A namespace's default may only be a "non-restricted"
# algorithm (here: reno, bbr), so the sender and the PEP set it per socket.
CONGESTION_CONTROL = "cubic"


# ---- the experiment ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    size: int  # bytes to download
    step_after_s: float  # seconds after the transfer starts
    low_mbps: float
    high_mbps: float
    wan_delay_ms: float  # one way
    wan_rate_mbps: float
    ran_delay_ms: float  # one way
    runs: int
    pep_buffer: int | None = None  # bytes per socket buffer (forced); None = PEP default


def scenario(setup: Setup, queue: str, fifo_bytes: int = 0, channel: str = "") -> str:
    """The testbed scenario: one UE, one cell whose capacity the experiment sets (or whose
    ``channel`` is given); the FIFO holds one BDP at the low rate unless ``fifo_bytes``."""
    rtt_s = 2 * (setup.wan_delay_ms + setup.ran_delay_ms) / 1e3
    bdp = int(setup.low_mbps * 1e6 / 8 * rtt_s)  # the research's BFIFO limit (225,000 B)
    queue_spec = (
        f"{{discipline: fifo, limit_bytes: {fifo_bytes or bdp}}}"
        if queue == "fifo"
        else "{discipline: fq_codel, limit_bytes: 4194304, target_ms: 5, interval_ms: 100}"
    )
    channel = channel or f"{{model: fixed, capacity_mbps: {setup.low_mbps}}}"
    return f"""description: PEP split-TCP ({queue})
wan: {{delay_ms: {setup.wan_delay_ms}, rate_mbps: {setup.wan_rate_mbps}}}
cells:
  - bs_id: 10000
    prb: 100
    scheduler: rr
    rlc: {{mode: um}}
ues:
  - count: 1
    cells:
      - bs_id: 10000
        delay_ms: {setup.ran_delay_ms}
        ul_delay_ms: {setup.ran_delay_ms}
        queue: {queue_spec}
        channel: {channel}
"""


# The research's interactive flow (000 §3.1): 100 B at 20 packets/s. An ICMP echo of 72 B
# of data is a 100 B IP packet (20 B IP + 8 B ICMP); -D stamps each reply (Unix time).
INTERACTIVE_PING = ("ping", "-D", "-n", "-i", "0.05", "-s", "72")
# Table 5.2 (32 MiB, FQ-CoDel `interval 150`, i.e. 150 us; base RTT 120 ms), ms
PUBLISHED_INTERACTIVE = {"e2e": {"mean": 120.29, "median": 120.14, "max": 121.74},
                         "pep": {"mean": 120.61, "median": 120.40, "max": 121.75}}  # fmt: skip
_PING_REPLY = re.compile(r"^\[([\d.]+)\].*time=([\d.]+) ms")


def parse_ping(text: str) -> list[tuple[float, float]]:
    """(Unix time, RTT ms) of each reply ``ping -D`` printed."""
    return [(float(m.group(1)), float(m.group(2)))
            for m in map(_PING_REPLY.match, text.splitlines()) if m]  # fmt: skip


SS_FIELDS = {  # what `ss -ti` prints for a TCP socket -> our key and unit
    "cwnd": re.compile(r"\bcwnd:(\d+)"),
    "ssthresh": re.compile(r"\bssthresh:(\d+)"),
    "rtt_ms": re.compile(r"\brtt:([\d.]+)/"),
    "mss": re.compile(r"\bmss:(\d+)"),
    "unacked": re.compile(r"\bunacked:(\d+)"),
    "retrans_total": re.compile(r"\bretrans:\d+/(\d+)"),
}


def sampling_loop(which: str, period: float = 0.1) -> str:
    """A shell loop printing ``# <unix time>`` and then ``ss -tinH`` of the sockets that
    ``which`` (an ss filter) selects, every ``period`` s (``parse_ss`` reads it)."""
    return f'while :; do echo "# $(date +%s.%N)"; ss -tinH {which}; sleep {period}; done'


def parse_ss(text: str) -> list[dict[str, float]]:
    """``# <unix time>`` lines, each followed by the sender's socket as ``ss -tin`` shows it:
    one sample per time with the fields of SS_FIELDS (absent fields are left out)."""
    samples, t = [], None
    for line in text.splitlines():
        if line.startswith("# "):
            t = float(line[2:])
            continue
        if t is None or "cwnd:" not in line:
            continue
        sample = {"t": t}
        for key, pattern in SS_FIELDS.items():
            if m := pattern.search(line):
                sample[key] = float(m.group(1))
        samples.append(sample)
        t = None  # one socket per time
    return samples


class Testbed:
    """One testbed topology with the PEP, the server and the emulator's channel control."""

    def __init__(self, setup: Setup, queue: str, workdir: Path, scenario_text: str = "") -> None:
        """``scenario_text``: another scenario than the step test's (same UE and cell)."""
        from mts_testbed import builder

        self.setup = setup
        self.name = f"ps{os.getpid() % 100000}"
        path = workdir / f"{queue}.yaml"
        path.write_text(scenario_text or scenario(setup, queue))
        self.topo = builder.up(path, self.name, log=lambda *a, **k: None)
        self.procs: list[subprocess.Popen[Any]] = []
        try:
            self._start(workdir)
        except BaseException:
            self.close()
            raise

    def _start(self, workdir: Path) -> None:
        topo = self.topo
        server = topo.popen(
            topo.server.ns,
            *traffic.command("serve", *(f"{p}:{CONGESTION_CONTROL}" for p in (PORT_PEP, PORT_E2E))),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.procs.append(server)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        env = {
            **os.environ,
            "PEP_API_TOKENS": "experiment",
            "PEP_HTTP_HOST": "127.0.0.1",
            "PEP_STATE_DIR": str(workdir),
            "PEP_TRANSPARENT_PORT": "5999",
            "PEP_TPROXY_PORTS": str(PORT_PEP),
            "PEP_ALLOWED_CLIENTS": "10.30.0.0/16",
            "PEP_ALLOWED_DESTINATIONS": topo.server.addresses["wan0"] + "/32",
            "PEP_BACKLOG_INTERVAL_MS": "0",
            "PEP_RAN_AWARE": "false",
            "PEP_LOG_LEVEL": "WARNING",
            "PEP_RAN_CONGESTION_CONTROL": CONGESTION_CONTROL,
            "PEP_WAN_CONGESTION_CONTROL": CONGESTION_CONTROL,
        }
        if self.setup.pep_buffer is not None:
            for leg in ("RAN", "WAN"):
                for kind in ("RCVBUF", "SNDBUF"):
                    env[f"PEP_{leg}_{kind}"] = str(self.setup.pep_buffer)
        log = (workdir / "pep.log").open("wb")
        pep = topo.popen(topo.mec.ns, sys.executable, "-m", "mec_pep", "serve",
                         env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(pep)
        deadline = time.monotonic() + 180  # a loaded host has taken over 60 s
        while "5999" not in topo.exec(topo.mec.ns, "ss", "-ltnH").stdout:
            if time.monotonic() > deadline or pep.poll() is not None:
                raise RuntimeError(f"the PEP did not start: {(workdir / 'pep.log').read_text()}")
            time.sleep(0.2)

    def set_capacity(self, mbps: float) -> None:
        self.change_channel({"capacity_mbps": mbps})

    def change_channel(self, change: dict[str, Any]) -> None:
        """The emulator's channel change of the UE's cell (capacity_mbps, restart_trace...)."""
        emu = self.topo.emulator
        ue = self.topo.ue(1)
        response = httpx.patch(
            f"{emu.url}/emulator/v1/ues/{ue.name}/cells/{ue.paths[0].bs_id}/channel",
            json=change,
            headers={"Authorization": f"Bearer {emu.token}"},
            timeout=10,
        )
        response.raise_for_status()

    def download(self, port: int, ping_for_s: float = 0.0) -> dict[str, Any]:
        """One transfer with the capacity step; the result as ``fetch`` printed it, plus the
        interactive pings (``ping``: [s since the start, RTT ms]) until the transfer ends or
        ``ping_for_s`` has passed, whichever is later."""
        s = self.setup
        self.set_capacity(s.low_mbps)
        time.sleep(1.0)  # let the queue of the previous run drain
        ue = self.topo.ue(1)
        server = self.topo.server.addresses["wan0"]
        client = self.topo.popen(
            ue.ns, *traffic.command("fetch", server, str(port), str(s.size)),
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert client.stdout is not None
        json.loads(client.stdout.readline())  # started
        started = time.time()
        # The sender's socket toward the UE: the PEP's RAN leg, or the server end to end;
        # with the PEP also the server's socket of this port (its WAN leg, toward the PEP).
        senders = {"sender": (self.topo.mec.ns if port == PORT_PEP else self.topo.server.ns,
                              f"dst {ue.paths[0].ip}")}  # fmt: skip
        if port == PORT_PEP:
            senders["wan_sender"] = (self.topo.server.ns, f"sport = :{port}")
        # into files: a pipe nobody reads meanwhile stops its writer once it is full (the
        # samplers stopped ~10 s into a download before)
        with contextlib.ExitStack() as files:
            outs = {
                k: files.enter_context(tempfile.TemporaryFile("w+")) for k in [*senders, "ping"]
            }
            procs = {
                k: self.topo.popen(ns, "sh", "-c", sampling_loop(which), stdout=outs[k], text=True)
                for k, (ns, which) in senders.items()
            }
            procs["ping"] = self.topo.popen(ue.ns, *INTERACTIVE_PING, server, stdout=outs["ping"],
                                            text=True)  # fmt: skip
            step = threading.Timer(s.step_after_s, self.set_capacity, args=(s.high_mbps,))
            step.start()
            try:
                out, _ = client.communicate(timeout=600)
                time.sleep(max(0.0, started + ping_for_s - time.time()))
            finally:
                step.cancel()
                procs["ping"].send_signal(signal.SIGINT)
                for k in senders:
                    procs[k].terminate()
                for proc in procs.values():
                    proc.wait(10)
            texts = {}
            for k, f in outs.items():
                f.seek(0)
                texts[k] = f.read()
        if client.returncode != 0:
            raise RuntimeError(f"download failed on port {port}")
        result: dict[str, Any] = json.loads(out)
        if result["bytes"] != s.size:
            raise RuntimeError(f"got {result['bytes']} of {s.size} bytes")
        for k in senders:
            result[k] = [{**x, "t": round(x["t"] - started, 3)} for x in parse_ss(texts[k])]
        result["ping"] = [[round(t - started, 3), rtt] for t, rtt in parse_ping(texts["ping"])]
        return result

    def close(self) -> None:
        from mts_testbed import builder
        from mts_testbed.netns import stop_processes

        stop_processes(self.procs)
        builder.down(self.name, log=lambda *a, **k: None)


def run(setup: Setup, queues: list[str], out: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"setup": setup.__dict__, "queues": {}}
    workdir = Path(tempfile.mkdtemp(prefix="pep-split-"))
    for queue in queues:
        bed = Testbed(setup, queue, workdir)
        runs: dict[str, list[dict[str, Any]]] = {"e2e": [], "pep": []}
        try:
            for r in range(setup.runs):
                ping_for = 0.0  # the pair's longest FCT so far: E2E's, for the PEP
                for label, port in (("e2e", PORT_E2E), ("pep", PORT_PEP)):
                    result = bed.download(port, ping_for)
                    ping_for = max(ping_for, result["fct_s"])
                    runs[label].append(result)
                    print(f"{queue:<8} run {r + 1}/{setup.runs} {label:<4} "
                          f"FCT {result['fct_s']:6.2f} s", flush=True)  # fmt: skip
        finally:
            bed.close()
        results["queues"][queue] = _summary(runs)
    results["ideal_fct_s"] = ideal_fct(setup)
    results["environment"] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_at_end": os.getloadavg(),
        "congestion_control": f"{CONGESTION_CONTROL} (server sender and both PEP legs)",
    }
    save_results(results, out, "split", plot, table)
    return results


def ideal_fct(s: Setup) -> float:
    """Completion time if the radio were always full: low rate until the step, then high."""
    before = s.low_mbps * 1e6 / 8 * s.step_after_s
    if s.size <= before:
        return s.size / (s.low_mbps * 1e6 / 8)
    return s.step_after_s + (s.size - before) / (s.high_mbps * 1e6 / 8)


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for label, rs in runs.items():
        fcts = [r["fct_s"] for r in rs]
        mean, ci = mean_ci95(fcts)
        summary[label] = {"fct_s_median": statistics.median(fcts), "fct_s": fcts,
                          "fct_s_mean": mean, "fct_s_ci95": ci,
                          "timeline_first_run": rs[0]["timeline"],
                          # the sender's socket toward the UE every 0.1 s (ss -ti)
                          "sender_first_run": rs[0]["sender"],
                          # the PEP's WAN leg seen from the server, and the interactive pings
                          "wan_sender_first_run": rs[0].get("wan_sender", []),
                          "ping_first_run": rs[0]["ping"]}  # fmt: skip
    e2e, pep = summary["e2e"]["fct_s_median"], summary["pep"]["fct_s_median"]
    summary["pep_vs_e2e_percent"] = (pep - e2e) / e2e * 100
    summary["interactive"] = interactive_delay(runs)
    return summary


def interactive_delay(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Table 5.2: per arm, the interactive pings' mean, median and max RTT of each run over
    the run pair's longest completion time (the research's window), and their mean ± 95 %
    CI over the runs (Student's t); pings lost or unanswered within it are counted."""
    windows = [max(pair) for pair in zip(*([r["fct_s"] for r in rs] for rs in runs.values()),
                                           strict=True)]  # fmt: skip
    out: dict[str, Any] = {}
    for label, rs in runs.items():
        per_run: dict[str, list[float]] = {"mean": [], "median": [], "max": []}
        answered = []
        for r, window in zip(rs, windows, strict=True):
            rtts = [rtt for t, rtt in r.get("ping", []) if t <= window]
            if not rtts:
                continue
            per_run["mean"].append(statistics.fmean(rtts))
            per_run["median"].append(statistics.median(rtts))
            per_run["max"].append(max(rtts))
            answered.append(len(rtts) / (window * 20))  # 20 pings per second
        out[label] = {k: dict(zip(("mean", "ci95"), mean_ci95(v), strict=True)) | {"runs": v}
                      for k, v in per_run.items() if v}  # fmt: skip
        out[label]["answered_share"] = answered
    out["window_s"] = windows
    out["published"] = PUBLISHED_INTERACTIVE
    return out


def table(results: dict[str, Any]) -> str:
    lines = ["queue      E2E FCT (median)  PEP FCT (median)  change   runs (E2E | PEP)"]
    for queue, r in results["queues"].items():
        lines.append(
            f"{queue:<10} {r['e2e']['fct_s_median']:>14.2f} s {r['pep']['fct_s_median']:>15.2f} s "
            f"{r['pep_vs_e2e_percent']:>+7.1f} %   "
            f"{', '.join(f'{x:.2f}' for x in r['e2e']['fct_s'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['pep']['fct_s'])}"
        )
    for queue, r in results["queues"].items():
        e2e, pep = r["e2e"], r["pep"]
        lines.append(f"{queue:<10} FCT mean ± 95 % CI: E2E {e2e['fct_s_mean']:.2f} ± "
                     f"{e2e['fct_s_ci95']:.2f} s, PEP {pep['fct_s_mean']:.2f} ± "
                     f"{pep['fct_s_ci95']:.2f} s")  # fmt: skip
    lines.append(f"ideal (radio always full): {results['ideal_fct_s']:.2f} s")
    lines.append("interactive RTT over the pair's longest FCT, ms, mean ± 95 % CI of runs "
                 "(mean / median / max; published FQ-CoDel E2E 120.29 / 120.14 / 121.74, "
                 "PEP 120.61 / 120.40 / 121.75)")  # fmt: skip
    for queue, r in results["queues"].items():
        for label in ("e2e", "pep"):
            d = r.get("interactive", {}).get(label, {})
            if "mean" in d:
                stats = (
                    f"{d[k]['mean']:.2f} ± {d[k]['ci95']:.2f}" for k in ("mean", "median", "max")
                )
                lines.append(f"{queue:<10} {label:<4} " + " / ".join(stats))
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    queues = list(results["queues"])
    fig, grid = plt.subplots(2, len(queues) + 1, figsize=(5 * (len(queues) + 1), 8))
    axes = grid[0]
    setup = results["setup"]
    for ax, queue in zip(grid[1], queues, strict=False):
        for label, color in (("e2e", "#888888"), ("pep", "#1f77b4")):
            trace = results["queues"][queue][label].get("sender_first_run", [])
            ok = [x for x in trace if {"cwnd", "mss", "rtt_ms"} <= x.keys() and x["rtt_ms"] > 0]
            ax.plot([x["t"] for x in ok],
                    [x["cwnd"] * x["mss"] * 8 / (x["rtt_ms"] / 1e3) / 1e6 for x in ok],
                    label=f"{label.upper()} sender cwnd/RTT", color=color)  # fmt: skip
        ax.axvline(setup["step_after_s"], ls="--", color="k", lw=0.8)
        ax.set_title(f"radio queue {queue}: sender's window rate toward the UE (run 1)")
        ax.set_xlabel("s since the download started")
        ax.set_ylabel("cwnd · MSS / srtt, Mbit/s")
        ax.legend()
    interactive_panel(grid[1][-1], results)
    for ax, queue in zip(axes, queues, strict=False):
        for label, color in (("e2e", "#888888"), ("pep", "#1f77b4")):
            t, b = zip(*results["queues"][queue][label]["timeline_first_run"], strict=True)
            ax.plot(t, [x / 1e6 for x in b], label=label.upper(), color=color)
        ax.axvline(setup["step_after_s"], ls="--", color="k", lw=0.8)
        pings = ax.twinx()  # Table 5.2's interactive flow in the same run
        for label, color in (("e2e", "#bbbbbb"), ("pep", "#9ecae1")):
            ping = results["queues"][queue][label].get("ping_first_run", [])
            pings.plot([p[0] for p in ping], [p[1] for p in ping], color=color, lw=0.7,
                       label=f"{label.upper()} interactive ping")  # fmt: skip
        pings.set_ylabel("interactive ping RTT, ms")
        pings.legend(loc="lower right")
        ax.set_title(f"radio queue {queue}: bytes at the UE, pings (run 1)")
        ax.set_xlabel("s since the download started")
        ax.set_ylabel("MB received")
        ax.legend()
    ax = axes[-1]
    xs = range(len(queues))
    for i, (label, color) in enumerate((("e2e", "#888888"), ("pep", "#1f77b4"))):
        ax.bar([x + (i - 0.5) * 0.35 for x in xs],
               [results["queues"][q][label]["fct_s_median"] for q in queues],
               0.35, label=label.upper(), color=color)  # fmt: skip
    ax.axhline(results["ideal_fct_s"], ls=":", color="k", lw=0.8, label="ideal")
    ax.set_xticks(list(xs), queues)
    ax.set_ylabel("completion time, s (median)")
    ax.set_title(f"{setup['size'] / 1e6:.0f} MB, {setup['low_mbps']:.0f}→"
                 f"{setup['high_mbps']:.0f} Mbit/s at {setup['step_after_s']:.0f} s")  # fmt: skip
    ax.legend()
    save_figure(fig, path)


def interactive_panel(ax: Any, results: dict[str, Any]) -> None:
    """Table 5.2: the interactive flow's mean RTT per queue and arm (95 % CI of runs),
    the published FQ-CoDel figures beside them."""
    bars: list[tuple[str, float, float, str]] = []
    for queue, r in results["queues"].items():
        for label, color in (("e2e", "#888888"), ("pep", "#1f77b4")):
            d = r.get("interactive", {}).get(label, {}).get("mean")
            if d:
                bars.append((f"{label.upper()}\n{queue}", d["mean"], d["ci95"], color))
    for label in ("e2e", "pep"):
        bars.append((f"{label.upper()}\nfq_codel\npublished", PUBLISHED_INTERACTIVE[label]["mean"],
                     0.0, "#d62728"))  # fmt: skip
    if not bars:
        ax.axis("off")
        return
    names, means, cis, colors = zip(*bars, strict=True)
    ax.bar(range(len(bars)), means, yerr=cis, capsize=4, color=colors)
    ax.set_xticks(range(len(bars)), names, fontsize=8)
    ax.set_ylim(min(means) * 0.9, max(means) * 1.05)
    ax.set_ylabel("interactive ping RTT, ms (mean of runs, 95 % CI)")
    ax.set_title("Table 5.2: 100 B at 20/s beside the download")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.pep.experiment",
        description="Split-TCP benefit on the emulated RAN: E2E vs PEP completion times "
        "with a radio capacity step (needs root and `make build`).",
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/pep-split"))
    parser.add_argument("--size-mb", type=float, default=100, help="download size, MB")
    parser.add_argument("--step-after", type=float, default=13, help="s into the download")
    parser.add_argument("--low", type=float, default=15, help="radio Mbit/s before the step")
    parser.add_argument("--high", type=float, default=70, help="radio Mbit/s after the step")
    parser.add_argument("--wan-delay", type=float, default=50, help="WAN one-way delay, ms")
    parser.add_argument("--wan-rate", type=float, default=100, help="WAN rate, Mbit/s")
    parser.add_argument("--ran-delay", type=float, default=10, help="radio one-way delay, ms")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--pep-buffer-mib",
        type=float,
        help="PEP socket buffers (each, forced; 0 = kernel autotuning); default: the PEP's",
    )
    parser.add_argument("--queues", default="fq_codel,fifo", help="radio queue disciplines")
    args = parser.parse_args(argv)
    buffer = None if args.pep_buffer_mib is None else int(args.pep_buffer_mib * (1 << 20))
    setup = Setup(int(args.size_mb * 1e6), args.step_after, args.low, args.high,
                  args.wan_delay, args.wan_rate, args.ran_delay, args.runs, buffer)  # fmt: skip
    run(setup, args.queues.split(","), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
