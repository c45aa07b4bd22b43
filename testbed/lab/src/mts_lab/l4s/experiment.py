"""``make experiment-l4s``: research 001's Table 7.1 rebuilt in namespaces (issue 14).

One Prague and one CUBIC flow share the emulator's WAN bottleneck (100 Mbit/s DualPI2,
30 ms each way: base RTT 60 ms), from one server namespace to one client namespace,
marked with the spin bit in some runs and the delay bit in others (one technique per
run, as the research; ``--techniques`` adds the delay bit with GSO kept, ``delay_run``).
The observer on the MEC host gives each flow's RTT samples in both modes (raw =
Spindump's rules, filtered = ours). Two truths: TCP_INFO's RTT of each sender (smoothed;
the research read ``ss`` every second), read every 100 ms (a sample against the next read)
and every 5 ms (a sample against the read when the sender measures the same round trip),
and, like for like, the senders' own RTT samples (``mts_lab.l4s.truth``: TCP's mrtt, once
per round trip).

Per run and flow: throughput (MiB per run), retransmissions, truth mean/std, observer
mean/std, and the error of each observer sample against the truth at its time (|sample −
truth|, p50/p90), and against the median of the sender's samples over the sample's own
round trip. ``--reorder-pct`` gives Tables 7.2/7.3 (reordering); Tables 8.1-8.5 are
``mts_lab.l4s.tables8``.

    uv run python -m mts_lab.l4s.experiment --out docs/results/l4s [--runs 5 --seconds 60]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import secrets
import socket
import statistics
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mec_l4s.efm import Marker, Technique
from mec_l4s.observer import Observer, Rules, Sample
from mec_l4s.prague import Prague
from mts_lab.l4s.bed import (
    MARKER_OBJ,
    OBSERVER_OBJ,
    REPO,
    WanLine,
    connect,
    tcp_info_rtt_ms,
)
from mts_lab.l4s.truth import (
    EXCESS_MS,
    SenderRtt,
    TcpRtt,
    TcpSeries,
    coincident_share,
    in_excess,
    sender_rtt_name,
)
from mts_lab.results import Results, pyplot, save_results

PRAGUE_OBJ = REPO / "build/bpf/prague.bpf.o"
SENDER_RTT_OBJ = REPO / "build/bpf/sender_rtt.bpf.o"
LOADER = REPO / "build/bin/meld-loader"
MIB = 1 << 20

# research 001, Table 7.1 (virtual plant, 60 s, one run each): MiB, RTT mean/std (ms), retx
PUBLISHED = {
    ("spin", "prague"): {"mib": 391, "rtt_mean_ms": 60.3, "rtt_std_ms": 2.4, "retrans": 0},
    ("spin", "cubic"): {"mib": 317, "rtt_mean_ms": 68.9, "rtt_std_ms": 7.2, "retrans": 11},
    ("delay", "prague"): {"mib": 375, "rtt_mean_ms": 60.4, "rtt_std_ms": 2.1, "retrans": 0},
    ("delay", "cubic"): {"mib": 331, "rtt_mean_ms": 70.1, "rtt_std_ms": 9.0, "retrans": 15},
}

# the delay bit with GSO kept (not the research's) is compared with the research's delay bit
PUBLISHED_AS = {"delay_run": "delay"}
TECHNIQUES = {t.name.lower(): t for t in (Technique.SPIN, Technique.DELAY, Technique.DELAY_RUN)}
DEFAULT_TECHNIQUES = "spin,delay"

# research 001, Tables 7.2 (mean RTT, ms) and 7.3 (std dev, ms) per WAN reorder rate (%):
# per CCA, socket statistics ("ss", from the delay-bit runs' hosts), spin bit, delay bit
PUBLISHED_REORDER = {
    "0": {"prague": {"ss": [60.4, 0.0], "spin": [60.3, 2.4], "delay": [60.4, 2.1]},
          "cubic": {"ss": [70.4, 5.8], "spin": [68.9, 7.2], "delay": [70.1, 9.0]}},
    "0.001": {"prague": {"ss": [60.5, 0.3], "spin": [37.6, 23.3], "delay": [60.4, 2.4]},
              "cubic": {"ss": [70.7, 5.8], "spin": [49.5, 30.1], "delay": [70.5, 9.9]}},
    "0.01": {"prague": {"ss": [60.6, 0.8], "spin": [26.4, 22.4], "delay": [60.6, 3.4]},
             "cubic": {"ss": [65.3, 6.1], "spin": [44.4, 26.4], "delay": [65.2, 10.1]}},
    "0.1": {"prague": {"ss": [61.1, 1.0], "spin": [20.2, 21.0], "delay": [62.3, 5.6]},
            "cubic": {"ss": [62.2, 4.0], "spin": [7.5, 7.7], "delay": [63.0, 10.9]}},
}  # fmt: skip


@dataclass
class FlowRun:
    cca: str
    port: int = 0
    received: int = 0
    retrans: int = 0
    segs_in: int = 0  # segments the sender received (its ACKs)
    truth: list[tuple[int, float]] = field(default_factory=list)  # (monotonic ns, ms)
    # TCP_INFO read every TRUTH_AT_PERIOD_S by a thread of its own: the value at the time
    # of each observer sample, where ``truth`` (every 100 ms, the research's kind of
    # polling) gives the value up to 100 ms after it
    truth_at: list[tuple[int, float]] = field(default_factory=list)


TRUTH_AT_PERIOD_S = 0.005
# the sweep of TCP_INFO's time after an observer sample (ms), to show the error's dependence
SHIFTS_MS = (0, 15, 30, 45, 60, 90)


def _read_tcp_info(conn: socket.socket, flow: FlowRun, stop: threading.Event) -> None:
    while not stop.wait(TRUTH_AT_PERIOD_S):
        flow.truth_at.append((time.monotonic_ns(), tcp_info_rtt_ms(conn)))


def _retrans_and_segs_in(sock: socket.socket) -> tuple[int, int]:
    """tcpi_total_retrans (byte 100) and tcpi_segs_in (byte 140) of struct tcp_info."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 144)
    return struct.unpack_from("I", raw, 100)[0], struct.unpack_from("I", raw, 140)[0]


