"""make bench-rnis: FlexRAN-compatible source with 64 UEs → rnis-adapter → RabbitMQ → a Go
consumer (--source e2: the same synthetic UEs as an mts-e2 stream pushed every 1 ms, read
with RNIS_SOURCE=e2; make bench-rnis-e2).

Measures sustained polls/s, source-to-consumer latency (p50/p99) and the CPU of the
adapter, the broker, the source and the consumer (from /proc), and writes JSON + PNG.

    uv run python rnis-adapter/bench/bench_rnis.py --out docs/results/rnis
    uv run python rnis-adapter/bench/bench_rnis.py --quick --out /tmp/rnis-bench  # small
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from rnis_helpers import Adapter, FlexranSource, PrivateBroker, binary, wait_for

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its threads (/proc/<pid>/stat fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine, to report how loaded it was."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return float(sum(values) - idle), float(sum(values))


def broker_pid(broker: PrivateBroker) -> int:
    """The Erlang VM of our private node (rabbitmq-server runs it as a child)."""
    assert broker.proc is not None
    pid = broker.proc.p.pid
    pending = [pid]
    while pending:
        p = pending.pop()
        if "beam" in Path(f"/proc/{p}/comm").read_text():
            return p
        for task in Path(f"/proc/{p}/task").iterdir():
            pending += [int(c) for c in (task / "children").read_text().split()]
    return pid


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return 0.0


def run_case(
    tmp: Path,
    broker: PrivateBroker,
    case: tuple[int, str, str],
    seconds: float,
    warmup: float,
    source_kind: str = "flexran",
) -> dict[str, Any]:
    ues, period, publish = case
    exchange = f"rnis-bench-{uuid.uuid4().hex[:8]}"
    e2 = source_kind == "e2"
    source = FlexranSource(tmp, ues=ues, cells=1, refresh="1ms", e2=e2)
    e2_env = {"RNIS_SOURCE": "e2", "RNIS_E2_ADDR": source.e2_addr, "RNIS_E2_TOKEN": source.e2_token}
    adapter = Adapter(
        tmp,
        source.url,
        exchange,
        amqp_url=broker.url,
        env={
            **(e2_env if e2 else {}),
            "RNIS_POLL_PERIOD": period,
            "RNIS_AMQP_PUBLISH": publish,
            "RNIS_LOG_LEVEL": "WARNING",
            "RNIS_DETACH_AFTER": "2s",
        },
    ).start()
    consumer = subprocess.Popen(
        [
            str(binary("rnis-bench-consumer")),
            f"--exchange={exchange}",
            f"--duration={seconds}s",
            f"--warmup={warmup}s",
            f"--amqp-url={broker.url}",
            f"--binding=rnis.v1.{'cell' if publish == 'cell' else 'meas'}.#",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: adapter.health()["status"] == "ok", 15, "adapter healthy")
        assert adapter.proc is not None
        pids = {
            "adapter": adapter.proc.p.pid,
            "source": source.proc.p.pid,
            "consumer": consumer.pid,
            "broker": broker_pid(broker),
        }
        time.sleep(warmup)
        before = {k: cpu_seconds(p) for k, p in pids.items()}
        m0 = adapter.get("/metrics", token=None).text
        busy0, total0 = machine_busy()
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        after = {k: cpu_seconds(p) for k, p in pids.items()}
        m1 = adapter.get("/metrics", token=None).text
        busy1, total1 = machine_busy()
        out, err = consumer.communicate(timeout=seconds + warmup + 60)
        if consumer.returncode != 0:
            raise RuntimeError(f"consumer failed: {err}")
    finally:
        if consumer.poll() is None:
            consumer.kill()
        adapter.stop()
        source.proc.stop()

    def rate(name: str) -> float:
        return (metric(m1, name) - metric(m0, name)) / wall

    received = json.loads(out)
    return {
        "source": source_kind,
        "ues": ues,
        "poll_period": "push" if e2 else period,
        "publish": publish,
        "seconds": round(wall, 2),
        "polls_per_s": round(rate("rnis_polls_total"), 1),
        "measurements_per_s": round(rate("rnis_measurements_total"), 1),
        "published_per_s": round(rate("rnis_amqp_published_total"), 1),
        "repeats_skipped_per_s": round(rate("rnis_repeats_skipped_total"), 1),
        "dropped_per_s": round(
            rate('rnis_amqp_dropped_total{reason="backpressure"}')
            + rate('rnis_amqp_dropped_total{reason="broker_down"}'),
            1,
        ),
        "consumed_per_s": round(received["measurements_per_s"], 1),
        "consumed_messages_per_s": round(received["messages_per_s"], 1),
        "poll_to_consumer_by_position_us": received["by_position_us"],
        "source_to_consumer_us": received["source_to_consumer_us"],
        "adapter_poll_to_consumer_us": received["adapter_poll_to_consumer_us"],
        "cpu_cores": {k: round((after[k] - before[k]) / wall, 3) for k in after},
        "machine_busy_cores": round((busy1 - busy0) / (total1 - total0) * os.cpu_count(), 2),
        "latency_sample_us": received["source_to_consumer_sample_us"],
        "per_second_consumed": received["per_second"],
    }


def label(r: dict[str, Any]) -> str:
    return f"{r['ues']} UEs, poll {r['poll_period']}, per {r['publish']}"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        sample = sorted(v / 1000 for v in r["latency_sample_us"])
        if sample:
            ys = [(i + 1) / len(sample) for i in range(len(sample))]
            ax1.plot(sample, ys, label=label(r))
    ax1.set_xscale("log")
    ax1.set_xlabel("source snapshot → consumer (ms)")
    ax1.set_ylabel("CDF")
    ax1.axvline(5, color="grey", linestyle=":", label="goal p99 ≤ 5 ms")
    ax1.legend(fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    names = ["adapter", "broker", "source", "consumer"]
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [j + i * width for j in range(len(names))]
        ax2.bar(
            xs,
            [r["cpu_cores"].get(n, 0) for n in names],
            width,
            label=label(r),
        )
    ax2.set_xticks([j + width * (len(results) - 1) / 2 for j in range(len(names))], names)
    ax2.axhline(0.5, color="grey", linestyle=":", label="goal adapter < 0.5 core")
    ax2.set_ylabel("CPU (cores)")
    ax2.legend(fontsize=8)
    source = "mts-e2 stream" if results and results[0].get("source") == "e2" else "FlexRAN source"
    fig.suptitle(f"RNIS adapter: {source} → adapter → RabbitMQ → consumer (2 shared cores)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for JSON + PNG")
    parser.add_argument("--seconds", type=float, default=20, help="measured time per case")
    parser.add_argument("--quick", action="store_true", help="small version (8 UEs, 2 s)")
    parser.add_argument("--source", choices=["flexran", "e2"], default="flexran",
                        help="flexran: polled every 1, 8 ms; e2: mts-e2 stream")  # fmt: skip
    args = parser.parse_args()
    periods = ("1ms",) if args.source == "e2" else ("1ms", "8ms")
    cases = (
        [(8, "1ms", "cell")]
        if args.quick
        else [(64, p, mode) for p in periods for mode in ("ue", "cell")]
    )
    seconds, warmup = (2.0, 1.0) if args.quick else (args.seconds, 3.0)
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = args.out / ".work"
    tmp.mkdir(exist_ok=True)
    results = []
    loadavg_start = Path("/proc/loadavg").read_text().split()[:3]
    # A broker node of our own: other developers' traffic on the shared one stays out of the
    # figures, and its CPU is the feed's alone.
    broker = PrivateBroker(tmp)
    broker.start()
    try:
        for case in cases:
            ues, period, publish = case
            print(
                f"bench-rnis: {ues} UEs, poll {period}, per {publish}, {seconds:.0f} s ...",
                flush=True,
            )
            results.append(run_case(tmp, broker, case, seconds, warmup, args.source))
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = {
        "command": " ".join(sys.argv),
        "cpus": os.cpu_count(),
        "loadavg_at_start": loadavg_start,
        "loadavg_at_end": Path("/proc/loadavg").read_text().split()[:3],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (args.out / "bench-rnis.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=1) + "\n"
    )
    plot(results, args.out / "bench-rnis.png")
    print(
        f"{'UEs':>4} {'poll':>5} {'per':>4} {'polls/s':>8} {'meas/s':>8} {'msg/s':>7} "
        f"{'p50 ms':>7} {'p99 ms':>7} "
        f"{'adapter':>8} {'broker':>7} {'source':>7} {'consumer':>8} {'machine':>8}"
    )
    for r in results:
        lat, cpu = r["source_to_consumer_us"] or {}, r["cpu_cores"]
        print(
            f"{r['ues']:>4} {r['poll_period']:>5} {r['publish']:>4} {r['polls_per_s']:>8.0f} "
            f"{r['consumed_per_s']:>8.0f} {r['consumed_messages_per_s']:>7.0f} "
            f"{lat.get('p50', 0) / 1e3:>7.2f} "
            f"{lat.get('p99', 0) / 1e3:>7.2f} {cpu['adapter']:>8.2f} {cpu.get('broker', 0):>7.2f} "
            f"{cpu['source']:>7.2f} {cpu['consumer']:>8.2f} {r['machine_busy_cores']:>8.2f}"
        )
    print(
        f"load average before {' '.join(loadavg_start)}, after {' '.join(meta['loadavg_at_end'])}"
    )
    print(f"bench-rnis: wrote {args.out}/bench-rnis.json and bench-rnis.png")


if __name__ == "__main__":
    main()
