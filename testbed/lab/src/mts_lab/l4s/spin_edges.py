"""Why the guarded spin bit reads short under WAN reordering: every spin edge traced
(issue 14).

One spin run of the Table 7.2 bed (``experiment.one_run``) with a packet capture at the
client (``c0``: what the MEC observer sees, a veth away) and at the server (``wan0``), the
two ends of the WAN that reorders. From the two captures (one clock):

- each packet's one-way WAN time; a packet that took less than the WAN's delay skipped it
  (the emulator's reordering: it overtook what was in the delay line);
- each endpoint's spin edges as it sent them, and the received packet it took each from
  (the last one before the edge with the value it took);
- the observer's filtered e2e samples, replayed on the client capture with the observer's
  rules (``--rule``: the objects' rule; checked against the observer's own mean in the
  same run);
- the smallest RTT the data sender could take from an ACK (Linux's ``rtt_min`` takes the
  newest segment an ACK or SACK covers, so one that overtook others lowers it);
- for each edge an endpoint accepted from an overtaking packet, how early it came: until
  the first packet that did not overtake brought the same value;
- each observer sample's shortfall: the earliness of the edges in its chain (the edge
  that closed it and the other endpoint's edge it answered). ``clean`` samples have none.

    uv run python -m mts_lab.l4s.spin_edges --reorder-pct 0.1 --seconds 30 \\
        [--rule newest --objects DIR]
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import signal
import statistics
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mec_l4s.efm import Technique
from mec_l4s.observer import MIN_GAP_PCT
from mts_lab.l4s.bed import MARKER_OBJ, OBSERVER_OBJ, REPO, WanLine
from mts_lab.l4s.experiment import loaded_prague, one_run, utc_now

SNAPLEN = 128
TIME_BIT = 0x02  # TCP byte 12's "time" bit (efm.h)
LINK_HEADER = {1: 14, 101: 0, 12: 0, 14: 0}  # pcap linktype -> bytes before IPv4


@dataclass
class Packet:
    t_ns: int
    src: str
    sport: int
    dport: int
    seq: int
    ack: int
    ip_id: int
    payload: int
    syn: bool
    spin: int
    ect: int  # the IP header's ECN field

    def key(self) -> tuple[int, ...]:
        """The same packet in both captures (a retransmission has another IP id)."""
        return (self.sport, self.dport, self.seq, self.ack, self.ip_id, self.payload)


def read_pcap(path: Path) -> list[Packet]:
    """The IPv4 TCP packets of a pcap file (µs or ns timestamps)."""
    data = path.read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", data)
    scale = 1 if magic == 0xA1B23C4D else 1000
    l2 = LINK_HEADER[linktype]
    out, i = [], 24
    while i + 16 <= len(data):
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, i)
        frame = data[i + 16 : i + 16 + caplen]
        i += 16 + caplen
        ip = frame[l2:]
        if len(ip) < 40 or ip[0] >> 4 != 4 or ip[9] != 6:
            continue
        ihl = (ip[0] & 15) * 4
        tcp = ip[ihl:]
        total, ip_id = struct.unpack_from("!HH", ip, 2)
        sport, dport, seq, ack = struct.unpack_from("!HHII", tcp)
        payload = total - ihl - (tcp[12] >> 4) * 4
        out.append(Packet(sec * 10**9 + frac * scale, ".".join(map(str, ip[12:16])), sport,
                          dport, seq, ack, ip_id, payload, bool(tcp[13] & 2),
                          int(bool(tcp[12] & TIME_BIT)), ip[1] & 3))  # fmt: skip
    return out


def _after(a: int, b: int) -> bool:
    """Serial-number ``a`` comes after ``b`` (32 bits)."""
    return 0 < (a - b) % 2**32 < 2**31


class Order:
    """One direction's spin guard, replayed: ``rule`` "newest" is the guard until 26 Nov
    (RFC 9000 §17.4 with seq/ack: advances one, neither below; the observer's filter: not
    below), "follows" is ``efm_follows`` (efm_packet.h), the same steps."""

    def __init__(self, rule: str, need_new: bool) -> None:
        self.rule, self.need_new = rule, need_new
        self.seen = False
        self.next = self.hi_ack = self.ooo_start = self.ooo_end = 0

    def follows(self, p: Packet) -> bool:
        end = (p.seq + p.payload) % 2**32
        if not self.seen:
            self.seen, self.hi_ack = True, p.ack
            self.next = self.ooo_start = self.ooo_end = end if self.rule != "newest" else p.seq
            return True
        if self.rule == "newest":
            return self._newest(p, end)
        return self._in_sequence(p, end)

    def _newest(self, p: Packet, end: int) -> bool:
        if self.need_new:  # the endpoints' guard: hi = the last followed (seq, ack)
            older = _after(self.next, p.seq) or _after(self.hi_ack, p.ack)
            if older or (p.seq == self.next and p.ack == self.hi_ack):
                return False
            self.next, self.hi_ack = p.seq, p.ack
            return True
        # the observer's filter: seq not below the highest end, ack not below the highest
        ok = not _after(self.next, p.seq) and not _after(self.hi_ack, p.ack)
        self.next = end if not _after(self.next, end) else self.next
        self.hi_ack = p.ack if not _after(self.hi_ack, p.ack) else self.hi_ack
        return ok

    def _in_sequence(self, p: Packet, end: int) -> bool:
        block = self.ooo_start != self.ooo_end
        dack = (p.ack - self.hi_ack + 2**31) % 2**32 - 2**31
        if _after(p.seq, self.next):
            continues = block and p.seq == self.ooo_end
            if not block or _after(self.ooo_start, p.seq):
                self.ooo_start = p.seq
            if not block or _after(end, self.ooo_end):
                self.ooo_end = end
            if not continues or dack < 0:
                return False
        else:
            in_order = p.seq == self.next
            if _after(end, self.next):
                self.next = end
            if block and not _after(self.ooo_start, self.next):
                if _after(self.ooo_end, self.next):
                    self.next = self.ooo_end
                self.ooo_start = self.ooo_end = self.next
            if not in_order or dack < 0 or (self.need_new and p.payload == 0 and dack == 0):
                return False
        self.hi_ack = p.ack
        return True


def value_changes(sent: list[Packet]) -> list[Packet]:
    """The first packet of each new spin value an endpoint sent (its wave's edges)."""
    return [p for a, p in itertools.pairwise(sent) if p.spin != a.spin and not p.syn]


def wire_edges(received: list[Packet], sent: list[Packet], flip: bool) -> list[Packet]:
    """The received packet behind each edge the endpoint sent: the last one before it (by
    at most 2 ms) that carried the value it took (the server echoes, the client inverts)."""
    times = [p.t_ns for p in received]
    out = []
    for s in value_changes(sent):
        before = received[
            bisect.bisect_left(times, s.t_ns - 2_000_000) : bisect.bisect_right(times, s.t_ns)
        ]
        trigger = next((p for p in reversed(before) if p.spin == s.spin ^ flip), None)
        if trigger is not None:
            out.append(trigger)
    return out


def min_ack_rtt_ms(data: list[Packet], acks: list[Packet]) -> float:
    """The smallest RTT the data sender could take from an ACK as Linux's rtt_min does (the
    newest segment it acknowledges: that segment's send to the ACK's arrival), in ms."""
    sent_at: dict[int, int] = {}
    for p in data:  # the first transmission (TCP takes no RTT from a retransmission)
        if p.payload:
            sent_at.setdefault((p.seq + p.payload) % 2**32, p.t_ns)
    rtts = [a.t_ns - sent_at[a.ack] for a in acks if a.t_ns > sent_at.get(a.ack, a.t_ns)]
    return min(rtts) / 1e6 if rtts else 0.0


def observer_samples(packets: list[Packet], rule: str, min_gap_pct: int) -> list[tuple[int, float]]:
    """The observer's filtered spin e2e samples of one direction (efm_observer.bpf.c: the
    ordering rule, then the minimum-gap rule), as (end time ns, ms)."""
    order = Order(rule, need_new=False)
    value = None
    last = srtt = 0
    out = []
    for p in packets:
        if p.syn or not order.follows(p):
            continue
        if value is None:
            value = p.spin
            continue
        if p.spin == value:
            continue
        if srtt and last and p.t_ns - last < srtt * min_gap_pct / 100:
            continue
        value = p.spin
        if last:
            rtt = p.t_ns - last
            out.append((p.t_ns, rtt / 1e6))
            srtt = (7 * srtt + rtt) // 8 if srtt else rtt
        last = p.t_ns
    return out


def one_way(sent: list[Packet], received: list[Packet]) -> dict[tuple[int, ...], int]:
    """Each received packet's time from the other capture (ns), by key."""
    at = {p.key(): p.t_ns for p in sent}
    return {p.key(): p.t_ns - at[p.key()] for p in received if p.key() in at}


def earliness(
    edges: list[Packet], received: list[Packet], wan: dict[tuple[int, ...], int], delay_ns: int
) -> dict[int, int]:
    """For each edge taken from a packet that skipped the WAN's delay, how much sooner it
    came than the first packet that did not skip it with the same value (ns), by edge
    time. Edges from packets that crossed the delay are not in it."""
    times = [p.t_ns for p in received]
    out = {}
    for e in edges:
        if wan.get(e.key(), delay_ns) >= delay_ns:
            continue
        after = itertools.islice(received, bisect.bisect_right(times, e.t_ns), None)
        later = next((p for p in after if p.spin == e.spin
                      and wan.get(p.key(), 0) >= delay_ns), None)  # fmt: skip
        if later is not None:
            out[e.t_ns] = later.t_ns - e.t_ns
    return out


def analyse_flow(
    client: list[Packet],
    server: list[Packet],
    server_ip: str,
    port: int,
    rule: str,
    delay_ms: float,
) -> dict[str, Any]:
    """One flow's edges, their causes and the observer's samples (module docstring)."""

    def of(packets: list[Packet], from_server: bool) -> list[Packet]:
        return [p for p in packets if (p.src == server_ip) == from_server
                and port in (p.sport, p.dport)]  # fmt: skip

    down_s, down_c = of(server, True), of(client, True)  # server -> client
    up_c, up_s = of(client, False), of(server, False)  # client -> server
    delay_ns = round(delay_ms * 1e6)
    wan_down, wan_up = one_way(down_s, down_c), one_way(up_c, up_s)
    # each endpoint's edges as it sent them, and the segment it took each from
    c_edges, s_edges = wire_edges(down_c, up_c, True), wire_edges(up_s, down_s, False)
    early_c = earliness(c_edges, down_c, wan_down, delay_ns)
    early_s = earliness(s_edges, up_s, wan_up, delay_ns)
    out: dict[str, Any] = {
        "packets": {"down": len(down_c), "up": len(up_s)},
        "skipped_delay": {
            "down": sum(v < delay_ns for v in wan_down.values()),
            "up": sum(v < delay_ns for v in wan_up.values()),
        },
        "server_min_ack_rtt_ms": min_ack_rtt_ms(down_s, up_s),
        "edges": {"client": len(c_edges), "server": len(s_edges)},
        "early_edges": {"client": len(early_c), "server": len(early_s)},
        "earliness_ms": {
            side: _ms_stats(list(e.values()))
            for side, e in (("client", early_c), ("server", early_s))
        },
    }
    # the observer's samples per direction, and which of them an early edge shortened:
    # a client-to-server sample [a, b] is closed by the client's edge just before b and
    # answers the server edge the client took in (a, b]; the other direction likewise
    for name, packets in (("from_client", up_c), ("from_server", down_c)):
        samples = observer_samples(packets, "newest" if rule == "none" else rule, MIN_GAP_PCT)
        short = []
        for end, rtt in samples:
            start = end - round(rtt * 1e6)
            cut = sum(v for t, v in early_c.items() if start < t <= end)
            cut += sum(v for t, v in early_s.items() if start - delay_ns < t <= end - delay_ns)
            short.append(cut / 1e6)
        clean = [rtt for (_, rtt), c in zip(samples, short, strict=True) if c == 0]
        out[name] = {
            "samples": _ms_stats([r for _, r in samples]),
            "clean": _ms_stats(clean),
            "shortened_share": sum(c > 0 for c in short) / max(1, len(short)),
            "mean_shortfall_ms": statistics.fmean(short) if short else 0.0,
            "mean_plus_shortfall_ms": statistics.fmean(r + c for (_, r), c
                                                       in zip(samples, short, strict=True))
            if samples else 0.0,
        }  # fmt: skip
    return out


def _ms_stats(values: list[float | int]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    scale = 1e6 if isinstance(values[0], int) else 1.0
    ms = [v / scale for v in values]
    return {"n": len(ms), "mean": statistics.fmean(ms), "p50": statistics.median(ms),
            "max": max(ms)}  # fmt: skip


def capture(ns: str, ifname: str, path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, "tcpdump", "-q", "-n", "-i", ifname, "-s", str(SNAPLEN),
         "-B", "32768", "-w", str(path), "tcp"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip


def traced_run(args: argparse.Namespace) -> None:
    """One spin run with both captures: ``run.json`` (the experiment's summary, the
    emulator's reorder count) and the two pcaps in ``args.out``."""
    args.out.mkdir(parents=True, exist_ok=True)
    with loaded_prague() as prague:
        line = WanLine.create(
            30.0, rate_mbps=100.0, queue="dualpi2", prefix="l4e", reorder_pct=args.reorder_pct
        )
        dumps = [
            capture(line.client_ns, "c0", args.out / "client.pcap"),
            capture(line.server_ns, "wan0", args.out / "server.pcap"),
        ]
        try:
            time.sleep(1)
            guard = args.rule != "none"
            objects = (MARKER_OBJ, OBSERVER_OBJ)
            if args.objects is not None:  # e.g. an earlier commit's, for a baseline
                objects = (args.objects / MARKER_OBJ.name, args.objects / OBSERVER_OBJ.name)
            result = one_run(
                line, prague, Technique.SPIN, args.seconds, spin_guard=guard, objects=objects
            )
            reordered = [d.get("reordered_pkts", 0) for d in line.wan_stats()]
        finally:
            for d in dumps:
                d.send_signal(signal.SIGINT)
            tails = [d.communicate(timeout=30)[1].decode().strip().splitlines()[-2:] for d in dumps]
            line.down()
    run = {"result": result, "capture": tails, "emulator_reordered": reordered,
           "server_ip": line.server_ip, "delay_ms": line.delay_ms}  # fmt: skip
    (args.out / "run.json").write_text(json.dumps(run))


def analyse(out: Path, rule: str) -> dict[str, Any]:
    """Both captures of a traced run, per flow (the CCA from the data's ECN field)."""
    run = json.loads((out / "run.json").read_text())
    client, server = read_pcap(out / "client.pcap"), read_pcap(out / "server.pcap")
    server_ip = run["server_ip"]
    found: dict[str, Any] = {"capture": run["capture"], "reordered": run["emulator_reordered"]}
    for port in sorted({p.sport for p in server if p.src == server_ip}):
        ect = [p.ect for p in server if p.sport == port and p.payload]
        cca = "prague" if ect and statistics.mode(ect) in (1, 3) else "cubic"
        truth = run["result"][cca]
        found[cca] = analyse_flow(client, server, server_ip, port, rule, run["delay_ms"]) | {
            "observer_filtered_mean_ms": truth["filtered"].get("mean_ms"),
            "tcp_info_mean_ms": truth["truth"].get("mean_ms"),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "build/l4s-spin-edges")
    parser.add_argument("--reorder-pct", type=float, default=0.1)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--rule",
        choices=("none", "newest", "follows"),
        default="follows",
        help="the endpoints' spin rule the built objects (or --objects) run, for the replay: "
        "none (the research's), newest (the guard until 26 Nov), follows (spin_follows)",
    )
    parser.add_argument(
        "--objects", type=Path, help="a directory with other efm_marker/efm_observer objects"
    )
    parser.add_argument("--analyse-only", action="store_true", help="the captures in --out")
    parser.add_argument("--capture-only", action="store_true", help="analyse later")
    args = parser.parse_args()
    hold = {}
    if not args.analyse_only:
        hold = {"utc_start": utc_now(), "load_before": round(os.getloadavg()[0], 1)}
        traced_run(args)
        hold |= {"utc_end": utc_now(), "load_after": round(os.getloadavg()[0], 1)}
        (args.out / "hold.json").write_text(json.dumps(hold))
        if args.capture_only:
            return
    result = analyse(args.out, args.rule) | {
        "reorder_pct": args.reorder_pct, "seconds": args.seconds, "rule": args.rule,
    } | json.loads((args.out / "hold.json").read_text())  # fmt: skip
    (args.out / "spin-edges.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
