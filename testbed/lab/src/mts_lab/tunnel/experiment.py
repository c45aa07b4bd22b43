"""``make experiment-tunnel``: research 003's tests on the tunnel over the emulated multi-cell
testbed (docs/tunnel.md, ``../shared/reference/003-fq-codel-multipath-tunnel.md``).

The research's networks at its own scale (§7): homogeneous 2 x 20 Mbit/s, 10 ms one way
per direction, static window 50,000 B per path; heterogeneous 20 Mbit/s/5 ms + 10 Mbit/s/
10 ms, 25,000 B each. Each access is a cell of the emulator (``mts_lab.tunnel.emulated``).
Traffic as FLENT's: Cubic downloads (``mts_lab.traffic``), ICMP ping every 0.1 s through the
tunnel (UE -> MEC), the CBR UDP probe of ``mts_lab.traffic``. The tunnel's MEC end is the
research's proxy and the content server sits beside it (its R3-proxy-server links: 1 Gbit/s,
0 ms). The tests (Table 5.5), each case a fresh pair of tunnel ends:

- ``bottleneck``: one path, FIFO, one download + ping (the queue is the tunnel's, not the link's);
- ``1``: homogeneous, RR, one download + ping, FIFO vs FQ-CoDel;
- ``2``: homogeneous, RR, two downloads, the second 5 s after the first, FIFO vs FQ-CoDel;
- ``3a``/``3b``: four downloads + ping, homogeneous/heterogeneous, RR vs LowRTT (FQ-CoDel), and
  FIFO (RR) on the homogeneous network;
- ``4``: RRUL on the heterogeneous network: four downloads, four uploads, ping; FQ-CoDel RR vs
  LowRTT, and FIFO LowRTT;
- ``5``: constant-rate UDP instead of SCReAM (not available here): 16 Mbit/s alone; 4 Mbit/s
  beside a download, FIFO vs FQ-CoDel.

Every run runs every case; figures are means over runs with 95 % CIs (Student's t).

    uv run python -m mts_lab.tunnel.experiment --out docs/results/tunnel [--runs 5] [--seconds 15]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mts_lab import traffic
from mts_lab.results import Results
from mts_lab.tunnel.bed import API_PORT, MEC_ADDR, UE_ADDR, PathSpec
from mts_lab.tunnel.emulated import EmulatedTunnel, Link, MultiCellTestbed
from mts_testbed.topology import Topology

NETWORKS: dict[str, tuple[Link, ...]] = {
    "homogeneous": (Link(20, 10, 50_000), Link(20, 10, 50_000)),
    "heterogeneous": (Link(20, 5, 25_000), Link(10, 10, 25_000)),
}
DOWN_PORT, UP_PORT, UDP_PORT = 5301, 5302, 5303
WARMUP_S = 2.0  # a download's slow start, left out of its mean rate
BIN_S = 0.5  # throughput timelines
SIZE = 10**12  # a download that lasts until it is stopped
CBR_PACKET = 1000  # bytes, IP


@dataclass(frozen=True)
class Case:
    """One measurement: a test of the research on one network with one queue and scheduler."""

    test: str
    network: str
    queue: str  # fq_codel | fifo
    scheduler: str  # rr | lowrtt
    downloads: int = 1
    uploads: int = 0
    stagger_s: float = 0.0  # the second download starts this much later
    paths: int = 2
    ping: bool = True
    cbr_mbit: float = 0.0  # constant-rate UDP downlink

    @property
    def label(self) -> str:
        """Names the case in results: the same in every run."""
        cbr = f" cbr{self.cbr_mbit:g}" if self.cbr_mbit else ""
        return f"{self.test} {self.network[:3]} {self.queue} {self.scheduler}{cbr}"


CASES = [
    Case("bottleneck", "homogeneous", "fifo", "rr", paths=1),
    Case("1", "homogeneous", "fifo", "rr"),
    Case("1", "homogeneous", "fq_codel", "rr"),
    Case("2", "homogeneous", "fifo", "rr", downloads=2, stagger_s=5, ping=False),
    Case("2", "homogeneous", "fq_codel", "rr", downloads=2, stagger_s=5, ping=False),
    Case("3a", "homogeneous", "fq_codel", "rr", downloads=4),
    Case("3a", "homogeneous", "fq_codel", "lowrtt", downloads=4),
    Case("3a", "homogeneous", "fifo", "rr", downloads=4),
    Case("5", "homogeneous", "fq_codel", "rr", downloads=0, ping=False, cbr_mbit=16),
    Case("5", "homogeneous", "fifo", "rr", ping=False, cbr_mbit=4),
    Case("5", "homogeneous", "fq_codel", "rr", ping=False, cbr_mbit=4),
    Case("3b", "heterogeneous", "fq_codel", "rr", downloads=4),
    Case("3b", "heterogeneous", "fq_codel", "lowrtt", downloads=4),
    Case("4", "heterogeneous", "fq_codel", "rr", downloads=4, uploads=4),
    Case("4", "heterogeneous", "fq_codel", "lowrtt", downloads=4, uploads=4),
    Case("4", "heterogeneous", "fifo", "lowrtt", downloads=4, uploads=4),
]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---- traffic -----------------------------------------------------------------------------------


@contextmanager
def content_server(bed: EmulatedTunnel, side: str, port: int) -> Iterator[None]:
    """``mts_lab.traffic serve`` (Cubic) in ``side``'s namespace while the block runs."""
    proc = bed.popen(side, *traffic.command("serve", f"{port}:cubic"))
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"content server ({side}): {proc.communicate(timeout=5)[1]}")
        yield
    finally:
        proc.kill()
        proc.communicate(timeout=10)