def _sender(
    line: WanLine, flow: FlowRun, cca: str, seconds: float, ready: threading.Event, mss: int
) -> None:
    """Listen, accept one connection, send for ``seconds``, sampling TCP_INFO; ``mss``: the
    connection's MSS (TCP_MAXSEG on the listener, as iperf3 -M; 0: the path's)."""
    from mec_common.netns import in_netns

    def listen() -> socket.socket:
        s = socket.socket()
        if mss:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        # on the listener: its CCA decides the handshake (Prague accepts Accurate ECN)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
        s.bind((line.server_ip, 0))
        s.listen(1)
        return s

    ls = in_netns(line.server_ns, listen)
    flow.port = ls.getsockname()[1]
    ready.set()
    conn, _ = ls.accept()
    ls.close()
    stop = threading.Event()
    reader = threading.Thread(target=_read_tcp_info, args=(conn, flow, stop))
    with conn:
        reader.start()
        end = time.monotonic() + seconds
        next_tick = time.monotonic()
        block = b"x" * 65536
        while time.monotonic() < end:
            conn.sendall(block)
            if time.monotonic() >= next_tick:
                flow.truth.append((time.monotonic_ns(), tcp_info_rtt_ms(conn)))
                next_tick += 0.1
        stop.set()
        reader.join()
        flow.retrans, flow.segs_in = _retrans_and_segs_in(conn)


def _receiver(line: WanLine, flow: FlowRun, cca: str) -> None:
    # a Prague receiver asks for Accurate ECN (its CCA's flags); CUBIC's for no ECN
    sock = connect(line.client_ns, line.server_ip, flow.port, cca, timeout=30)
    with sock:
        while n := len(sock.recv(1 << 16)):
            flow.received += n


def one_run(
    line: WanLine,
    prague: Prague,
    technique: Technique,
    seconds: float,
    dump: Path | None = None,
    spin_guard: bool = False,
    mss: int = 0,
    objects: tuple[Path, Path] = (MARKER_OBJ, OBSERVER_OBJ),
) -> dict[str, Any]:
    """One run of both flows; ``dump``: write every sample of it there (JSON lines);
    ``spin_guard``: the endpoints' optional spin ordering guard on; ``mss``: the senders'
    MSS (0: the path's); ``objects``: the marker's and observer's BPF objects."""
    marker_obj, observer_obj = objects
    observer = Observer.load(observer_obj, f"mts-obs-x{secrets.token_hex(3)}")
    markers: list[Marker] = []
    truth: SenderRtt | None = None
    try:
        observer.configure()
        observer.attach("m0", line.mec_ns)
        observer.attach("wan0", line.mec_ns)
        # before the marker's: its ingress program ends the interface's tcx chain
        truth = SenderRtt.load(SENDER_RTT_OBJ, sender_rtt_name())
        truth.watch_acks("wan0", line.server_ns)
        for ns, ifname, ect1 in ((line.client_ns, "c0", False), (line.server_ns, "wan0", True)):
            m = Marker.load(marker_obj, f"mts-efm-x{secrets.token_hex(3)}")
            markers.append(m)
            m.configure(technique, dynamic_t_max=True, ect1=ect1, spin_guard=spin_guard)
            m.attach(ifname, ns)
        flows = {"prague": FlowRun("prague"), "cubic": FlowRun("cubic")}
        ccas = {"prague": prague.name, "cubic": "cubic"}
        threads = _start_flows(line, flows, ccas, seconds, truth, mss)
        samples: list[Sample] = []
        tcp: list[TcpRtt] = []
        while any(t.is_alive() for t in threads):
            samples += observer.poll()
            tcp += truth.poll()
            time.sleep(0.05)
        samples += observer.poll()
        tcp += truth.poll()
        if dump is not None:
            _dump(dump, samples, tcp)
        return {name: _summarise(flow, samples, tcp, line) for name, flow in flows.items()} | {
            "observer": observer.counters(),
            "sender_rtt": truth.counters(),
            "excess_coincidence": _excess_coincidence(flows, tcp, line),
        }
    finally:
        if truth is not None:
            truth.close()
        for m in markers:
            m.close()
        observer.close()


