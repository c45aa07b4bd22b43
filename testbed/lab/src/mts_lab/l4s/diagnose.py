"""Why Prague gets the share it gets beside CUBIC (issue 14): the base bed of Tables 8.x
(100 Mbit/s DualPI2, base RTT 60 ms, the delay bit at both ends) with a trace of each
sender and of the bottleneck every 100 ms.

Per sender: cwnd, ssthresh, pacing rate, smoothed RTT, delivered and CE-delivered
segments (TCP_INFO), and Prague's own state (``prague_trace``: alpha, rounds, rounds with
a mark, reductions). At the client: the CE marks that arrived per flow (nft counters in
its namespace, so independent of TCP's feedback). At the bottleneck: the emulator's
DualPI2 counters (L marks by the step and by coupling, classic drops) and p′.

What can be varied: the ECN feedback Prague's receiver gives (``accecn``: the receiver asks
for Accurate ECN, as research 001's hosts did; ``classic``: RFC 3168, ECE held until CWR,
which is what every run before 26 Nov had), Prague alone or beside CUBIC, DualPI2's
coupling factor k and step threshold.

    uv run python -m mts_lab.l4s.diagnose --out docs/results/l4s/diagnose \\
        --feedback classic --mode pair --seconds 30
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mec_common.netns import in_netns
from mec_l4s.efm import Technique
from mec_l4s.prague import ALPHA_MAX, Prague
from mts_lab.l4s.bed import WanLine, connect, marking
from mts_lab.l4s.experiment import loaded_prague
from mts_lab.results import Results, pyplot, save_figure, save_results

# struct tcp_info (include/uapi/linux/tcp.h, 6.18): byte offset, format
TCP_INFO_FIELDS = {
    "ca_state": (1, "B"),  # 0 open, 1 disorder, 2 CWR, 3 recovery, 4 loss
    "rtt_us": (68, "I"),
    "ssthresh": (76, "I"),
    "cwnd": (80, "I"),
    "retrans": (100, "I"),
    "pacing_rate_Bps": (104, "Q"),
    "bytes_acked": (120, "Q"),
    "delivered": (192, "I"),
    "delivered_ce": (196, "I"),
}
TCP_INFO_LEN = 200
CA_CWR = 2
SAMPLE_S = 0.1


def tcp_info(sock: socket.socket) -> dict[str, int]:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    return {k: struct.unpack_from(fmt, raw, off)[0] for k, (off, fmt) in TCP_INFO_FIELDS.items()}


@dataclass
class Flow:
    name: str  # prague or cubic
    cca: str
    port: int = 0
    conn: socket.socket | None = None  # the sender's connection
    received: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)


class CeCounters:
    """nft counters in the client's namespace: per flow (server port), the data packets
    that arrived CE-marked and in all (what the bottleneck did, before any TCP feedback)."""

    def __init__(self, line: WanLine, flows: list[Flow]) -> None:
        self.line, self.table = line, "l4sdiag"
        rules = [
            f"add table inet {self.table}",
            f"add chain inet {self.table} in {{ type filter hook input priority 0; }}",
        ]
        for f in flows:
            for what, match in (("ce", "ip ecn ce"), ("all", "")):
                rules.append(f"add counter inet {self.table} {f.name}_{what}")
                rules.append(
                    f"add rule inet {self.table} in tcp sport {f.port} {match} "
                    f'counter name "{f.name}_{what}"'
                )
        line.sh(line.client_ns, "nft -f - <<'EOF'\n" + "\n".join(rules) + "\nEOF")

    def read(self) -> dict[str, int]:
        out = self.line.sh(self.line.client_ns, f"nft -j list counters table inet {self.table}")
        counters = {}
        for item in json.loads(out)["nftables"]:
            if c := item.get("counter"):
                counters[c["name"]] = int(c["packets"])
        return counters


def _listen(line: WanLine, flow: Flow) -> socket.socket:
    def make() -> socket.socket:
        s = socket.socket()
        # the listener's CCA decides what the handshake offers (Prague: AccECN)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, flow.cca.encode())
        s.bind((line.server_ip, 0))
        s.listen(1)
        return s

    return in_netns(line.server_ns, make)


def connect_flows(
    line: WanLine, flows: list[Flow], prague_receiver: str, seconds: float
) -> list[threading.Thread]:
    """Connect each flow (one at a time: the classic receiver needs the namespace's
    tcp_ecn = 1 for its SYN only); the threads (not started) send and receive for
    ``seconds``."""
    threads = []
    for flow in flows:
        ls = _listen(line, flow)
        flow.port = ls.getsockname()[1]
        classic = flow.name == "prague" and prague_receiver == "classic"
        if classic:  # an RFC 3168 receiver: asks for ECN, not AccECN
            line.sh(line.client_ns, "sysctl -qw net.ipv4.tcp_ecn=1")
        try:
            receiver_cca = "cubic" if flow.name == "cubic" or classic else flow.cca
            client = connect(line.client_ns, line.server_ip, flow.port, receiver_cca, 30)
        finally:
            if classic:
                line.sh(line.client_ns, "sysctl -qw net.ipv4.tcp_ecn=2")
        flow.conn, _ = ls.accept()
        ls.close()
        threads.append(threading.Thread(target=_send, args=(flow.conn, seconds)))
        threads.append(threading.Thread(target=_receive, args=(flow, client)))
    return threads


def _send(conn: socket.socket, seconds: float) -> None:
    end = time.monotonic() + seconds
    block = b"x" * 65536
    while time.monotonic() < end:
        conn.sendall(block)
    conn.shutdown(socket.SHUT_WR)


def _receive(flow: Flow, sock: socket.socket) -> None:
    with sock:
        while n := len(sock.recv(1 << 16)):
            flow.received += n


def sample(
    t0: float, flows: list[Flow], prague: Prague, ce: CeCounters, line: WanLine
) -> dict[str, Any]:
    """One row of the trace: every sender, the client's CE counters, the bottleneck."""
    counters = ce.read()
    row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 3)}
    for f in flows:
        assert f.conn is not None
        s: dict[str, Any] = tcp_info(f.conn)
        if f.name == "prague" and (tr := prague.trace(f.conn)) is not None:
            s |= {"alpha": tr.alpha / ALPHA_MAX, "rounds": tr.rounds,
                  "marked_rounds": tr.marked_rounds, "reductions": tr.reductions}  # fmt: skip
        s |= {"ce_arrived": counters.get(f"{f.name}_ce", 0),
              "pkts_arrived": counters.get(f"{f.name}_all", 0)}  # fmt: skip
        row[f.name] = s
    for d in line.wan_stats():
        if d.get("dualpi2"):
            row.setdefault("dualpi2", {})[d["direction"]] = d["dualpi2"]
    return row


