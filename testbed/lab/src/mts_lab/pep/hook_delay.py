"""How late the compiled core's extension hooks run: from the core queuing a flow's
"established" event (the record's ``established_ns``, taken just before) to the start of
``on_flow_established`` in the hooks' Python thread.

``--connections`` UE connections through a transparent PEP on the core (in this process,
the lab's PEP namespace) from a client process, ``--clients`` at a time (the echo server is
a process too: only the PEP's threads take turns at this process's GIL, as in a PEP
process). Each sends a byte, has it echoed and is held ``--hold-ms`` (with more than the
hooks may lag, no flow ends unheard), then closed. Prints the delays' p50/p99/max, the
flows whose hook never ran, how many events woke the hooks' reader (``reader_wakes``,
where the core has it) and the CPU time of the PEP's own threads (the relay threads and
the hooks' reader) per connection, the reader's and of it what it spent in ``_heard``
(the rest is its waiting and waking).

    uv run python -m mts_lab.pep.hook_delay --connections 3000 --clients 16 --hold-ms 30

The core as of another checkout: ``PYTHONPATH=<checkout>/pep/src`` (its own ``build/``).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import mec_pep
from mec_pep.config import PepSettings
from mec_pep.core import CoreDataPlane
from mec_pep.flows import Flow, PepExtension
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns
from mts_lab.pep import in_lab
from mts_lab.schedstat import schedstat, thread_ids

PORT = 18081


class Delays(PepExtension):
    name = "hook-delay"

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_flow_established(self, flow: Flow) -> None:
        assert flow.established_at is not None
        self.seconds.append(time.time() - flow.established_at)


def _tasks() -> set[int]:
    return set(thread_ids(os.getpid()))


def _cpu_ns(tids: set[int]) -> dict[int, int]:
    """CPU time (ns) of each of these threads of this process (the PEP's: they outlive the
    measure, so one missing fails it at its use)."""
    stats = {t: schedstat(os.getpid(), t) for t in tids}
    return {t: s.run_ns for t, s in stats.items() if s is not None}


class ReaderClock:
    """The hooks' reader thread (its id) and the CPU time it spends in ``_heard`` (a flow's
    record, the lent sockets, the hooks): the rest of its time is its waiting and waking."""

    def __init__(self) -> None:
        self.tid = 0
        self.heard_ns = 0
        self._heard = CoreDataPlane._heard

    def __enter__(self) -> ReaderClock:
        def heard(dataplane: CoreDataPlane, event: Any) -> None:
            start = time.thread_time_ns()
            self._heard(dataplane, event)
            self.heard_ns += time.thread_time_ns() - start
            self.tid = threading.get_native_id()

        CoreDataPlane._heard = heard  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *_: object) -> None:
        CoreDataPlane._heard = self._heard  # type: ignore[method-assign]


def clients(target: tuple[str, int], connections: int, threads: int, hold_s: float) -> None:
    """The load (in a process of its own, so that its threads take no turns at this one's
    GIL): ``threads`` at a time, each connection a byte echoed, held, closed."""

    def some(count: int) -> None:
        for _ in range(count):
            with socket.create_connection(target, timeout=10) as sock:
                sock.sendall(b"x")
                assert sock.recv(1) == b"x"
                time.sleep(hold_s)

    each = [connections // threads + (i < connections % threads) for i in range(threads)]
    workers = [threading.Thread(target=some, args=(n,)) for n in each]
    start = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(connections / (time.monotonic() - start))  # connections/s, for measure


def _python(lab: Lab, ns: str, *args: object) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", *map(str, args)]
    return lab.popen(ns, cmd, stdout=subprocess.PIPE, text=True)


def measure(lab: Lab, connections: int, threads: int, hold_s: float) -> dict[str, float]:
    with ReaderClock() as clock:
        return _measure(lab, connections, threads, hold_s, clock)


def _measure(
    lab: Lab, connections: int, threads: int, hold_s: float, clock: ReaderClock
) -> dict[str, float]:
    delays = Delays()
    settings = PepSettings(
        relay_core="uring", transparent_port=15997, socks5_port=None, tlv_port=None,
        allowed_clients="10.201.1.0/24", allowed_destinations="10.201.2.0/24",
        backlog_interval_ms=0, ran_aware=False, state_dir=Path(tempfile.mkdtemp()),
        tproxy_nft_table="mts_pep_hooks", tproxy_mark=0x63, tproxy_table=163,
    )  # fmt: skip
    service = PepService(settings, extensions=[delays])
    before = _tasks()
    in_netns(lab.pep_ns, service.start)
    time.sleep(0.1)  # the thread that joined the namespace to start it gone
    pep_threads = _tasks() - before  # the core's relay threads and the hooks' reader
    server = _python(lab, lab.server_ns, "mts_lab.pep.bench", "echo", lab.server_ip, PORT)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        cpu = _cpu_ns(pep_threads)
        load = _python(lab, lab.client_ns, "mts_lab.pep.hook_delay", "clients", lab.server_ip,
                       PORT, connections, threads, hold_s)  # fmt: skip
        assert load.stdout is not None
        per_s = float(load.stdout.read())
        assert load.wait() == 0, "the clients failed"
        time.sleep(0.1)  # the last hooks
        after = _cpu_ns(pep_threads)
        per = {t: (after[t] - cpu[t]) / 1e3 / connections for t in pep_threads}
        dp = service.dataplane
        wakes = dp.reader_wakes() if hasattr(dp, "reader_wakes") else float("nan")
        ms = sorted(d * 1e3 for d in delays.seconds)
        return {
            "per_s": per_s, "heard": len(ms), "wakes": wakes,
            "p50_ms": statistics.median(ms), "p99_ms": ms[int(0.99 * (len(ms) - 1))],
            "max_ms": ms[-1], "pep_us": sum(per.values()),
            "reader_us": per.get(clock.tid, float("nan")),
            "heard_us": clock.heard_ns / 1e3 / connections,
        }  # fmt: skip
    finally:
        server.kill()
        server.wait()
        in_netns(lab.pep_ns, service.stop)


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["clients"]:  # the load's process (measure)
        host, port, connections, threads, hold_s = sys.argv[2:]
        clients((host, int(port)), int(connections), int(threads), float(hold_s))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16, help="connections at a time")
    parser.add_argument("--hold-ms", type=float, default=30.0)
    args = parser.parse_args(argv)

    def body(lab: Lab) -> None:
        print(f"mec_pep from {Path(mec_pep.__file__).parent}")
        r = measure(lab, args.connections, args.clients, args.hold_ms / 1e3)
        print(
            f"{args.connections} connections at {r['per_s']:.0f}/s: hooks heard "
            f"{r['heard']}, reader woken {r['wakes']} times; on_flow_established late by "
            f"p50 {r['p50_ms']:.3f}, p99 {r['p99_ms']:.3f}, max {r['max_ms']:.3f} ms; "
            f"the PEP's threads {r['pep_us']:.1f} us of CPU per connection, of it the hooks' "
            f"reader {r['reader_us']:.1f} (in _heard {r['heard_us']:.1f})"
        )

    return in_lab("hkd", body)


if __name__ == "__main__":
    raise SystemExit(main())
