"""``make bench-l4s`` (second part): what the endpoint marker costs a fast TCP flow (issue
14's goal: at most 5 % less throughput on a 10 Gbit/s-class veth flow).

One iperf3 TCP flow between two namespaces over a veth pair, the marker (both programs) at
both ends, in four conditions:

- ``plain``: no marker, the veth's offloads as they are (GSO of 64 KiB skbs);
- ``gso1``: no marker, ``gso_max_segs 1`` at both ends (one segment per skb: what the
  delay bit needs, ``Marker.attach(gso_off=True)``, the research's offloads off);
- ``delay_gso1``: the research's delay bit (``Technique.DELAY``, with ``gso_max_segs 1``);
- ``spin_gso``: the spin-bit marker with GSO kept (every segment of a GSO skb carries the
  same spin value, which is right for the spin bit): the programs' own cost;
- ``delay_run_gso``: the delay bit with GSO kept (``Technique.DELAY_RUN``: a run of marked
  segments of one super-packet is one sample; ``l4s/bpf/efm.h``).

The machine is shared, so the conditions are interleaved round by round (each round runs
each once, in a rotated order) and each condition's median over the rounds is compared
with ``plain``'s; the load average is recorded with every measurement.

    uv run python -m mts_lab.l4s.bench --out docs/results/l4s [--marking-rounds 7]
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mec_l4s.efm import Marker, Technique
from mts_lab.l4s.bed import MARKER_OBJ
from mts_lab.line import run
from mts_lab.results import Results, pyplot

CONDITIONS = ("plain", "gso1", "delay_gso1", "spin_gso", "delay_run_gso")
GSO_DEFAULT = 65535
GOAL_LOSS = 0.05


class VethPair:
    """Two namespaces, ``<name>-a`` 10.204.0.1 ─veth─ 10.204.0.2 ``<name>-b``."""

    def __init__(self) -> None:
        self.name = f"l4b{secrets.token_hex(3)}"
        self.a, self.b = f"{self.name}-a", f"{self.name}-b"
        self.ips = {self.a: "10.204.0.1", self.b: "10.204.0.2"}
        for ns in (self.a, self.b):
            run(["ip", "netns", "add", ns])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        run(["ip", "link", "add", "bench0", "netns", self.a, "type", "veth",
             "peer", "bench0", "netns", self.b])  # fmt: skip
        for ns, ip in self.ips.items():
            run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "bench0"])
            run(["ip", "-n", ns, "link", "set", "bench0", "up"])

    def gso_max_segs(self, segs: int) -> None:
        for ns in (self.a, self.b):
            run(["ip", "-n", ns, "link", "set", "dev", "bench0", "gso_max_segs", str(segs)])

    def down(self) -> None:
        for ns in (self.a, self.b):
            run(["ip", "netns", "del", ns], check=False)


@contextmanager
def markers(pair: VethPair, technique: Technique | None, gso_off: bool) -> Iterator[list[Marker]]:
    """The marker at both ends for the block (none with ``technique`` None)."""
    pair.gso_max_segs(1 if gso_off else GSO_DEFAULT)
    loaded: list[Marker] = []
    try:
        if technique is not None:
            for ns in (pair.a, pair.b):
                m = Marker.load(MARKER_OBJ, f"mts-efm-{pair.name}-{ns[-1]}")
                loaded.append(m)
                m.configure(technique)
                m.attach("bench0", ns, gso_off=gso_off)
        yield loaded
    finally:
        for m in loaded:
            m.close()


SETUPS: dict[str, tuple[Technique | None, bool]] = {
    "plain": (None, False),
    "gso1": (None, True),
    "delay_gso1": (Technique.DELAY, True),
    "spin_gso": (Technique.SPIN, False),
    "delay_run_gso": (Technique.DELAY_RUN, False),
}


def iperf3(pair: VethPair, seconds: float) -> float:
    """One TCP flow a → b for ``seconds`` (the first second omitted): Gbit/s received."""
    port = str(5201 + secrets.randbelow(1000))
    server = subprocess.Popen(
        ["ip", "netns", "exec", pair.b, "iperf3", "-s", "-1", "-p", port],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(50):  # until it listens
            probe = run(["ip", "netns", "exec", pair.b, "ss", "-Hltn", f"sport = :{port}"])
            if probe.stdout.strip():
                break
            time.sleep(0.1)
        done = run(["ip", "netns", "exec", pair.a, "iperf3", "-c", pair.ips[pair.b], "-p", port,
                    "-t", f"{seconds:g}", "-O", "1", "-J"])  # fmt: skip
        report = json.loads(done.stdout)
        return float(report["end"]["sum_received"]["bits_per_second"]) / 1e9
    finally:
        server.wait(timeout=30)


def measure(rounds: int, seconds: float) -> Results:
    """Every round's throughput per condition, the medians and the load around them."""
    load_before = [round(x, 1) for x in os.getloadavg()]
    rows = _rounds(rounds, seconds)
    return {
        "rounds": rounds,
        "seconds": seconds,
        "load_before": load_before,
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "per_run": rows,
        "summary": summarise(rows),
    }