def one_diagnosis(args: argparse.Namespace, prague: Prague) -> Results:
    dualpi2 = {k: v for k, v in (("coupling", args.coupling), ("step_us", args.step_us))
               if v is not None}  # fmt: skip
    line = WanLine.create(30.0, rate_mbps=args.rate_mbps, queue="dualpi2", prefix="l4d",
                          dualpi2=dualpi2)  # fmt: skip
    try:
        with marking(line, Technique.DELAY, dynamic_t_max=True) as markers:
            markers[1].configure(Technique.DELAY, dynamic_t_max=True, ect1=True)
            flows = [Flow("prague", prague.name)]
            if args.mode == "pair":
                flows.append(Flow("cubic", "cubic"))
            threads = connect_flows(line, flows, args.feedback, args.seconds)
            ce = CeCounters(line, flows)  # needs the ports
            for t in threads:
                t.start()
            t0, trace = time.monotonic(), []
            while any(t.is_alive() for t in threads):
                trace.append(sample(t0, flows, prague, ce, line))
                time.sleep(SAMPLE_S)
            for f in flows:
                assert f.conn is not None
                f.conn.close()
    finally:
        line.down()
    return {
        "feedback": args.feedback, "mode": args.mode, "seconds": args.seconds,
        "rate_mbps": args.rate_mbps, "dualpi2": dualpi2, "load": list(os.getloadavg()),
        "received": {f.name: f.received for f in flows},
        "trace": trace, "summary": summarise(trace, flows, args.seconds),
    }  # fmt: skip