def _excess_coincidence(
    flows: dict[str, FlowRun], tcp: list[TcpRtt], line: WanLine
) -> dict[str, float]:
    """How often one flow's excess round (mrtt > srtt + 5 ms) falls within 30 ms of one of
    the other flow's, and how often it would by chance (the other's excess rate × 60 ms):
    a cause both flows share (the host, the emulator) shows as more than chance."""
    times = {
        name: sorted(
            s.t_ns for s in tcp if s.local == f"{line.server_ip}:{flow.port}" and in_excess(s)
        )
        for name, flow in flows.items()
    }
    seconds = max(1e-9, _span_s(sorted(s.t_ns for s in tcp)))
    out = {}
    for name, other in (("prague", "cubic"), ("cubic", "prague")):
        out[name] = coincident_share(times[name], times[other], 30_000_000)
        out[f"{name}_by_chance"] = min(1.0, len(times[other]) / seconds * 0.060)
    return out


def _dump(path: Path, samples: list[Sample], tcp: list[TcpRtt]) -> None:
    with path.open("w") as out:
        for s in samples:
            row = {"t_ns": s.t_ns, "server": s.server, "rtt_ms": s.rtt_ms, "kind": s.kind.name,
                   "rules": s.rules.name, "measurement": s.measurement}  # fmt: skip
            out.write(json.dumps(row) + "\n")
        for t in tcp:
            row = {"t_ns": t.t_ns, "server": t.local, "mrtt_ms": t.mrtt_ms, "srtt_ms": t.srtt_ms}
            out.write(json.dumps(row) + "\n")


def _start_flows(
    line: WanLine,
    flows: dict[str, FlowRun],
    ccas: dict[str, str],
    seconds: float,
    truth: SenderRtt,
    mss: int = 0,
) -> list[threading.Thread]:
    """Each flow's sender and receiver in threads; the senders' listeners are created in
    the truth's cgroup, so their connections report TCP's own RTT samples."""
    threads = []
    with truth.sockets():
        for name, flow in flows.items():
            ready = threading.Event()
            t = threading.Thread(target=_sender, args=(line, flow, ccas[name], seconds, ready, mss))
            t.start()
            ready.wait(10)
            threads.append(t)
            r = threading.Thread(target=_receiver, args=(line, flow, ccas[name]))
            r.start()
            threads.append(r)
    return threads


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "mean_ms": statistics.fmean(values),
        "std_ms": statistics.pstdev(values),  # population std dev, as the research
        "p50_ms": statistics.median(values),
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _errors(errors: list[float], prefix: str) -> dict[str, float]:
    """p50/p90 of |error| and the median signed error (the bias), as ``<prefix>_...``."""
    if not errors:
        return {}
    magnitudes = [abs(e) for e in errors]
    return {
        f"{prefix}_p50_ms": _percentile(magnitudes, 0.5),
        f"{prefix}_p90_ms": _percentile(magnitudes, 0.9),
        f"{prefix}_bias_ms": statistics.median(errors),
    }


