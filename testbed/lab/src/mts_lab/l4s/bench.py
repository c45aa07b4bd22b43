"""``make bench-l4s``: the observer's cost per packet on one core (issue 14's goal: at least
1 Mpps with the tc program).

The real program runs in the kernel through BPF_PROG_TEST_RUN on packets of an agreed
flow (the costly path: flow lookup, both modes' trackers, a ring-buffer sample on each
marked packet), repeated and timed by the kernel itself. What it leaves out: the driver
and the stack around tc (the same with or without the observer), so the figure is the
program's own cost, an upper bound for the rate its core can observe.

Second part (``mts_lab.l4s.bench_marking``): what the endpoint marker costs a TCP flow over
a veth pair (iperf3; interleaved rounds, medians).

    uv run python -m mts_lab.l4s.bench --out docs/results/l4s
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import struct
import threading
from pathlib import Path

from mec_common.bpf import BpfProgram
from mec_l4s.observer import Observer
from mts_lab.l4s import bench_marking
from mts_lab.l4s.bed import OBSERVER_OBJ, REPO
from mts_lab.results import Results, pyplot, save_results

REPEAT = 1_000_000


def frame(src: str, dst: str, sport: int, dport: int, flags: int, bits: int, seq: int) -> bytes:
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, 1, (5 << 4) | bits, flags, 65535, 0, 0)
    tcp += b"p" * 1448
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0, 0x4000, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp


def measure(repeat: int) -> dict[str, float]:
    obs = Observer.load(OBSERVER_OBJ, f"mts-obs-bench-{secrets.token_hex(3)}")
    prog = BpfProgram(str(obs.obj.pin_dir / "efm_observe"))
    stop = threading.Event()

    def drain() -> None:  # the service's reader, so the ring never fills
        while not stop.wait(0.01):
            obs.poll()

    reader = threading.Thread(target=drain, daemon=True)
    try:
        obs.configure()
        reader.start()
        c, s = "10.9.0.1", "10.9.0.2"
        out: dict[str, float] = {}
        for name, code, bits in (
            ("spin", 0x04, 0x02),
            ("delay", 0x02, 0x02),
            ("delay_unmarked", 0x02, 0),
        ):
            sport = 40000 + len(out)
            prog.run_packet(frame(c, s, sport, 80, 0x02, code, 1))
            prog.run_packet(frame(s, c, 80, sport, 0x12, code, 1))
            # a marked packet: spin (a constant value: the tracker path without an edge) or
            # a delay sample (the sample path: ring buffer reservation every run)
            _, ns = prog.time_packet(frame(c, s, sport, 80, 0x10, bits, 1000), repeat)
            out[f"{name}_ns_per_packet"] = ns
        _, ns = prog.time_packet(frame("10.9.9.1", s, 1, 80, 0x10, 0, 1), repeat)
        out["unknown_flow_ns_per_packet"] = ns
        return out
    finally:
        stop.set()
        reader.join(timeout=5)
        prog.close()
        obs.close()


def table(results: Results) -> str:
    lines = [
        f"observer cost per packet (BPF_PROG_TEST_RUN x {results['repeat']}), "
        f"load {results['load']}"
    ]
    for key, ns in results["costs"].items():
        lines.append(f"  {key:32} {ns:6.0f} ns   {1e3 / ns:6.2f} Mpps on one core")
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()

    keys = list(results["costs"])
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.barh(keys, [1e3 / results["costs"][k] for k in keys])
    ax.axvline(1.0, color="k", linestyle="--", label="goal 1 Mpps")
    ax.set_xlabel("Mpps on one core (program only)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs/results/l4s")
    parser.add_argument("--repeat", type=int, default=REPEAT)
    parser.add_argument(
        "--marking-rounds", type=int, default=7, help="the marker's cost to a veth flow; 0: skip"
    )
    parser.add_argument("--marking-seconds", type=float, default=4.0)
    args = parser.parse_args()
    load = [round(x, 1) for x in os.getloadavg()]
    results: Results = {"repeat": args.repeat, "load": load, "costs": measure(args.repeat)}
    save_results(results, args.out, "bench-observer", plot, table)
    if args.marking_rounds > 0:
        marking = bench_marking.measure(args.marking_rounds, args.marking_seconds)
        save_results(marking, args.out, "bench-marking", bench_marking.plot, bench_marking.table)


if __name__ == "__main__":
    main()