def summarise(trace: list[dict[str, Any]], flows: list[Flow], seconds: float) -> dict[str, Any]:
    """Per flow over the run's second half (past slow start): means of the trace's
    values, and the counters' growth in it."""
    half = [r for r in trace if r["t_s"] >= seconds / 2 and all(f.name in r for f in flows)]
    out: dict[str, Any] = {}
    if len(half) < 2:
        return out
    first, last = half[0], half[-1]
    span = last["t_s"] - first["t_s"]
    for f in flows:
        a, b = first[f.name], last[f.name]
        delivered = b["delivered"] - a["delivered"]
        s = {
            "mbit_s_run": f.received * 8 / seconds / 1e6,
            "mbit_s_half": (b["bytes_acked"] - a["bytes_acked"]) * 8 / span / 1e6,
            "cwnd": statistics.fmean(r[f.name]["cwnd"] for r in half),
            "rtt_ms": statistics.fmean(r[f.name]["rtt_us"] for r in half) / 1000,
            "pacing_mbit_s": statistics.fmean(r[f.name]["pacing_rate_Bps"] for r in half) * 8e-6,
            "retrans": b["retrans"] - a["retrans"],
            # in CWR the kernel reduces the window towards ssthresh and does not grow it
            "cwr_share": statistics.fmean(r[f.name]["ca_state"] == CA_CWR for r in half),
            "ce_arrived_share": (b["ce_arrived"] - a["ce_arrived"])
            / max(1, b["pkts_arrived"] - a["pkts_arrived"]),
            "delivered_ce_share": (b["delivered_ce"] - a["delivered_ce"]) / max(1, delivered),
        }
        if "alpha" in b and "alpha" in a:
            rounds = b["rounds"] - a["rounds"]
            s |= {
                "alpha": statistics.fmean(r[f.name].get("alpha", 0.0) for r in half),
                "rounds": rounds,
                "marked_rounds_share": (b["marked_rounds"] - a["marked_rounds"]) / max(1, rounds),
                "reductions_per_round": (b["reductions"] - a["reductions"]) / max(1, rounds),
            }
        out[f.name] = s
    q = [r["dualpi2"] for r in half if "dualpi2" in r]
    if q:
        # server to client: the direction that carries the data
        direction = max(q[-1], key=lambda d: q[-1][d]["l_packets"] + q[-1][d]["c_packets"])
        qa, qb = q[0][direction], q[-1][direction]
        lp = max(1, qb["l_packets"] - qa["l_packets"])
        step = qb["step_marks"] - qa["step_marks"]
        out["dualpi2"] = {
            "direction": direction,
            "p_prime": statistics.fmean(x[direction]["p_prime"] for x in q),
            "l_step_mark_share": step / lp,
            "l_coupled_mark_share": (qb["l_marks"] - qa["l_marks"] - step) / lp,
            "c_drop_share": (qb["c_drops"] - qa["c_drops"])
            / max(1, qb["c_packets"] - qa["c_packets"] + qb["c_drops"] - qa["c_drops"]),
        }
    return out


def table(results: Results) -> str:
    lines = [f"L4S diagnosis: {results['mode']}, {results['feedback']} ECN feedback, "
             f"{results['seconds']} s, DualPI2 {results['dualpi2'] or 'defaults'}, "
             f"load {results['load'][0]:.1f} (second half of the run)"]  # fmt: skip
    for name, s in results["summary"].items():
        lines.append(f"  {name}: " + ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()
        ))  # fmt: skip
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()
    trace = results["trace"]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for name, colour in (("prague", "C0"), ("cubic", "C1")):
        rows = [r for r in trace if name in r]
        if not rows:
            continue
        ts = [r["t_s"] for r in rows]
        axes[0].plot(ts, [r[name]["cwnd"] for r in rows], color=colour, label=f"{name} cwnd")
        axes[1].plot(ts, [r[name]["rtt_us"] / 1000 for r in rows], color=colour, label=name)
        if name == "prague":
            axes[2].plot(ts, [r[name].get("alpha", 0) for r in rows], color=colour,
                         label="prague alpha")  # fmt: skip
    q = [(r["t_s"], max(r["dualpi2"].values(), key=lambda d: d["l_packets"] + d["c_packets"]))
         for r in trace if r.get("dualpi2")]  # fmt: skip
    if q:
        axes[2].plot([t for t, _ in q], [d["p_prime"] for _, d in q], color="k", label="p′")
    axes[0].set_ylabel("cwnd (segments)")
    axes[1].set_ylabel("smoothed RTT (ms)")
    axes[2].set_ylabel("alpha, p′")
    axes[2].set_xlabel("s")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.suptitle(f"{results['mode']}, {results['feedback']} ECN feedback, "
                 f"DualPI2 {results['dualpi2'] or 'defaults'}")  # fmt: skip
    save_figure(fig, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--feedback", choices=("accecn", "classic"), default="accecn")
    parser.add_argument("--mode", choices=("pair", "alone"), default="pair")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate-mbps", type=float, default=100.0)
    parser.add_argument("--coupling", type=float, help="DualPI2's k (default 2)")
    parser.add_argument("--step-us", type=float, help="DualPI2's step threshold (default 1000)")
    args = parser.parse_args()
    with loaded_prague() as prague:
        results = one_diagnosis(args, prague)
    name = f"diagnose-{args.mode}-{args.feedback}" + "".join(
        f"-{k}{v:g}" for k, v in results["dualpi2"].items()
    )
    save_results(results, args.out, name, plot, table)


if __name__ == "__main__":
    main()