def _summarise(
    flow: FlowRun, samples: list[Sample], tcp: list[TcpRtt], line: WanLine
) -> dict[str, Any]:
    """One flow of one run: throughput, retransmissions, the truths and the observer's
    samples against each: TCP_INFO's smoothed RTT at the sample's time (``abs_error``),
    and the sender's own RTT samples over the observer sample's round trip (``vs_tcp``:
    the median mrtt TCP took in [t − rtt, t])."""
    server = f"{line.server_ip}:{flow.port}"
    mine = [s for s in samples if s.server == server]
    sender = TcpSeries([s for s in tcp if s.local == server])
    info_times = [t for t, _ in flow.truth]

    def tcp_info_at(t_ns: int) -> float | None:
        i = bisect.bisect_left(info_times, t_ns)
        return flow.truth[i][1] if 0 < i < len(info_times) else None

    at_times = [t for t, _ in flow.truth_at]

    def tcp_info_near(t_ns: int) -> float | None:
        """TCP_INFO read nearest to t (within two reading periods)."""
        i = bisect.bisect_left(at_times, t_ns)
        near = [j for j in (i - 1, i) if 0 <= j < len(at_times)]
        j = min(near, key=lambda j: abs(at_times[j] - t_ns), default=None)
        if j is None or abs(at_times[j] - t_ns) > 2 * TRUTH_AT_PERIOD_S * 1e9:
            return None
        return flow.truth_at[j][1]

    mrtts = [s.mrtt_ms for s in sender.samples]
    seconds = _span_s(sender.times)
    out: dict[str, Any] = {
        "mib": flow.received / MIB,
        "retrans": flow.retrans,
        "truth": _stats([v for _, v in flow.truth[5:]])
        | {"reads_at_per_s": len(at_times) / max(1e-9, _span_s(at_times))}
        # how far TCP_INFO moves in 100 ms: what reading it up to 100 ms late can add
        | _errors(
            [
                later - v
                for t, v in flow.truth_at
                if (later := tcp_info_near(t + 100_000_000)) is not None
            ],
            "change_100ms",
        ),
        # TCP's own samples: how often against the ACKs the sender got; how far TCP_INFO
        # (smoothed, every 100 ms) is from them (the old measure's floor for any
        # per-round-trip sample); how far one is from the next (TCP against itself)
        "tcp_mrtt": _stats(mrtts)
        | {
            "per_s": len(mrtts) / seconds if seconds else 0.0,
            "acks_in_per_s": flow.segs_in / seconds if seconds else 0.0,
        }
        | _errors(
            [s.mrtt_ms - v for s in sender.samples if (v := tcp_info_at(s.t_ns)) is not None],
            "vs_tcp_info",
        )
        | _errors(
            [s.mrtt_ms - v for s in sender.samples if (v := tcp_info_near(s.t_ns)) is not None],
            "vs_tcp_info_at",
        )
        | _errors(sender.round_to_round(), "round_to_round")
        | {"excess_share": sum(map(in_excess, sender.samples)) / max(1, len(mrtts))}
        | _ack_waits(sender.samples),
    }
    for rules in Rules:
        e2e = [s for s in mine if s.rules == rules and s.measurement == "e2e"]
        row = _stats([s.rtt_ms for s in e2e])
        row |= _errors(
            [s.rtt_ms - v for s in e2e if (v := tcp_info_at(s.t_ns)) is not None], "abs_error"
        )
        # the same truth read when the sender measures the same round trip: the segment
        # that closed the sample is acked at the sender one way (observer -> sender: the
        # WAN's delay, the client side being a veth) after the observer saw the sample end
        # (docs/l4s.md); the sweep and the read at t itself show the dependence
        shift_ns = round(line.delay_ms * 1e6)
        row |= _errors(
            [s.rtt_ms - v for s in e2e if (v := tcp_info_near(s.t_ns + shift_ns)) is not None],
            "at_error",
        )
        for ms in SHIFTS_MS:
            errors = [s.rtt_ms - v for s in e2e
                      if (v := tcp_info_near(s.t_ns + ms * 1_000_000)) is not None]  # fmt: skip
            row |= _errors(errors, f"shift{ms}_error")
        # against TCP's samples over the observer sample's round trip; apart: rounds where
        # one of them was in excess (> srtt + 5 ms) and the others ("calm")
        calm: list[float] = []
        excess: list[float] = []
        own_excess = 0  # the observer's samples > TCP's srtt + 5 ms: does it see excess too?
        for s in e2e:
            if window := sender.window(s.t_ns, s.rtt_ms):
                error = s.rtt_ms - statistics.median(w.mrtt_ms for w in window)
                (excess if any(in_excess(w) for w in window) else calm).append(error)
                own_excess += s.rtt_ms > statistics.median(w.srtt_ms for w in window) + EXCESS_MS
        row |= _errors(calm + excess, "vs_tcp") | {"vs_tcp_matched": len(calm) + len(excess)}
        # against TCP's samples less the ACK's wait inside the sender (the wire RTT)
        wire = [
            s.rtt_ms - statistics.median(w)
            for s in e2e
            if (w := [x.wire_ms for x in sender.window(s.t_ns, s.rtt_ms) if x.wire_ms is not None])
        ]
        row |= _errors(wire, "vs_wire")
        row |= _errors(calm, "vs_tcp_calm") | _errors(excess, "vs_tcp_excess")
        row["vs_tcp_excess_share"] = len(excess) / max(1, len(calm) + len(excess))
        row["own_excess_share"] = own_excess / max(1, len(calm) + len(excess))
        # per direction of the packets that carried the edges or samples: under WAN
        # reordering the client's are in order at the observer, yet the client reacts to
        # the reordered segments it received (its spin rule has no guard)
        for sender_side, from_client in (("client", True), ("server", False)):
            carried = [s.rtt_ms for s in e2e if s.from_client == from_client]
            if carried:
                row[f"from_{sender_side}_mean_ms"] = statistics.fmean(carried)
                row[f"from_{sender_side}_n"] = len(carried)
        for side in ("client_side", "server_side"):
            half = [s.rtt_ms for s in mine if s.rules == rules and s.measurement == side]
            if half:
                row[f"{side}_p50_ms"] = _percentile(half, 0.5)
                row[f"{side}_p90_ms"] = _percentile(half, 0.9)
        out[rules.name.lower()] = row
    return out


