"""Paced records for the path manager experiment: a server and a UE client, each a process.

``send`` (server namespace) prints ``listening`` once it listens, accepts one connection
and offers ``--rate`` bit/s in 1500-byte records, each stamped with its sequence number and
CLOCK_MONOTONIC at generation (the clock is the host's, shared by all namespaces). A record
waits in the sender when the connection pushes back, so its delay counts from when the
source produced it.

``receive`` (UE namespace) connects with MPTCP from the UE's first cell address (its kernel
adds the other cells), reads for ``--seconds`` and saves every record's arrival time
(CLOCK_MONOTONIC, s) and delay (s) to ``--out`` (.npy, two rows) at the end.

``send-udp``/``receive-udp`` are the same over UDP, one record per datagram (the tunnel data
plane: the research's proxy carried datagrams, and what a full queue drops is lost). The
sender prints ``start <ns>`` (its CLOCK_MONOTONIC at the first record); the receiver also
saves each record's sequence number (a third row), so the experiment counts what was lost.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import socket
import struct
import time

import numpy as np

RECORD = 1500
HEADER = struct.Struct("=QQ")  # sequence number, generation time (ns, CLOCK_MONOTONIC)


def send(port: int, rate_bps: float, seconds: float) -> None:
    listener = socket.create_server(("0.0.0.0", port))
    print("listening", flush=True)  # the experiment starts the receiver on this line
    conn, _ = listener.accept()
    conn.setblocking(False)
    per_second = rate_bps / (8 * RECORD)
    pad = bytes(RECORD - HEADER.size)
    pending = bytearray()
    generated, start = 0, time.monotonic()
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * per_second) - generated
        for _ in range(due):
            pending += HEADER.pack(generated, time.monotonic_ns()) + pad
            generated += 1
        if pending:
            try:
                sent = conn.send(pending)
                del pending[:sent]
            except BlockingIOError:
                pass
        select.select([], [conn] if pending else [], [], 0.0005)
    conn.close()


def receive(server: str, port: int, bind: str, seconds: float, out: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_MPTCP)
    sock.bind((bind, 0))
    sock.settimeout(10)
    sock.connect((server, port))
    sock.settimeout(0.05)
    start = time.monotonic()
    buffer = bytearray()
    delays: list[float] = []
    arrivals: list[float] = []
    while time.monotonic() - start < seconds:
        try:
            data = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not data:
            break
        now_ns = time.monotonic_ns()
        buffer += data
        whole = len(buffer) // RECORD
        for i in range(whole):
            _, sent_ns = HEADER.unpack_from(buffer, i * RECORD)
            delays.append((now_ns - sent_ns) / 1e9)
            arrivals.append(now_ns / 1e9)
        del buffer[: whole * RECORD]
    sock.close()
    np.save(out, np.array([arrivals, delays]))


def send_udp(to: str, port: int, rate_bps: float, seconds: float, size: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    per_second = rate_bps / (8 * size)
    pad = bytes(size - HEADER.size)
    generated, start = 0, time.monotonic()
    print(f"start {int(start * 1e9)}", flush=True)
    while (now := time.monotonic()) - start < seconds:
        for _ in range(int((now - start) * per_second) - generated):
            # A full local queue loses the record, as a full proxy queue would.
            with contextlib.suppress(OSError):
                sock.sendto(HEADER.pack(generated, time.monotonic_ns()) + pad, (to, port))
            generated += 1
        time.sleep(0.0005)
    sock.close()


def receive_udp(bind: str, port: int, seconds: float, out: str) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((bind, port))
    sock.settimeout(0.05)
    print("listening", flush=True)
    rows: list[tuple[float, float, int]] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            continue
        now_ns = time.monotonic_ns()
        seq, sent_ns = HEADER.unpack_from(data)
        rows.append((now_ns / 1e9, (now_ns - sent_ns) / 1e9, seq))
    sock.close()
    np.save(out, np.array(rows).T if rows else np.zeros((3, 0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("send", help="paced records to one client")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--rate", type=float, required=True, help="bit/s")
    s.add_argument("--seconds", type=float, required=True)
    r = sub.add_parser("receive", help="read records over MPTCP, save (arrival, delay) .npy")
    r.add_argument("--server", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--bind", required=True, help="the UE's first cell address")
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--out", required=True, help=".npy file: arrival times (s), delays (s)")
    su = sub.add_parser("send-udp", help="paced records as datagrams")
    su.add_argument("--to", required=True)
    su.add_argument("--port", type=int, required=True)
    su.add_argument("--rate", type=float, required=True, help="bit/s")
    su.add_argument("--seconds", type=float, required=True)
    su.add_argument("--size", type=int, required=True, help="datagram payload (bytes)")
    ru = sub.add_parser("receive-udp", help="read datagrams, save (arrival, delay, seq) .npy")
    ru.add_argument("--bind", required=True)
    ru.add_argument("--port", type=int, required=True)
    ru.add_argument("--seconds", type=float, required=True)
    ru.add_argument("--out", required=True)
    args = parser.parse_args()
    if args.command == "send":
        send(args.port, args.rate, args.seconds)
    elif args.command == "receive":
        receive(args.server, args.port, args.bind, args.seconds, args.out)
    elif args.command == "send-udp":
        send_udp(args.to, args.port, args.rate, args.seconds, args.size)
    else:
        receive_udp(args.bind, args.port, args.seconds, args.out)


if __name__ == "__main__":
    main()