def start_download(bed: EmulatedTunnel, side: str, server: str, port: int) -> subprocess.Popen[str]:
    return bed.popen(
        side, *traffic.command("fetch", server, str(port), str(SIZE), "--progress", "0.1")
    )


def stop_download(proc: subprocess.Popen[str], t0: float) -> list[tuple[float, int]]:
    """Stop a download; its (time since ``t0`` in s, bytes received) samples."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    started, samples = None, []
    for line in out.splitlines():
        record = json.loads(line)
        if "started" in record:
            started = record["started"]
        elif "t" in record and started is not None:
            samples.append((started + record["t"] - t0, int(record["bytes"])))
    return samples


def rate_mbit(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """Mean rate between ``start`` and ``end`` (s since t0) from cumulative byte samples."""
    inside = [(t, b) for t, b in samples if start <= t <= end]
    if len(inside) < 2:
        return 0.0
    (t1, b1), (t2, b2) = inside[0], inside[-1]
    return (b2 - b1) * 8 / (t2 - t1) / 1e6 if t2 > t1 else 0.0


def binned(samples: list[tuple[float, int]], end: float) -> list[float]:
    """Throughput (Mbit/s) in BIN_S bins from 0 to ``end``."""
    bins = int(end / BIN_S)
    return [rate_mbit(samples, i * BIN_S, (i + 1) * BIN_S + 0.05) for i in range(bins)]


def ping_paths(ue_log: str, mec_log: str, output: str) -> list[list[int | float | None]]:
    """Per ping reply: [icmp seq, RTT ms, the echo request's path (the UE end's trace), the
    reply's path (the MEC end's), how many paths had room when the reply was sent]. The
    ends' ICMP trace (``TUNNEL_LOG_LEVEL=DEBUG``) logs each echo's path when it is
    dequeued."""

    def dequeued(log: str) -> dict[int, tuple[int, int]]:
        found = re.findall(
            r"trace: dequeued\"? icmp_seq=(\d+) .*?path=(\d+) paths_with_room=(\d+)", log
        )
        return {int(seq): (int(path), int(room)) for seq, path, room in found}

    requests, replies = dequeued(ue_log), dequeued(mec_log)
    rows: list[list[int | float | None]] = []
    for seq, rtt in re.findall(r"icmp_seq=(\d+) ttl=\d+ time=([\d.]+)", output):
        request, reply = requests.get(int(seq)), replies.get(int(seq))
        rows.append([int(seq), float(rtt), request[0] if request else None,
                     reply[0] if reply else None, reply[1] if reply else None])  # fmt: skip
    return rows


def ping_samples(output: str, t0: float) -> list[tuple[float, float]]:
    """(time since t0, RTT ms) of ``ping -D`` replies."""
    samples = []
    for line in output.splitlines():
        if line.startswith("[") and "time=" in line:
            stamp = float(line[1 : line.index("]")])
            samples.append((stamp - t0, float(line.split("time=")[1].split()[0])))
    return samples


def sample_queue(token: str, period: float, seconds: float) -> None:
    """Print the tunnel's ingress queue (``GET /queue``: oldest sojourn ms, bytes, drops,
    active flows) every ``period`` s as JSON lines; runs in the MEC end's namespace."""
    api = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=2)
    end = time.time() + seconds
    while time.time() < end:
        api.request("GET", "/tunnel/v1/queue", headers={"Authorization": f"Bearer {token}"})
        q = json.load(api.getresponse())
        row = [time.time(), q["oldestSojournMs"], q["bytes"], q["drops"], len(q["flows"])]
        print(json.dumps(row), flush=True)
        time.sleep(period)