def _ack_waits(samples: list[TcpRtt]) -> dict[str, float]:
    """How long TCP's samples waited inside the sender after their ACK reached its
    interface, p50/p90, in all rounds, the excess ones and the calm ones."""
    out: dict[str, float] = {}
    for name, keep in (("", lambda s: True), ("excess_", in_excess),
                       ("calm_", lambda s: not in_excess(s))):  # fmt: skip
        waits = [s.ack_wait_ms for s in samples if s.ack_wait_ms is not None and keep(s)]
        if waits:
            out[f"ack_wait_{name}p50_ms"] = _percentile(waits, 0.5)
            out[f"ack_wait_{name}p90_ms"] = _percentile(waits, 0.9)
    out["ack_wait_known"] = sum(s.ack_wait_ms is not None for s in samples) / max(1, len(samples))
    return out


def _span_s(times_ns: list[int]) -> float:
    return (times_ns[-1] - times_ns[0]) / 1e9 if len(times_ns) > 1 else 0.0


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (t, n - 1)."""
    t95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
    if len(values) < 2:
        return (values[0] if values else float("nan")), float("nan")
    return statistics.fmean(values), t95.get(len(values) - 1, 2.0) * statistics.stdev(values) / len(
        values
    ) ** 0.5


# per mode: the observer against TCP_INFO (abs_error) and against TCP's own samples
OBSERVER_KEYS = (
    "mean_ms", "std_ms", "abs_error_p50_ms", "abs_error_p90_ms", "at_error_p50_ms",
    "at_error_p90_ms", "at_error_bias_ms", *(f"shift{ms}_error_p90_ms" for ms in SHIFTS_MS),
    "vs_tcp_p50_ms",
    "vs_tcp_p90_ms", "vs_tcp_bias_ms", "vs_tcp_calm_p50_ms", "vs_tcp_calm_p90_ms",
    "vs_tcp_excess_p50_ms", "vs_tcp_excess_share", "own_excess_share", "vs_wire_p50_ms",
    "vs_wire_p90_ms", "from_client_mean_ms", "from_server_mean_ms",
    "client_side_p50_ms",
    "client_side_p90_ms", "server_side_p50_ms", "server_side_p90_ms",
)  # fmt: skip
TCP_KEYS = (
    "mean_ms", "per_s", "acks_in_per_s", "vs_tcp_info_p50_ms", "vs_tcp_info_p90_ms",
    "vs_tcp_info_at_p90_ms",
    "round_to_round_p50_ms", "round_to_round_p90_ms", "excess_share", "ack_wait_p50_ms",
    "ack_wait_p90_ms", "ack_wait_excess_p50_ms", "ack_wait_calm_p50_ms", "ack_wait_known",
)  # fmt: skip


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for technique in TECHNIQUES:
        for cca in ("prague", "cubic"):
            rows = [r[cca] for r in runs if r["technique"] == technique]
            if not rows:
                continue

            def ci(get: Any, rows: list[dict[str, Any]] = rows) -> list[float]:
                vals = [v for v in (get(r) for r in rows) if v is not None]
                return list(mean_ci(vals))

            table[f"{technique}/{cca}"] = {
                "runs": len(rows),
                "mib": ci(lambda r: r["mib"]),
                "retrans": ci(lambda r: r["retrans"]),
                "truth_mean_ms": ci(lambda r: r["truth"].get("mean_ms")),
                "truth_std_ms": ci(lambda r: r["truth"].get("std_ms")),
                "truth_change_100ms_p90_ms": ci(lambda r: r["truth"].get("change_100ms_p90_ms")),
                **{
                    f"{mode}_{key}": ci(lambda r, m=mode, k=key: r[m].get(k))
                    for mode in ("raw", "filtered")
                    for key in OBSERVER_KEYS
                },
                **{f"tcp_{key}": ci(lambda r, k=key: r["tcp_mrtt"].get(k)) for key in TCP_KEYS},
                "published": PUBLISHED[(PUBLISHED_AS.get(technique, technique), cca)],
            }
    return table


def table(results: Results) -> str:
    lines = [
        f"L4S Table 7.1 rebuilt: {results['runs']} run(s) x {results['seconds']} s per technique, "
        f"load before {results['load_before']}, after {results['load_after']}",
        f"{'technique/cca':14} {'MiB':>14} {'retx':>10} {'truth ms':>18} "
        f"{'raw ms':>18} {'filtered ms':>18} {'|e| p90 info 100ms/at':>21} {'|e| p50/p90 tcp':>15} "
        f"{'tcp self p90':>12}  published (MiB, mean±std, retx)",
    ]

    def f(v: list[float], digits: int = 1) -> str:
        return f"{v[0]:.{digits}f}±{v[1]:.{digits}f}"

    for key, row in results["table"].items():
        pub = row["published"]
        lines.append(
            f"{key:14} {f(row['mib']):>14} {f(row['retrans']):>10} "
            f"{f(row['truth_mean_ms'])}/{row['truth_std_ms'][0]:.1f} "
            f"{f(row['raw_mean_ms']):>12}/{row['raw_std_ms'][0]:.1f} "
            f"{f(row['filtered_mean_ms']):>12}/{row['filtered_std_ms'][0]:.1f} "
            f"{row['filtered_abs_error_p90_ms'][0]:>12.2f}/"
            f"{row['filtered_at_error_p90_ms'][0]:<8.2f} "
            f"{row['filtered_vs_tcp_p50_ms'][0]:>7.2f}/{row['filtered_vs_tcp_p90_ms'][0]:<7.2f} "
            f"{row['tcp_round_to_round_p90_ms'][0]:>12.2f}  "
            f"{pub['mib']}, {pub['rtt_mean_ms']}±{pub['rtt_std_ms']}, {pub['retrans']}"
        )
    lines.append(
        "(values: mean ± 95 % CI half-width over runs; '/x' = mean of the per-run std dev; "
        "|e| info = filtered sample vs TCP_INFO read next after it (every 100 ms) / "
        "read when the sender measures the same round trip (t + the WAN's one-way delay); "
        "|e| tcp = vs the median of the sender's own RTT samples over the sample's round trip; "
        "tcp self = |mrtt - previous mrtt| of the sender)"
    )
    return "\n".join(lines)


def table_reorder(results: Results) -> str:
    """Tables 7.2/7.3: mean and std dev of each truth and method per reorder rate; each row
    with its runs × seconds (``mts_lab.l4s.reorder`` assembles rows of several sources)."""
    lines = [
        "L4S Tables 7.2/7.3 rebuilt"
        + (f", load before {results['load_before']}, after {results['load_after']}"
           if "load_before" in results else f" from {', '.join(results.get('sources', []))}"),
        f"{'reorder %':>9} {'technique/cca':16} {'runs':>7} {'TCP_INFO':>12} {'raw':>12} "
        f"{'filtered':>12} {'|e| p90 tcp raw/filt':>21}  published (ss, method: mean/std)",
    ]  # fmt: skip
    for rate, rows in results["tables"].items():
        for key, row in rows.items():
            technique, cca = key.split("/")
            pub = results["published"].get(rate, {}).get(cca)
            method = technique.split("+")[0]  # spin+guard: compared with the spin bit
            published = (
                f"{pub['ss'][0]}/{pub['ss'][1]}, {pub[method][0]}/{pub[method][1]}" if pub else "-"
            )
            n, seconds = (
                row.get("runs", results.get("runs")),
                row.get("seconds", results.get("seconds")),
            )
            runs = f"{n}x{seconds:g}"
            lines.append(
                f"{rate:>9} {key:16} {runs:>7} "
                f"{row['truth_mean_ms'][0]:>7.1f}/{row['truth_std_ms'][0]:<4.1f} "
                f"{row['raw_mean_ms'][0]:>7.1f}/{row['raw_std_ms'][0]:<4.1f} "
                f"{row['filtered_mean_ms'][0]:>7.1f}/{row['filtered_std_ms'][0]:<4.1f} "
                f"{row['raw_vs_tcp_p90_ms'][0]:>10.1f}/{row['filtered_vs_tcp_p90_ms'][0]:<10.1f} "
                + published
            )
    lines.append(
        "(mean/std in ms: means over runs of each run's mean and population std dev; "
        "runs: runs x seconds)"
    )
    return "\n".join(lines)


def plot_reorder(results: Results, path: Path) -> None:
    plt = pyplot()

    rates = list(results["tables"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, technique in zip(axes, ("spin", "delay"), strict=True):
        for cca, style in (("prague", "-"), ("cubic", "--")):
            key = f"{technique}/{cca}"
            for field_, label in (("truth_mean_ms", "TCP_INFO"), ("raw_mean_ms", "raw"),
                                  ("filtered_mean_ms", "filtered")):  # fmt: skip
                points = [(i, results["tables"][r][key][field_]) for i, r in enumerate(rates)
                          if key in results["tables"][r]]  # fmt: skip
                ax.errorbar([i for i, _ in points], [v[0] for _, v in points],
                            yerr=[v[1] if v[1] == v[1] else 0 for _, v in points], fmt=style,
                            marker="o", capsize=3, label=f"{cca} {label}")  # fmt: skip
            guard = f"spin+guard/{cca}"
            for field_, marker, label in (("filtered_mean_ms", "*", "filtered"),
                                          ("raw_mean_ms", "^", "raw")):  # fmt: skip
                guarded = [(i, results["tables"][r][guard][field_][0])
                           for i, r in enumerate(rates)
                           if technique == "spin" and guard in results["tables"][r]]  # fmt: skip
                if guarded:
                    ax.scatter([i for i, _ in guarded], [v for _, v in guarded], marker=marker,
                               s=90, zorder=4, label=f"{cca} {label} + endpoint guard")  # fmt: skip
            pub = [results["published"].get(r, {}).get(cca, {}).get(technique) for r in rates]
            ax.scatter([i for i, p in enumerate(pub) if p], [p[0] for p in pub if p],
                       marker="x", color="k", zorder=3)  # fmt: skip
        ax.set_xticks(range(len(rates)), [f"{r} %" for r in rates])
        ax.set_title(f"{technique} bit: mean RTT vs WAN reordering (x: published)")
        ax.set_xlabel("packets reordered")
        ax.legend(fontsize=6)
    axes[0].set_ylabel("mean RTT (ms)")
    fig.tight_layout()
    fig.savefig(path)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()

    keys = list(results["table"])
    fig, ax = plt.subplots(figsize=(8, 4))
    for i, (label, field_) in enumerate(
        [("TCP_INFO", "truth_mean_ms"), ("raw", "raw_mean_ms"), ("filtered", "filtered_mean_ms")]
    ):
        vals = [results["table"][k][field_] for k in keys]
        ax.bar([j + i * 0.25 for j in range(len(keys))], [v[0] for v in vals], 0.25,
               yerr=[v[1] if v[1] == v[1] else 0 for v in vals], label=label)  # fmt: skip
    ax.scatter([j + 0.25 for j in range(len(keys))],
               [results["table"][k]["published"]["rtt_mean_ms"] for k in keys],
               marker="x", color="k", zorder=3, label="published (thesis)")  # fmt: skip
    ax.set_xticks([j + 0.25 for j in range(len(keys))], keys)
    ax.set_ylabel("mean RTT (ms)")
    ax.set_title("Spin/delay-bit RTT vs TCP_INFO, Prague + CUBIC through DualPI2")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def run_all(args: argparse.Namespace, rates: list[float], first: int = 0) -> list[dict[str, Any]]:
    """Every run: ``args.runs`` × each technique × each WAN reorder rate (%), numbered from
    ``first`` (after the runs of earlier holds)."""
    runs = []
    techniques = [TECHNIQUES[t] for t in args.techniques.split(",")]
    numbers = range(first, first + args.runs)
    with loaded_prague() as prague:
        for rate, run, technique in itertools.product(rates, numbers, techniques):
            line = WanLine.create(
                30.0, rate_mbps=args.rate_mbps, queue="dualpi2", prefix="l4x", reorder_pct=rate
            )
            name = f"run{run}-{technique.name.lower()}" + (f"-reorder{rate}" if rate else "")
            dump = None
            if args.dump is not None:
                args.dump.mkdir(parents=True, exist_ok=True)
                dump = args.dump / f"{name}.jsonl"
            try:
                result = one_run(line, prague, technique, args.seconds, dump, args.spin_guard)
            finally:
                line.down()
            result |= {"technique": technique.name.lower(), "run": run, "reorder_pct": rate}
            runs.append(result)
            mib = {cca: round(result[cca]["mib"]) for cca in ("prague", "cubic")}
            print(f"{name}: MiB {mib}", flush=True)
    return runs


@contextmanager
def loaded_prague() -> Iterator[Prague]:
    """Our Prague registered under a unique name for the block (the machine is shared)."""
    tag = secrets.token_hex(3)
    prague = Prague.load(
        LOADER, PRAGUE_OBJ, Path(f"/sys/fs/bpf/mts-prague-x{tag}"), f"prague_x{tag}"
    )
    try:
        yield prague
    finally:
        prague.close()


def experiment_arguments(description: str, seconds: float) -> argparse.ArgumentParser:
    """The options every L4S experiment has: output, runs, run length, bottleneck rate."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/l4s")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=seconds)
    parser.add_argument("--rate-mbps", type=float, default=100.0)
    return parser


