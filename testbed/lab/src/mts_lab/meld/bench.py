"""Cost of feeding the kernel: one map update, and one RNIS message end to end.

    python -m mts_lab.meld.bench --out docs/results/meld-bench

Registers a private instance of the congestion controls (root), then times
``MeldKernel.set_radio`` (one bpf(2) BPF_MAP_UPDATE_ELEM through ctypes) and the whole
consumer path of one message (JSON parse + validation, thresholds, update). Writes
``bench.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from mec_common.bus.rnis import RnisMeasurement
from mec_pep.ran_aware.kernel import MeldKernel, UeRadio, loader_paths
from mec_pep.ran_aware.radio import radio_state


def _time(fn: Callable[[int], None], n: int) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter_ns()
        fn(i)
        samples.append((time.perf_counter_ns() - start) / 1e3)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=100)
    return {
        "mean_us": round(statistics.fmean(samples), 2),
        "p50_us": round(q[49], 2),
        "p99_us": round(q[98], 2),
        "max_us": round(max(samples), 2),
    }


def run(n: int, ues: int) -> dict[str, object]:
    loader, obj = loader_paths()
    kernel = MeldKernel.load(
        loader, obj, Path("/sys/fs/bpf/mts-pep"), f"bench-{secrets.token_hex(3)}"
    )
    try:
        addresses = [f"10.32.{i // 250}.{i % 250 + 1}" for i in range(ues)]
        radio = UeRadio(observed_ns=time.monotonic_ns(), d_tbs=2292, n_harq=8, q_th_bytes=18336)
        update = _time(lambda i: kernel.set_radio(addresses[i % ues], radio), n)
        bodies = [
            RnisMeasurement(
                cell="10000-0", bs_id=10000, rnti=i % 65536, ue_ipv4=ip,
                radio_tbs_bytes=2292, rlc_queue_bytes=10_000, harq_processes=8,
                best_cqi_tbs_bytes=2292, rapid_capacity_bps=16_000_000,
                observed_ns=time.time_ns(), cell_ues=1,
            ).model_dump_json().encode()
            for i, ip in enumerate(addresses)
        ]  # fmt: skip

        def message(i: int) -> None:
            m = RnisMeasurement.model_validate_json(bodies[i % ues])
            u = radio_state(m, 8)
            assert u is not None
            kernel.set_radio(u.ue, u.radio)

        end_to_end = _time(message, n)
    finally:
        kernel.close()
    per_second = 1e6 / statistics.fmean(end_to_end)
    return {
        "command": f"python -m mts_lab.meld.bench --n {n} --ues {ues}",
        "host": {
            "kernel": platform.release(),
            "cpus": os.cpu_count(),
            "load_1min": os.getloadavg()[0],
        },
        "n": n,
        "ues": ues,
        "map_update": _summary(update),
        "rnis_message": _summary(end_to_end),
        "messages_per_second_one_thread": round(per_second),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/meld-bench"))
    parser.add_argument("--n", type=int, default=50_000, help="updates to time")
    parser.add_argument("--ues", type=int, default=64, help="distinct UEs (map keys)")
    args = parser.parse_args()
    result = run(args.n, args.ues)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'path':<16} {'mean µs':>8} {'p50 µs':>8} {'p99 µs':>8} {'max µs':>9}")
    for key in ("map_update", "rnis_message"):
        s = result[key]
        assert isinstance(s, dict)
        print(f"{key:<16} {s['mean_us']:>8} {s['p50_us']:>8} {s['p99_us']:>8} {s['max_us']:>9}")
    print(f"one consumer thread: {result['messages_per_second_one_thread']} messages/s")


if __name__ == "__main__":
    main()