# ---- one case ----------------------------------------------------------------------------------


def data_packets(paths: list[dict[str, Any]]) -> dict[int, int]:
    return {p["id"]: p["sentPackets"] - p["probes"] for p in paths}


def path_split(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[float]:
    """Each path's share of the data datagrams sent meanwhile."""
    b, a = data_packets(before), data_packets(after)
    sent = {i: a[i] - b[i] for i in a}
    total = sum(sent.values()) or 1
    return [sent[i] / total for i in sorted(sent)]


def jain(rates: list[float]) -> float:
    """Jain's fairness index."""
    return sum(rates) ** 2 / (len(rates) * sum(r * r for r in rates)) if any(rates) else 0.0


def run_case(
    topo: Topology,
    case: Case,
    seconds: float,
    cwnd: str = "static",
    reorder: str = "20ms",
    ping_bytes: int = 56,
) -> Results:
    """One case; ``cwnd`` is the paths' window mode (static: the research's BDP windows;
    adaptive or delay start from the BDP); ``reorder`` the egress reorder timeout (0: packets
    leave as they come, as in the research's VPN); ``ping_bytes`` the ping's payload (the
    research sized its pings to the tunnel's MTU)."""
    links = NETWORKS[case.network][: case.paths]
    paths = [PathSpec(i + 1, cwnd_bytes=link.cwnd_bytes) for i, link in enumerate(links)]
    env = {"TUNNEL_QUEUE": case.queue, "TUNNEL_SCHEDULER": case.scheduler, "TUNNEL_CWND": cwnd,
           "TUNNEL_REORDER_TIMEOUT": reorder,
           "TUNNEL_LOG_LEVEL": "DEBUG"}  # the ICMP trace: each ping's paths  # fmt: skip
    with (
        EmulatedTunnel(topology=topo, paths=paths, env=env) as bed,
        content_server(bed, "mec", DOWN_PORT),
        content_server(bed, "ue", UP_PORT),
    ):
        return measure(bed, case, seconds, ping_bytes)


def measure(bed: EmulatedTunnel, case: Case, seconds: float, ping_bytes: int = 56) -> Results:
    before = {side: bed.get(side, "/tunnel/v1/paths") for side in ("mec", "ue")}
    sampler = bed.popen(
        "mec", sys.executable, "-m", "mts_lab.tunnel.experiment", "sample", bed.token,
        "--seconds", str(seconds),
    )  # fmt: skip
    t0 = time.time()
    pinger = (
        bed.popen(
            "ue",
            "ping",
            "-n",
            "-D",
            "-i",
            "0.1",
            "-s",
            str(ping_bytes),
            "-w",
            str(int(seconds)),
            MEC_ADDR,
        )
        if case.ping
        else None
    )
    udp = start_cbr(bed, case, seconds) if case.cbr_mbit else None
    flows: list[tuple[str, float, subprocess.Popen[str]]] = []
    for i in range(case.downloads):
        start = case.stagger_s if i == 1 else 0.0
        if start:
            time.sleep(max(0.0, t0 + start - time.time()))
        flows.append(("down", start, start_download(bed, "ue", MEC_ADDR, DOWN_PORT)))
    flows += [
        ("up", 0.0, start_download(bed, "mec", UE_ADDR, UP_PORT)) for _ in range(case.uploads)
    ]
    time.sleep(max(0.0, t0 + seconds - time.time()))
    results: Results = {
        "case": case.label, "test": case.test, "network": case.network, "queue": case.queue,
        "scheduler": case.scheduler, "paths": case.paths, "seconds": seconds,
        "load": os.getloadavg(),
    }  # fmt: skip
    results["flows"] = [
        flow_result(kind, start, stop_download(p, t0), seconds) for kind, start, p in flows
    ]
    after = {side: bed.get(side, "/tunnel/v1/paths") for side in ("mec", "ue")}
    results["split_down"] = path_split(before["mec"], after["mec"])
    results["split_up"] = path_split(before["ue"], after["ue"])
    results["path_state"] = after["mec"]
    results["reorder_ue"] = bed.get("ue", "/tunnel/v1/stats")["reorder"]  # downlink egress
    # a path silent for a retransmission timeout (>= 200 ms): on this shared machine, a stall
    results["path_timeouts"] = sum(
        a["timeouts"] - b["timeouts"]
        for side in ("mec", "ue")
        for a, b in zip(after[side], before[side], strict=True)
    )
    if pinger:
        out, _ = pinger.communicate(timeout=seconds + 15)
        results["ping"] = ping_samples(out, t0)
        results["ping_paths"] = ping_paths(bed.log("ue"), bed.log("mec"), out)
    if udp:
        results["cbr"] = finish_cbr(udp, case, seconds)
    out, _ = sampler.communicate(timeout=30)
    results["queue_trace"] = [[row[0] - t0, *row[1:]] for row in map(json.loads, out.splitlines())]
    results["stats"] = bed.get("mec", "/tunnel/v1/stats")
    summarize(results)
    return results


def flow_result(
    kind: str, start: float, samples: list[tuple[float, int]], seconds: float
) -> Results:
    return {
        "dir": kind,
        "start_s": start,
        "mbit": rate_mbit(samples, start + WARMUP_S, seconds),
        "timeline_mbit": binned(samples, seconds),
    }


def start_cbr(
    bed: EmulatedTunnel, case: Case, seconds: float
) -> tuple[subprocess.Popen[str], subprocess.Popen[str], int]:
    """A constant-rate UDP downlink (MEC -> UE) for ``seconds``; the sink first."""
    pps = case.cbr_mbit * 1e6 / 8 / CBR_PACKET
    count = int(pps * seconds)
    sink = bed.popen(
        "ue",
        *traffic.command("sink", UE_ADDR, str(UDP_PORT), "--count", str(count), "--timeout", "3"),
    )
    assert sink.stderr is not None
    sink.stderr.readline()  # "ready"
    sender = bed.popen(
        "mec", *traffic.command("send", UE_ADDR, str(UDP_PORT), "--rate", str(pps),
                                "--count", str(count), "--size", str(CBR_PACKET)),
    )  # fmt: skip
    return sender, sink, count


def finish_cbr(
    udp: tuple[subprocess.Popen[str], subprocess.Popen[str], int], case: Case, seconds: float
) -> Results:
    sender, sink, count = udp
    sender.communicate(timeout=seconds + 30)
    out, _ = sink.communicate(timeout=seconds + 30)
    got = json.loads(out)
    delays = sorted(got["delays_ms"])
    return {
        "offered_mbit": case.cbr_mbit,
        "sent": count,
        "received": got["unique"],
        "delivered_mbit": got["unique"] * CBR_PACKET * 8 / seconds / 1e6,
        "loss": 1 - got["unique"] / count,
        "delay_ms": {f"p{q}": pct(delays, q) for q in (50, 95, 99)},
    }


def pct(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def summarize(r: Results) -> None:
    """The per-case figures the research reports."""
    downs = [f["mbit"] for f in r["flows"] if f["dir"] == "down"]
    ups = [f["mbit"] for f in r["flows"] if f["dir"] == "up"]
    r["down_mbit"] = sum(downs)
    r["up_mbit"] = sum(ups)
    if len(r["flows"]) > 1:
        r["jain"] = jain(downs + ups) if not r["flows"][1]["start_s"] else None
    if r.get("ping"):
        rtts = sorted(rtt for _, rtt in r["ping"])
        r["ping_mean_ms"] = statistics.fmean(rtts)
        r["ping_median_ms"] = pct(rtts, 50)
        r["ping_p95_ms"] = pct(rtts, 95)
        # bufferbloat shows as a latency that grows while the download runs
        early = [rtt for t, rtt in r["ping"] if WARMUP_S <= t < WARMUP_S + 3]
        late = [rtt for t, rtt in r["ping"] if t >= r["seconds"] - 3]
        r["ping_early_ms"] = statistics.fmean(early) if early else None
        r["ping_late_ms"] = statistics.fmean(late) if late else None
    if r.get("ping_paths"):
        r["ping_by_paths"] = by_paths(r["ping_paths"])
    if r["test"] == "2":
        r.update(convergence(r))


def by_paths(rows: list[list[int | float | None]]) -> dict[str, Results]:
    """Pings grouped by (request path, reply path), e.g. "1-2": their share and mean RTT;
    "reply_with_choice": the share of replies sent when more than one path had room (the
    only time the scheduler chooses)."""
    groups: dict[str, list[float]] = {}
    for _, rtt, request, reply, _ in rows:
        groups.setdefault(f"{request}-{reply}", []).append(float(rtt or 0.0))
    out: Results = {
        key: {"share": len(v) / len(rows), "mean_ms": statistics.fmean(v)}
        for key, v in sorted(groups.items())
    }
    rooms = [room for *_, room in rows if room is not None]
    out["reply_with_choice"] = sum(1 for r in rooms if int(r) > 1) / len(rooms) if rooms else None
    return out


def convergence(r: Results) -> Results:
    """Test 2: how long the second download takes to its fair share (its 0.5 s rate within
    20 % of the first's, for good; None if not within the run), Jain's index over the rest,
    and how long the queue's sojourn takes from its slow-start peak back to the 5 ms target."""
    first, second = (f["timeline_mbit"] for f in r["flows"])
    start = int(r["flows"][1]["start_s"] / BIN_S)
    fair_at = None
    for i in range(start, len(second)):
        both = first[i:], second[i:]
        if all(abs(a - b) <= 0.2 * max(a, b) for a, b in zip(*both, strict=True)):
            fair_at = (i - start) * BIN_S
            break
    shared = [(a, b) for a, b in zip(first[start + 2 :], second[start + 2 :], strict=True)]
    early = [(t, sojourn) for t, sojourn, *_ in r["queue_trace"] if t <= 3.0]
    settle = None
    if early:
        peak_t, peak = max(early, key=lambda s: s[1])
        back = [t for t, sojourn, *_ in r["queue_trace"] if t > peak_t and sojourn <= 5.0]
        settle = back[0] - peak_t if back and peak > 5.0 else None
    return {
        "fair_share_after_s": fair_at,
        "fair_share_reached": fair_at is not None,
        "jain_shared": statistics.fmean(jain([a, b]) for a, b in shared) if shared else None,
        "sojourn_settle_s": settle,
    }


# ---- the experiment ----------------------------------------------------------------------------


def run(
    cases: list[Case],
    runs: int,
    seconds: float,
    raw: Path | None = None,
    cwnd: str = "static",
    reorder: str = "20ms",
    ping_bytes: int = 56,
) -> list[Results]:
    """Every case in every run, one testbed per network per run (so drift hits all); the
    cases measured so far are kept in ``raw`` (JSON) after each one."""
    measured: list[Results] = []
    for n in range(1, runs + 1):
        for network, links in NETWORKS.items():
            todo = [c for c in cases if c.network == network]
            if not todo:
                continue
            with MultiCellTestbed(links) as topo:
                for case in todo:
                    log(f"run {n}/{runs}: {case.label}")
                    result = run_case(topo, case, seconds, cwnd, reorder, ping_bytes)
                    result["run"] = n
                    measured.append(result)
                    if raw:
                        raw.write_text(json.dumps(measured))
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mts_lab.tunnel.experiment")
    sub = parser.add_subparsers(dest="cmd")
    sample = sub.add_parser("sample", help="(internal) the queue sampler, in the MEC namespace")
    sample.add_argument("token")
    sample.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--out", default="docs/results/tunnel")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--tests", default="", help="comma-separated tests (default: all)")
    parser.add_argument("--cwnd", default="static", choices=["static", "adaptive", "delay"],
                        help="the paths' windows (static: the research's BDP)")  # fmt: skip
    parser.add_argument(
        "--reorder-timeout", default="20ms", help="TUNNEL_REORDER_TIMEOUT (0: no ordering)"
    )
    parser.add_argument(
        "--ping-bytes", type=int, default=56, help="ping payload (the research's filled the MTU)"
    )
    args = parser.parse_args(argv)
    if args.cmd == "sample":
        sample_queue(args.token, 0.1, args.seconds)
        return 0
    from mts_lab.results import save_results
    from mts_lab.tunnel import report

    wanted = set(args.tests.split(",")) if args.tests else None
    cases = [c for c in CASES if wanted is None or c.test in wanted]
    load_before = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measured = run(
        cases, args.runs, args.seconds, out / "cases.partial.json", args.cwnd,
        args.reorder_timeout, args.ping_bytes,
    )  # fmt: skip
    results: Results = {
        "runs": args.runs, "seconds": args.seconds, "cwnd": args.cwnd, "load_before": load_before,
        "reorder_timeout": args.reorder_timeout, "ping_bytes": args.ping_bytes,
        "load_after": os.getloadavg(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "networks": {k: [vars(link) for link in v] for k, v in NETWORKS.items()},
        "cases": measured,
    }  # fmt: skip
    results["summary"] = report.summary(measured)
    save_results(results, out, "tunnel", report.plot, report.table)
    (out / "cases.partial.json").unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