def main() -> None:
    parser = experiment_arguments(__doc__.split("\n\n")[0], 60.0)
    parser.add_argument("--dump", type=Path, help="a directory for every run's samples")
    parser.add_argument(
        "--reorder-pct",
        help="comma-separated WAN reorder rates in %% (e.g. 0,0.01,0.1): Tables 7.2/7.3 "
        "(table-7-2-3) instead of Table 7.1",
    )
    parser.add_argument(
        "--spin-guard",
        action="store_true",
        help="the endpoints follow the spin value of the newest segments only",
    )
    parser.add_argument(
        "--techniques",
        default=DEFAULT_TECHNIQUES,
        help="comma-separated, of spin, delay (the research's, GSO off), delay_run (GSO "
        "kept); other than the default, Table 7.1 goes to table-7-1-<techniques>",
    )
    parser.add_argument(
        "--resume", action="store_true",
        help="add to the runs in --out's table (same run length and rate), so a sweep can "
        "be split across measurement-lock holds",
    )  # fmt: skip
    args = parser.parse_args()
    if unknown := set(args.techniques.split(",")) - set(TECHNIQUES):
        parser.error(f"unknown technique(s) {sorted(unknown)}: use {', '.join(TECHNIQUES)}")
    rates = [float(r) for r in args.reorder_pct.split(",")] if args.reorder_pct else [0.0]
    name = "table-7-2-3" if args.reorder_pct else "table-7-1"
    if args.reorder_pct is None and args.techniques != DEFAULT_TECHNIQUES:
        name += "-" + args.techniques.replace(",", "-").replace("_", "-")
    earlier, holds = earlier_runs(args, name) if args.resume else ([], [])
    hold = {"load_before": [round(x, 1) for x in os.getloadavg()], "utc_start": utc_now()}
    runs = earlier + run_all(args, rates, first=1 + max((r["run"] for r in earlier), default=-1))
    hold |= {"load_after": [round(x, 1) for x in os.getloadavg()], "utc_end": utc_now()}
    all_holds = [*holds, hold]
    results: Results = {
        "runs": len({r["run"] for r in runs}),
        "seconds": args.seconds,
        "rate_mbps": args.rate_mbps,
        "base_rtt_ms": 60,
        "load_before": all_holds[0]["load_before"],
        "load_after": hold["load_after"],
        "holds": all_holds,
        "per_run": runs,
        "spin_guard": args.spin_guard,
    }
    if args.reorder_pct is None:
        results["table"] = aggregate(runs)
        save_results(results, args.out, name, plot, table)
        return
    # every rate of the runs: an earlier hold may have run other rates (--resume)
    all_rates = sorted({r["reorder_pct"] for r in runs})
    results["reorder_pct"] = all_rates
    results["tables"] = {
        f"{rate:g}": aggregate([r for r in runs if r["reorder_pct"] == rate]) for rate in all_rates
    }
    results["published"] = PUBLISHED_REORDER
    save_results(results, args.out, name, plot_reorder, table_reorder)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def earlier_runs(
    args: argparse.Namespace, name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The runs and lock holds already in ``--out``'s ``<name>.json`` (none if absent), so a
    sweep can be split across measurement-lock holds; a file of another run length or rate
    or spin guard is refused rather than mixed in."""
    path = args.out / f"{name}.json"
    if not path.exists():
        return [], []
    old = json.loads(path.read_text())
    if old["seconds"] != args.seconds or old["rate_mbps"] != args.rate_mbps:
        raise SystemExit(
            f"{path}: {old['seconds']} s at {old['rate_mbps']} Mbit/s, not "
            f"{args.seconds} s at {args.rate_mbps}: use another --out"
        )
    if old.get("spin_guard", False) != getattr(args, "spin_guard", False):
        raise SystemExit(f"{path}: spin guard {old.get('spin_guard')}: use another --out")
    holds = old.get("holds") or [{"load_before": old["load_before"],
                                  "load_after": old["load_after"]}]  # fmt: skip
    return old["per_run"], holds


if __name__ == "__main__":
    main()
