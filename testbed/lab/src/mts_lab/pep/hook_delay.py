"""How late the compiled core's extension hooks run: from the core queuing a flow's
"established" event (the record's ``established_ns``, taken just before) to the start of
``on_flow_established`` in the hooks' Python thread.

``--connections`` UE connections through a transparent PEP on the core (in this process,
the lab's PEP namespace), ``--clients`` at a time; each sends a byte, has it echoed and is
held ``--hold-ms`` (longer than the hooks may lag, so that no flow ends unheard), then
closed. Prints the delays' p50/p99/max, the flows whose hook never ran, and how many events
woke the hooks' reader (``reader_wakes``, where the core has it).

    uv run python -m mts_lab.pep.hook_delay --connections 3000 --clients 16 --hold-ms 30

The core as of another checkout: ``PYTHONPATH=<checkout>/pep/src`` (its own ``build/``).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import mec_pep
from mec_pep.config import PepSettings
from mec_pep.flows import Flow, PepExtension
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns
from mts_lab.pep import in_lab

PORT = 18081


class Delays(PepExtension):
    name = "hook-delay"

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_flow_established(self, flow: Flow) -> None:
        assert flow.established_at is not None
        self.seconds.append(time.time() - flow.established_at)


def _echo(server: socket.socket) -> None:
    def serve(peer: socket.socket) -> None:
        with peer:
            while data := peer.recv(64):
                peer.sendall(data)

    while True:
        try:
            peer, _ = server.accept()
        except OSError:  # closed at the end
            return
        threading.Thread(target=serve, args=(peer,), daemon=True).start()


def _client(lab: Lab, count: int, hold_s: float) -> None:
    def all_of_them() -> None:
        for _ in range(count):
            with socket.create_connection((lab.server_ip, PORT), timeout=10) as sock:
                sock.sendall(b"x")
                assert sock.recv(1) == b"x"
                time.sleep(hold_s)

    in_netns(lab.client_ns, all_of_them)


def measure(lab: Lab, connections: int, clients: int, hold_s: float) -> dict[str, float]:
    delays = Delays()
    settings = PepSettings(
        relay_core="uring", transparent_port=15997, socks5_port=None, tlv_port=None,
        allowed_clients="10.201.1.0/24", allowed_destinations="10.201.2.0/24",
        backlog_interval_ms=0, ran_aware=False, state_dir=Path(tempfile.mkdtemp()),
        tproxy_nft_table="mts_pep_hooks", tproxy_mark=0x63, tproxy_table=163,
    )  # fmt: skip
    service = PepService(settings, extensions=[delays])
    in_netns(lab.pep_ns, service.start)
    server = in_netns(lab.server_ns, lambda: socket.create_server(("", PORT), backlog=4096))
    threading.Thread(target=_echo, args=(server,), daemon=True).start()
    try:
        start = time.monotonic()
        each = [connections // clients + (i < connections % clients) for i in range(clients)]
        workers = [threading.Thread(target=_client, args=(lab, n, hold_s)) for n in each]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.monotonic() - start
        time.sleep(0.1)  # the last hooks
        dp = service.dataplane
        wakes = dp.reader_wakes() if hasattr(dp, "reader_wakes") else float("nan")
        ms = sorted(d * 1e3 for d in delays.seconds)
        return {
            "per_s": connections / wall, "heard": len(ms), "wakes": wakes,
            "p50_ms": statistics.median(ms), "p99_ms": ms[int(0.99 * (len(ms) - 1))],
            "max_ms": ms[-1],
        }  # fmt: skip
    finally:
        server.close()
        in_netns(lab.pep_ns, service.stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--hold-ms", type=float, default=30.0)
    args = parser.parse_args()

    def body(lab: Lab) -> None:
        print(f"mec_pep from {Path(mec_pep.__file__).parent}")
        r = measure(lab, args.connections, args.clients, args.hold_ms / 1e3)
        print(
            f"{args.connections} connections at {r['per_s']:.0f}/s: hooks heard "
            f"{r['heard']}, reader woken {r['wakes']} times; on_flow_established late by "
            f"p50 {r['p50_ms']:.3f}, p99 {r['p99_ms']:.3f}, max {r['max_ms']:.3f} ms"
        )

    return in_lab("hkd", body)


if __name__ == "__main__":
    raise SystemExit(main())
