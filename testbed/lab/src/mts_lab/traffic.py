"""The traffic of every experiment: a content server and downloader, and a UDP probe.

    python -m mts_lab.traffic serve PORT[:CCA] ...        (server namespace; prints "ready")
    python -m mts_lab.traffic fetch HOST PORT SIZE [--progress S] [--at T] [--for S]  (UE namespace)
    python -m mts_lab.traffic send DST PORT --rate PPS --count N [--size BYTES] [--poisson]
    python -m mts_lab.traffic sink BIND PORT --count N --timeout S   (prints JSON)

**Downloads.** The client sends the size it wants (``REQUEST``: 8 bytes, network order); the
server sends that many bytes with the congestion control of the port (default ``cubic``,
the research's hosts; a namespace's default may only be a "non-restricted" algorithm, so it
is set per socket), then closes. ``fetch`` prints, one JSON object a line: ``{"started":
wall-clock s}``, then every ``--progress`` seconds ``{"t": s, "bytes": n}`` (if asked), then
``{"bytes": n, "fct_s": s, "timeline": [[s, bytes], ...]}`` (a sample every 0.1 s). With
``--for S`` it stops after S seconds (a time-limited transfer, as iperf's ``-t``): ``bytes``
is what arrived by then and ``fct_s`` is S; the server sees the connection reset.

**UDP probe.** Timestamped, numbered datagrams. The sink reports which sequence numbers
arrived and each one-way delay (sender and receiver share the machine's clock, namespaces
or not). The arrival time is the kernel's (SO_TIMESTAMPNS), so a busy host delaying the sink
process does not count as delay.

A fixed rate whose period is a multiple of the TTI (100/s and 1 ms) sends every datagram
at the same phase of the TTI, so every one waits the same part of a TTI: `--poisson`
(exponential gaps) spreads the sends over the TTI's phases (Poisson arrivals see time
averages).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import sys
import threading
import time

REQUEST = struct.Struct("!Q")  # a download's size, asked by the client
DEFAULT_CCA = "cubic"
TIMELINE_S = 0.1  # a download's timeline: one sample this often
HEADER = struct.Struct("!QQ")  # a probe datagram: sequence number, send time (ns, CLOCK_REALTIME)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
TIMESPEC = struct.Struct("qq")


# ---- downloads ---------------------------------------------------------------------------------


def command(*args: str) -> list[str]:
    """The argv that runs this module, e.g. ``topo.popen(ns, *command("fetch", ...))``."""
    return [sys.executable, "-m", "mts_lab.traffic", *args]


def serve(specs: list[str]) -> None:
    """``PORT[:CCA]`` each: send every client the bytes it asks for with CCA, then close."""
    chunk = memoryview(os.urandom(1 << 20))

    def send(conn: socket.socket) -> None:
        with conn:
            (size,) = REQUEST.unpack(conn.recv(REQUEST.size, socket.MSG_WAITALL))
            try:
                while size > 0:
                    size -= conn.send(chunk[: min(size, len(chunk))])
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)
            except (BrokenPipeError, ConnectionResetError):
                return  # a time-limited fetch (--for) closed it early

    def accept(listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=send, args=(conn,), daemon=True).start()

    threads = []
    for spec in specs:
        port, _, cca = spec.partition(":")
        listener = socket.create_server(("0.0.0.0", int(port)), backlog=64)
        # Accepted sockets inherit the listener's congestion control.
        listener.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_CONGESTION, (cca or DEFAULT_CCA).encode()
        )
        threads.append(threading.Thread(target=accept, args=(listener,), daemon=True))
        threads[-1].start()
    print("ready", flush=True)
    for t in threads:
        t.join()


def fetch(
    host: str, port: int, size: int, progress_s: float = 0.0, at: float = 0.0,
    for_s: float = 0.0,
) -> None:  # fmt: skip
    """Download ``size`` bytes, printing the lines the module's docstring describes; with
    ``at`` (Unix time), not before then: parallel downloads whose processes start one by one
    on a loaded host still begin together; with ``for_s``, for that long at most."""
    time.sleep(max(0.0, at - time.time()))
    start = time.monotonic()
    print(json.dumps({"started": time.time()}), flush=True)
    sock = socket.create_connection((host, port), timeout=120)
    sock.sendall(REQUEST.pack(size))
    buf = bytearray(1 << 20)
    received, timeline = 0, [(0.0, 0)]
    next_sample = start + TIMELINE_S
    next_progress = start + progress_s if progress_s > 0 else float("inf")
    stop = start + for_s if for_s > 0 else float("inf")
    while (now := time.monotonic()) < stop:
        sock.settimeout(min(120.0, max(0.01, stop - now)))
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            if for_s > 0:
                continue  # the time limit's own wake-up, or a stall that it ends
            raise
        if not n:
            break
        received += n
        now = time.monotonic()
        if now >= next_sample:
            timeline.append((round(now - start, 3), received))
            next_sample = now + TIMELINE_S
        if now >= next_progress:
            print(json.dumps({"t": round(now - start, 3), "bytes": received}), flush=True)
            next_progress = now + progress_s
    fct = min(time.monotonic() - start, for_s) if for_s > 0 else time.monotonic() - start
    timeline.append((round(fct, 3), received))
    sock.close()
    print(json.dumps({"bytes": received, "fct_s": fct, "timeline": timeline}), flush=True)


# ---- UDP probe ---------------------------------------------------------------------------------


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
        prog="python -m mts_lab.traffic", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    srv = sub.add_parser("serve", help="content server: PORT[:CCA] ...")
    srv.add_argument("specs", nargs="+")
    get = sub.add_parser("fetch", help="download SIZE bytes, print the result as JSON lines")
    get.add_argument("host")
    get.add_argument("port", type=int)
    get.add_argument("size", type=int)
    get.add_argument("--progress", type=float, default=0.0, help="a progress line every S s")
    get.add_argument("--at", type=float, default=0.0, help="start at this Unix time")
    get.add_argument("--for", dest="for_s", type=float, default=0.0,
                     help="stop after S seconds (0: when SIZE bytes arrived)")  # fmt: skip
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
    if args.cmd == "serve":
        serve(args.specs)
    elif args.cmd == "fetch":
        fetch(args.host, args.port, args.size, args.progress, args.at, args.for_s)
    elif args.cmd == "send":
        send(args.dst, args.port, args.rate, args.count, args.size, args.poisson)
    else:
        print(json.dumps(sink(args.bind, args.port, args.count, args.timeout)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
