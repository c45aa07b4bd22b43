"""Start both tunnel ends N times under ``make bench-tunnel``'s topology and check that no
start livelocks (docs/tunnel.md, "Thread scheduling"): each start must get ready, carry
pings and a 1 s UDP load, and then, idle for 2 s, leave the machine idle time (every thread
of both ends in SCHED_FIFO once left one thread per end spinning at 95 % of a core). One
JSON line per start; the exit status is 1 if any start failed a check.

``uv run python -m mts_lab.tunnel.startcheck --starts 10 --packet-thread-priority 10``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from mts_lab.tunnel.bed import UE_ADDR, PathSpec, TunnelBed, ping_rtts
from mts_lab.tunnel.bench import cpu_idle, cpu_seconds, thread_sched, tunnel_pids

IDLE_S = 2.0
MAX_IDLE_CORES = 0.2  # both ends' CPU while nothing crosses: a spinning thread takes ~1
MIN_IDLE_SHARE = 0.3  # the machine's idle share meanwhile (2 cores)


def one_start(env: dict[str, str]) -> dict[str, object]:
    paths = [PathSpec(1, rate_mbit=1000), PathSpec(2, rate_mbit=1000)]
    with TunnelBed(paths=paths, env=env) as bed:
        pids = tunnel_pids(bed)
        pings = ping_rtts(bed.exec("mec", "ping", "-n", "-i", "0.01", "-c", "50", UE_ADDR,
                                   check=False))  # fmt: skip
        bed.exec("ue", "iperf3", "-s", "-D", "-1", "-B", UE_ADDR)
        time.sleep(0.3)
        bed.exec("mec", "iperf3", "-c", UE_ADDR, "-u", "-b", "500M", "-l", "1300", "-t", "1")
        cpu0, (idle0, all0) = sum(cpu_seconds(p) for p in pids), cpu_idle()
        time.sleep(IDLE_S)
        (idle1, all1), cpu1 = cpu_idle(), sum(cpu_seconds(p) for p in pids)
        policies = [thread_sched(p, "policy") for p in pids]  # one entry per thread
    cores, idle_share = (cpu1 - cpu0) / IDLE_S, (idle1 - idle0) / max(all1 - all0, 1)
    return {"ok": bool(pings) and cores <= MAX_IDLE_CORES and idle_share >= MIN_IDLE_SHARE,
            "pings": len(pings), "idle_tunnel_cores": cores, "idle_share": idle_share,
            "threads": [len(p) for p in policies],
            "fifo_threads": [p.count(1) for p in policies]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--packet-thread-priority", type=int, default=0)
    args = parser.parse_args()
    env = {"TUNNEL_CWND": "delay", "TUNNEL_CWND_BYTES": "200000"}
    if args.packet_thread_priority:
        env["TUNNEL_PACKET_THREAD_PRIORITY"] = str(args.packet_thread_priority)
    failed = 0
    for i in range(args.starts):
        start, load = time.time(), os.getloadavg()[0]
        try:
            r = one_start(env)
        except Exception as exc:  # a start that does not come up is a failure
            r = {"ok": False, "error": str(exc)[-300:]}
        r.update(start=i, utc=time.strftime("%H:%M:%S", time.gmtime(start)), load_before=load)
        failed += not r["ok"]
        print(json.dumps(r), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
