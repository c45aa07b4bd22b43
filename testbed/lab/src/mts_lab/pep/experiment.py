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

The content server and the downloader are ``mts_lab.traffic``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


def scenario(setup: Setup, queue: str) -> str:
    """The testbed scenario: one UE, one cell whose capacity the experiment sets."""
    rtt_s = 2 * (setup.wan_delay_ms + setup.ran_delay_ms) / 1e3
    bdp = int(setup.low_mbps * 1e6 / 8 * rtt_s)  # the research's BFIFO limit (225,000 B)
    queue_spec = (
        f"{{discipline: fifo, limit_bytes: {bdp}}}"
        if queue == "fifo"
        else "{discipline: fq_codel, limit_bytes: 4194304, target_ms: 5, interval_ms: 100}"
    )
    return f"""description: PEP split-TCP step test ({queue})
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
        channel: {{model: fixed, capacity_mbps: {setup.low_mbps}}}
"""


SS_FIELDS = {  # what `ss -ti` prints for a TCP socket -> our key and unit
    "cwnd": re.compile(r"\bcwnd:(\d+)"),
    "ssthresh": re.compile(r"\bssthresh:(\d+)"),
    "rtt_ms": re.compile(r"\brtt:([\d.]+)/"),
    "mss": re.compile(r"\bmss:(\d+)"),
    "unacked": re.compile(r"\bunacked:(\d+)"),
    "retrans_total": re.compile(r"\bretrans:\d+/(\d+)"),
}


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

    def __init__(self, setup: Setup, queue: str, workdir: Path) -> None:
        from mts_testbed import builder

        self.setup = setup
        self.name = f"ps{os.getpid() % 100000}"
        path = workdir / f"{queue}.yaml"
        path.write_text(scenario(setup, queue))
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
        deadline = time.monotonic() + 60
        while "5999" not in topo.exec(topo.mec.ns, "ss", "-ltnH").stdout:
            if time.monotonic() > deadline or pep.poll() is not None:
                raise RuntimeError(f"the PEP did not start: {(workdir / 'pep.log').read_text()}")
            time.sleep(0.2)

    def set_capacity(self, mbps: float) -> None:
        emu = self.topo.emulator
        ue = self.topo.ue(1)
        response = httpx.patch(
            f"{emu.url}/emulator/v1/ues/{ue.name}/cells/{ue.paths[0].bs_id}/channel",
            json={"capacity_mbps": mbps},
            headers={"Authorization": f"Bearer {emu.token}"},
            timeout=10,
        )
        response.raise_for_status()

    def download(self, port: int) -> dict[str, Any]:
        """One transfer with the capacity step; the result as ``fetch`` printed it."""
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
        # The sender's socket toward the UE: the PEP's RAN leg, or the server end to end.
        sender = self.topo.mec.ns if port == PORT_PEP else self.topo.server.ns
        sample = f'echo "# $(date +%s.%N)"; ss -tinH dst {ue.paths[0].ip}'
        trace = self.topo.popen(sender, "sh", "-c", f"while :; do {sample}; sleep 0.1; done",
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        step = threading.Timer(s.step_after_s, self.set_capacity, args=(s.high_mbps,))
        step.start()
        try:
            out, _ = client.communicate(timeout=600)
        finally:
            step.cancel()
            trace.terminate()
            trace_text, _ = trace.communicate(timeout=10)
        if client.returncode != 0:
            raise RuntimeError(f"download failed on port {port}")
        result: dict[str, Any] = json.loads(out)
        if result["bytes"] != s.size:
            raise RuntimeError(f"got {result['bytes']} of {s.size} bytes")
        result["sender"] = [{**x, "t": round(x["t"] - started, 3)} for x in parse_ss(trace_text)]
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
                for label, port in (("e2e", PORT_E2E), ("pep", PORT_PEP)):
                    result = bed.download(port)
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
        summary[label] = {"fct_s_median": statistics.median(fcts), "fct_s": fcts,
                          "timeline_first_run": rs[0]["timeline"],
                          # the sender's socket toward the UE every 0.1 s (ss -ti)
                          "sender_first_run": rs[0]["sender"]}  # fmt: skip
    e2e, pep = summary["e2e"]["fct_s_median"], summary["pep"]["fct_s_median"]
    summary["pep_vs_e2e_percent"] = (pep - e2e) / e2e * 100
    return summary


def table(results: dict[str, Any]) -> str:
    lines = ["queue      E2E FCT (median)  PEP FCT (median)  change   runs (E2E | PEP)"]
    for queue, r in results["queues"].items():
        lines.append(
            f"{queue:<10} {r['e2e']['fct_s_median']:>14.2f} s {r['pep']['fct_s_median']:>15.2f} s "
            f"{r['pep_vs_e2e_percent']:>+7.1f} %   "
            f"{', '.join(f'{x:.2f}' for x in r['e2e']['fct_s'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['pep']['fct_s'])}"
        )
    lines.append(f"ideal (radio always full): {results['ideal_fct_s']:.2f} s")
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
    grid[1][-1].axis("off")
    for ax, queue in zip(axes, queues, strict=False):
        for label, color in (("e2e", "#888888"), ("pep", "#1f77b4")):
            t, b = zip(*results["queues"][queue][label]["timeline_first_run"], strict=True)
            ax.plot(t, [x / 1e6 for x in b], label=label.upper(), color=color)
        ax.axvline(setup["step_after_s"], ls="--", color="k", lw=0.8)
        ax.set_title(f"radio queue {queue}: bytes at the UE (run 1)")
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