def _rounds(rounds: int, seconds: float) -> list[dict[str, Any]]:
    pair = VethPair()
    rows = []
    try:
        for r in range(rounds):
            order = CONDITIONS[r % len(CONDITIONS) :] + CONDITIONS[: r % len(CONDITIONS)]
            for condition in order:
                technique, gso_off = SETUPS[condition]
                with markers(pair, technique, gso_off) as loaded:
                    gbit = iperf3(pair, seconds)
                    counts = [m.counters() for m in loaded]
                rows.append({"round": r, "condition": condition, "gbit_s": gbit,
                             "load": round(os.getloadavg()[0], 1),
                             "marked": sum(marked_skbs(c) for c in counts)})  # fmt: skip
                print(f"round {r} {condition}: {gbit:.2f} Gbit/s", flush=True)
    finally:
        pair.down()
    return rows


def marked_skbs(counters: dict[str, int]) -> int:
    """The skbs one marker sent with the time bit (so a condition is seen to mark)."""
    return counters["spin_set"] + counters["samples_reflected"] + counters["samples_generated"]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    medians = {
        c: statistics.median(r["gbit_s"] for r in rows if r["condition"] == c) for c in CONDITIONS
    }
    plain = medians["plain"]
    return {
        c: {
            "median_gbit_s": m,
            "min_gbit_s": min(r["gbit_s"] for r in rows if r["condition"] == c),
            "max_gbit_s": max(r["gbit_s"] for r in rows if r["condition"] == c),
            "loss_vs_plain": 1 - m / plain,
            "goal_met": 1 - m / plain <= GOAL_LOSS,
        }
        for c, m in medians.items()
    }


def table(results: Results) -> str:
    lines = [
        f"marking overhead: one iperf3 TCP flow over a veth pair, {results['rounds']} "
        f"interleaved rounds x {results['seconds']} s, load {results['load_before']} -> "
        f"{results['load_after']} (shared machine)",
        f"  {'condition':12} {'median Gbit/s':>14} {'range':>14} {'loss vs plain':>14}",
    ]
    for c, s in results["summary"].items():
        lines.append(
            f"  {c:12} {s['median_gbit_s']:>14.2f} "
            f"{s['min_gbit_s']:>6.2f}-{s['max_gbit_s']:<7.2f} {100 * s['loss_vs_plain']:>13.1f}%"
        )
    lines.append(f"(goal: at most {100 * GOAL_LOSS:.0f} % loss with the marker)")
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, c in enumerate(CONDITIONS):
        ys = [r["gbit_s"] for r in results["per_run"] if r["condition"] == c]
        ax.scatter([i] * len(ys), ys, alpha=0.6)
        ax.hlines(results["summary"][c]["median_gbit_s"], i - 0.3, i + 0.3, color="k")
    plain = results["summary"]["plain"]["median_gbit_s"]
    ax.axhline(plain * (1 - GOAL_LOSS), color="r", linestyle="--", label="plain - 5 %")
    ax.set_xticks(range(len(CONDITIONS)), CONDITIONS)
    ax.set_ylabel("Gbit/s (iperf3, one flow)")
    ax.set_title("Endpoint marker on a veth TCP flow (line: median)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
