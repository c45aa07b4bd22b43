"""Small UDP probe for tests and experiments: timestamped, numbered datagrams.

    python -m mts_testbed.traffic send DST PORT --rate PPS --count N [--size BYTES] [--poisson]
    python -m mts_testbed.traffic sink BIND PORT --count N --timeout S   (prints JSON)

The sink reports which sequence numbers arrived and each one-way delay (sender and
receiver share the machine's clock, namespaces or not). The arrival time is the kernel's
(SO_TIMESTAMPNS), so a busy host delaying the sink process does not count as delay.

A fixed rate whose period is a multiple of the TTI (100/s and 1 ms) sends every datagram
at the same phase of the TTI, so every one waits the same part of a TTI: `--poisson`
(exponential gaps) spreads the sends over the TTI's phases (Poisson arrivals see time
averages).
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import time

HEADER = struct.Struct("!QQ")  # sequence number, send time (ns, CLOCK_REALTIME)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("qq")


def kernel_time(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The receive time the kernel attached (SCM_TIMESTAMPNS), in ns."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= TIMESPEC.size:
            sec, nsec = TIMESPEC.unpack_from(data)
            return int(sec * 1_000_000_000 + nsec)
    return None


def send(dst: str, port: int, rate: float, count: int, size: int, poisson: bool = False) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payload = bytearray(max(size - 28, HEADER.size))  # size is the IP packet size
    due = time.monotonic()
    for seq in range(count):
        pause = due - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        due += random.expovariate(rate) if poisson else 1 / rate
        HEADER.pack_into(payload, 0, seq, time.time_ns())
        sock.sendto(payload, (dst, port))


def sink(bind: str, port: int, count: int, timeout: float) -> dict[str, object]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((bind, port))
    print("ready", file=sys.stderr, flush=True)
    sock.settimeout(timeout)
    seqs: list[int] = []
    delays_ms: list[float] = []
    try:
        while len(seqs) < count:
            data, ancdata, _, _ = sock.recvmsg(65535, socket.CMSG_SPACE(16))
            now = kernel_time(ancdata) or time.time_ns()
            seq, sent = HEADER.unpack_from(data)
            seqs.append(seq)
            delays_ms.append((now - sent) / 1e6)
    except TimeoutError:
        pass
    return {"received": len(seqs), "unique": len(set(seqs)), "seqs": seqs, "delays_ms": delays_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_testbed.traffic", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send", help="send numbered, timestamped datagrams at a fixed rate")
    s.add_argument("dst")
    s.add_argument("port", type=int)
    s.add_argument("--rate", type=float, required=True, help="datagrams per second")
    s.add_argument("--count", type=int, required=True)
    s.add_argument("--size", type=int, default=200, help="IP packet size in bytes")
    s.add_argument(
        "--poisson", action="store_true", help="exponential gaps of mean 1/rate, not fixed ones"
    )
    k = sub.add_parser("sink", help="receive datagrams, print arrivals and one-way delays as JSON")
    k.add_argument("bind")
    k.add_argument("port", type=int)
    k.add_argument("--count", type=int, required=True, help="stop after this many")
    k.add_argument(
        "--timeout", type=float, default=2.0, help="stop after this long without data (s)"
    )
    args = parser.parse_args(argv)
    if args.cmd == "send":
        send(args.dst, args.port, args.rate, args.count, args.size, args.poisson)
    else:
        print(json.dumps(sink(args.bind, args.port, args.count, args.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
