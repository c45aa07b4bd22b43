"""Benchmark of the RAN emulator: forwarding capacity and TTI clock punctuality.

    python -m mts_lab.emulator.bench --out docs/results/emulator [--seconds 5]

Capacity: 1500-byte UDP datagrams from the MEC namespace through the RAN namespace's
downlink TUN, the emulator and the UEs' TUNs, with radio capacity set far above what
the host can forward, for 1 and 8 UEs; measured at the UEs' interfaces. Lateness: how
late TTI ticks start, idle and while 100 Mbit/s flows through (1 UE, both runtime modes:
rt, every emulator thread SCHED_FIFO, and plain, only the clock). Writes bench.json and
bench.png and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from mts_lab.results import pyplot
from mts_testbed import builder
from mts_testbed.topology import Topology

PACKET = 1500  # IP bytes


def scenario(n_ues: int) -> dict[str, Any]:
    """n UEs on one cell whose radio carries 10 Gbit/s: the host is the bottleneck."""
    return {
        "description": f"bench: {n_ues} UE(s), radio faster than the host",
        "cells": [{"bs_id": 10000, "prb": 100}],
        "ues": [
            {
                "count": n_ues,
                "cells": [
                    {
                        "bs_id": 10000,
                        "delay_ms": 1,
                        "ul_delay_ms": 1,
                        "queue": {"limit_bytes": 4 << 20},
                        "channel": {"cqi": 15, "capacity_mbps": 10000},
                    }
                ],
            }
        ],
    }


class Bench:
    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.api = httpx.Client(
            base_url=topo.emulator.url,
            headers={"Authorization": f"Bearer {topo.emulator.token}"},
            timeout=5,
        )

    def rx(self) -> tuple[int, int]:
        """Bytes and packets received on every UE interface."""
        total_b = total_p = 0
        for ue in self.topo.ues:
            for p in ue.paths:
                base = f"/sys/class/net/{p.ifname}/statistics"
                out = self.topo.exec(ue.ns, "cat", f"{base}/rx_bytes", f"{base}/rx_packets")
                b, n = out.stdout.split()
                total_b, total_p = total_b + int(b), total_p + int(n)
        return total_b, total_p

    def traffic(self, total_mbps: float, seconds: float) -> list[subprocess.Popen[bytes]]:
        """UDP to every UE (0 = as fast as iperf3 can), one iperf3 pair per UE."""
        procs = []
        per_ue = "0" if total_mbps == 0 else f"{total_mbps / len(self.topo.ues)}M"
        for ue in self.topo.ues:
            port = str(5500 + ue.index)
            procs.append(self.topo.popen(ue.ns, "iperf3", "-s", "-1", "-p", port, **quiet()))
        time.sleep(0.5)
        for ue in self.topo.ues:
            port = str(5500 + ue.index)
            args = ["iperf3", "-c", ue.paths[0].ip, "-p", port, "-u", "-b", per_ue]
            args += ["-l", str(PACKET - 28), "-t", str(seconds)]
            procs.append(self.topo.popen(self.topo.mec.ns, *args, **quiet()))
        return procs

    def timing(self, reset: bool = False) -> dict[str, Any]:
        if reset:
            return dict(self.api.post("/emulator/v1/timing/reset").json())
        return dict(self.api.get("/emulator/v1/timing").json())

    def drops(self) -> int:
        bearers = self.api.get("/emulator/v1/bearers").json()
        return sum(b["counters"]["dl_queue_drop_pkts"] for b in bearers)

    def capacity(self, seconds: float) -> dict[str, Any]:
        procs = self.traffic(0, seconds + 2)
        time.sleep(1.5)
        self.timing(reset=True)
        (b0, p0), d0, t0 = self.rx(), self.drops(), time.monotonic()
        time.sleep(seconds)
        (b1, p1), d1, t1 = self.rx(), self.drops(), time.monotonic()
        timing = self.timing()
        finish(procs)
        dt = t1 - t0
        return {
            "mbps": (b1 - b0) * 8 / dt / 1e6,
            "kpps": (p1 - p0) / dt / 1e3,
            "emulator_queue_drops_per_s": (d1 - d0) / dt,
            "timing": timing,
        }

    def lateness(self, mbps: float, seconds: float) -> dict[str, Any]:
        procs = self.traffic(mbps, seconds + 2) if mbps else []
        time.sleep(1.5)
        self.timing(reset=True)
        b0, _ = self.rx()
        time.sleep(seconds)
        b1, _ = self.rx()
        result: dict[str, Any] = {
            "offered_mbps": mbps,
            "delivered_mbps": (b1 - b0) * 8 / seconds / 1e6,
        }
        result["timing"] = self.timing()
        finish(procs)
        return result


def quiet() -> dict[str, Any]:
    return {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}


def finish(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()


def run(seconds: float, log: Any = print) -> dict[str, Any]:
    results: dict[str, Any] = {"capacity": {}, "lateness": {}}
    # rt: every emulator thread real-time (the default, EMU_RT_RUNTIME=true); plain: only
    # the TTI clock is (EMU_RT_RUNTIME=false). Measured both ways: rt keeps the clock
    # punctual on a loaded host, plain leaves more CPU to the traffic generator.
    points = [(1, "true"), (8, "true"), (1, "false"), (8, "false")]
    with tempfile.TemporaryDirectory() as tmp:
        for n, rt in points:
            path = Path(tmp) / f"bench{n}.yaml"
            path.write_text(yaml.safe_dump(scenario(n)))
            name = f"bench{os.getpid() % 10000}"
            os.environ["EMU_RT_RUNTIME"] = rt
            topo = builder.up(path, name, log=lambda _: None)
            try:
                bench = Bench(topo)
                cap = bench.capacity(seconds)
                key = f"{n}_ue" if rt == "true" else f"{n}_ue_plain"
                results["capacity"][key] = cap
                log(
                    f"capacity, {n} UE(s), rt runtime {rt}: {cap['mbps']:.0f} Mbit/s, "
                    f"{cap['kpps']:.1f} kpps, lateness p99 {cap['timing']['lateness_p99_us']} µs"
                )
                if n == 1:  # the clock's lateness idle and at 100 Mbit/s, in either mode
                    for mbps in (0, 100):
                        lat = bench.lateness(mbps, seconds * 2)
                        mode = "" if rt == "true" else "_plain"
                        results["lateness"][f"{mbps}_mbps{mode}"] = lat
                        t = lat["timing"]
                        log(
                            f"lateness at {mbps} Mbit/s, rt runtime {rt}: "
                            f"p50 {t['lateness_p50_us']} µs, "
                            f"p99 {t['lateness_p99_us']} µs, p99.9 {t['lateness_p999_us']} µs"
                        )
            finally:
                builder.down(name, log=None)
                os.environ.pop("EMU_RT_RUNTIME", None)
    results["host"] = {
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
        "kernel": os.uname().release,
    }
    return results


def plot(results: dict[str, Any], path: Path) -> None:
    plt = pyplot()

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.5))
    caps = results["capacity"]
    labels = [k.replace("_ue", " UE").replace("_plain", "\nplain") for k in caps]
    bars = a.bar(labels, [c["mbps"] for c in caps.values()], color="#4c72b0")
    for bar, c in zip(bars, caps.values(), strict=True):
        a.annotate(
            f"{c['mbps']:.0f} Mbit/s\n{c['kpps']:.0f} kpps",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    a.axhline(1000, color="gray", ls="--", lw=1, label="goal 1 Gbit/s")
    a.set_ylim(0, 1.25 * max(1000, *(c["mbps"] for c in caps.values())))
    a.set_ylabel("forwarded (Mbit/s, 1500-B packets)")
    a.set_title("Forwarding capacity")
    a.legend(loc="lower right")
    quantiles = ["lateness_p50_us", "lateness_p90_us", "lateness_p99_us", "lateness_p999_us"]
    runs = {
        **{
            k.replace("_mbps", " Mbit/s").replace("_plain", ", plain"): v["timing"]
            for k, v in results["lateness"].items()
        },
        "saturated (1 UE, rt)": caps["1_ue"]["timing"],
    }
    width = 0.8 / len(runs)
    for i, (label, t) in enumerate(runs.items()):
        b.bar(
            [x + i * width for x in range(len(quantiles))],
            [max(t[q], 1) for q in quantiles],
            width,
            label=label,
        )
    b.set_xticks([x + width for x in range(len(quantiles))], ["p50", "p90", "p99", "p99.9"])
    b.set_yscale("log")
    b.axhline(200, color="gray", ls="--", lw=1, label="goal p99 200 µs")
    b.set_ylabel("TTI start lateness (µs)")
    b.set_title("TTI clock lateness")
    b.legend(fontsize=8)
    host = results["host"]
    fig.suptitle(f"RAN emulator, {host['cpus']} CPUs, load average {host['loadavg'][0]:.1f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.emulator.bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/emulator"))
    parser.add_argument("--seconds", type=float, default=5, help="measurement window per point")
    args = parser.parse_args(argv)
    results = run(args.seconds)
    results["command"] = "make bench-emulator"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(results, indent=2))
    plot(results, args.out / "bench.png")
    print(f"wrote {args.out / 'bench.json'} and {args.out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
