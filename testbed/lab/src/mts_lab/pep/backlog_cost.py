"""What one sample of the backlog feed costs on each relay, with N flows holding bytes.

N UE connections through a transparent PEP (in this process, the lab's PEP namespace),
each sent 256 kB by its server into a 4 kB UE receive buffer, so that every flow holds
bytes toward its UE and the feed samples all N; then ``BacklogFeed.tick`` timed over
``--samples`` samples (no AMQP: the sampling only). On the Python relay the queues are read
in the relay threads; on the compiled core, in the feed's thread through copies of the
flows' sockets (``pidfd_getfd``).

    uv run python -m mts_lab.pep.backlog_cost --flows 64,1000 --samples 50
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import time
from pathlib import Path

from mec_pep.backlog import BacklogFeed
from mec_pep.config import PepSettings
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns
from mts_lab.pep import in_lab

PORT, PAYLOAD, UE_RCVBUF = 18080, 256 * 1024, 4096


def _connect(lab: Lab, n: int) -> list[socket.socket]:
    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UE_RCVBUF)  # the PEP holds the rest
        sock.connect((lab.server_ip, PORT))
        return sock

    return [in_netns(lab.client_ns, dial) for _ in range(n)]


def measure(lab: Lab, relay: str, flows: int, samples: int) -> dict[str, float]:
    settings = PepSettings(
        relay_core=relay, transparent_port=15998, socks5_port=None, tlv_port=None,
        allowed_clients="10.201.1.0/24", allowed_destinations="10.201.2.0/24",
        backlog_interval_ms=0, ran_aware=False, state_dir=Path(tempfile.mkdtemp()),
        tproxy_nft_table="mts_pep_cost", tproxy_mark=0x62, tproxy_table=162,
    )  # fmt: skip
    service = PepService(settings)
    in_netns(lab.pep_ns, service.start)
    server = in_netns(lab.server_ns, lambda: socket.create_server(("", PORT), backlog=4096))
    ues, peers = [], []
    try:
        ues = _connect(lab, flows)
        for _ in range(flows):
            peer, _ = server.accept()
            peer.setblocking(False)
            peer.send(b"x" * PAYLOAD)  # what fits now; the rest is not needed
            peers.append(peer)
        feed = BacklogFeed(service.dataplane, None, 1.0)
        deadline = time.monotonic() + 10
        while sum(b.flows for b in feed.tick().values()) < flows and time.monotonic() < deadline:
            time.sleep(0.1)
        busy = sum(b.flows for b in feed.tick().values())
        times = []
        for _ in range(samples):
            start = time.perf_counter()
            feed.tick()
            times.append(time.perf_counter() - start)
        median = statistics.median(times) * 1e3
        return {"busy_flows": busy, "median_ms": median, "us_per_flow": median * 1e3 / busy}
    finally:
        for sock in (*ues, *peers, server):
            sock.close()
        in_netns(lab.pep_ns, service.stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", default="64,1000", help="N,...")
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()

    def body(lab: Lab) -> None:
        for n in (int(x) for x in args.flows.split(",")):
            for relay in ("python", "uring"):
                r = measure(lab, relay, n, args.samples)
                print(f"{relay:6} flows {n:5} busy {r['busy_flows']:5} sample "
                      f"{r['median_ms']:7.2f} ms  {r['us_per_flow']:6.1f} us/flow")  # fmt: skip

    return in_lab("blc", body)


if __name__ == "__main__":
    raise SystemExit(main())
