"""Another thread's cyclic garbage, collected while relay threads run (pep/tests/test_relay_gc.py).

Run as its own process so that the descriptor numbers are this script's alone: the
sockets made before the relays start sit at the lowest free numbers; each relay thread's
private table closes its copies of them and reuses those numbers for its own epoll and
listeners. The same numbers, owned by this (main) thread's socket objects, then become
cyclic garbage, and each relay thread allocates past generation 0's threshold, where
CPython would collect. Prints one JSON object: what the relays' descriptors were, whether
each relay still runs its loop and relays a SOCKS5 connection, whether the garbage was
collected (and its descriptors closed in this thread's table).
"""

from __future__ import annotations

import gc
import json
import os
import socket
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from mec_pep.config import PepSettings
from mec_pep.dataplane import DataPlane
from mec_pep.flows import FlowTable, Hooks, ProxyMode

FOREIGN = 16  # sockets this thread owns while the relays start


def main() -> None:
    raw = [socket.socket().detach() for _ in range(FOREIGN)]
    settings = PepSettings(
        listen_host="127.0.0.1",
        listen_host6=None,
        allowed_clients="127.0.0.1/32",
        allowed_destinations="127.0.0.1/32",
        backlog_interval_ms=0,
        ran_aware=False,
        force_buffers=False,
        ran_rcvbuf=0,
        ran_sndbuf=0,
        wan_rcvbuf=0,
        wan_sndbuf=0,
    )
    dp = DataPlane(settings, FlowTable(), Hooks(), threads=2)
    dp.start()
    try:
        socks = dp.listen(ProxyMode.SOCKS5, 0)
        echo = echo_server()
        report: dict[str, Any] = {"foreign": raw, "gc_enabled_while_running": gc.isenabled()}
        report["epolls"] = [epoll_number(relay.native_id) for relay in dp.relays]
        inodes = {fd: os.fstat(fd).st_ino for fd in raw}
        refs = make_garbage(raw)
        for relay in dp.relays:
            relay.call(allocate, timeout=10)
        report["alive"] = [responds(relay.call) for relay in dp.relays]
        report["relayed"] = relays_connections(socks, echo.getsockname())
        deadline = time.monotonic() + 10
        while any(r() is not None for r in refs) and time.monotonic() < deadline:
            time.sleep(0.05)
        report["collected"] = all(r() is None for r in refs)
        report["closed_here"] = [fd for fd, ino in inodes.items() if not same_socket(fd, ino)]
    finally:
        dp.stop()
    report["gc_enabled_after_stop"] = gc.isenabled()
    print(json.dumps(report))


def epoll_number(tid: int | None) -> int:
    """The number of a relay thread's epoll in its own descriptor table."""
    for entry in Path(f"/proc/self/task/{tid}/fd").iterdir():
        if os.readlink(entry) == "anon_inode:[eventpoll]":
            return int(entry.name)
    raise RuntimeError("no epoll in the relay's table")


def make_garbage(fds: list[int]) -> list[weakref.ref[socket.socket]]:
    """Own ``fds`` with socket objects in reference cycles, and drop them (young garbage)."""
    gc.collect()  # generation 0 empty: nothing below collects before the relays allocate
    refs = []
    for fd in fds:
        sock = socket.socket(fileno=fd)
        refs.append(weakref.ref(sock))
        cycle: list[Any] = [sock]
        cycle.append(cycle)
    return refs


def allocate() -> int:
    """Allocate, in the calling (relay) thread, past generation 0's threshold."""
    keep = [[] for _ in range(4 * max(gc.get_threshold()[0], 1000))]  # type: ignore[var-annotated]
    return len(keep)


def responds(call: Any) -> bool:
    """The relay thread still runs its loop (a dead epoll never answers)."""
    try:
        return bool(call(lambda: True, timeout=5))
    except Exception:
        return False


def relays_connections(socks: tuple[str, int], target: tuple[str, int]) -> int:
    """SOCKS5 connections through the PEP (the kernel spreads them over the relays)."""
    ok = 0
    for _ in range(8):
        try:
            with socket.create_connection(socks, timeout=5) as sock:
                host = socket.inet_aton(target[0]) + target[1].to_bytes(2, "big")
                sock.sendall(b"\x05\x01\x00\x05\x01\x00\x01" + host + b"ping")
                got = b""
                while len(got) < 2 + 10 + 4:
                    chunk = sock.recv(64)
                    if not chunk:
                        break
                    got += chunk
                ok += got.endswith(b"ping")
        except OSError:
            pass
    return ok


def echo_server() -> socket.socket:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return listener


def same_socket(fd: int, inode: int) -> bool:
    """``fd`` is still open here on the same socket (a closed number may be reused)."""
    try:
        return os.fstat(fd).st_ino == inode
    except OSError:
        return False


if __name__ == "__main__":
    main()
