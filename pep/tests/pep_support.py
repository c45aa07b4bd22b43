"""Test helpers: a PEP process in a lab namespace, data servers, checksummed streams."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from mec_pep.config import PepSettings
from mec_pep.flows import PepExtension
from mec_pep.service import PepService
from mts_lab.line import Lab, in_netns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
import pep_tlv

TOKEN = "test-token"
SOCKS_PORT, TLV_PORT, TPROXY_PORT = 1080, 8181, 5999
DUAL_STACK = {  # PEP settings for IPv4 and IPv6 clients and servers of the lab
    "allowed_clients": "10.201.1.0/24,fd00:201:1::/64",
    "allowed_destinations": "10.201.2.0/24,fd00:201:2::/64",
}

# The relays a test module may run against (the fixture ``relay_settings``), each chosen
# explicitly: the Python relay, and the compiled io_uring core; both relay every mode.
RELAYS: dict[str, dict[str, Any]] = {
    "python": {"relay_core": "python"},
    "uring": {"relay_core": "uring"},
}


# A random block of prime length repeated: shifted at every repetition, so lost,
# duplicated or reordered chunks change the digest.
_BLOCK = random.Random(7).randbytes(1_048_573)
CHUNK = len(_BLOCK)


def stream(size: int) -> Iterator[memoryview]:
    view = memoryview(_BLOCK)
    while size > 0:
        n = min(size, CHUNK)
        yield view[:n]
        size -= n


@functools.cache
def expected_digest(size: int) -> str:
    h = hashlib.sha256()
    for chunk in stream(size):
        h.update(chunk)
    return h.hexdigest()


def send_stream(sock: socket.socket, size: int) -> None:
    for chunk in stream(size):
        sock.sendall(chunk)


def receive_digest(sock: socket.socket, limit: int | None = None) -> tuple[int, str]:
    """Read to EOF (or ``limit`` bytes); returns (bytes, sha256)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = 0
    while limit is None or total < limit:
        want = len(buf) if limit is None else min(len(buf), limit - total)
        n = sock.recv_into(view[:want])
        if n == 0:
            break
        h.update(view[:n])
        total += n
    return total, h.hexdigest()


# ---- a data server in the server namespace ---------------------------------------------------

# Request: 1 byte command + 8 bytes size.
#   "U": the client uploads `size` bytes; the server answers with the 64-char hex digest.
#   "D": the server sends `size` bytes of the stream, then closes its side.
#   "E": echo until EOF, then close (half-close test).
#   "R": read the request, then reset the connection (RST).
#   "H": hold the connection open, send nothing (idle test).
_REQUEST = struct.Struct("!cQ")


class DataServer:
    """Threads serving requests on one port inside the server namespace."""

    def __init__(self, lab: Lab, port: int = 0, host: str | None = None) -> None:
        address = (host or lab.server_ip, port)
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.listener = in_netns(
            lab.server_ns, lambda: socket.create_server(address, family=family, backlog=4096)
        )
        self.address: tuple[str, int] = self.listener.getsockname()[:2]
        self.held: list[socket.socket] = []
        self.peers: list[tuple[str, int]] = []  # client addresses as the server saw them
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self.listener.accept()
            except OSError:
                return
            self.peers.append(peer[:2])
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            header = recv_exact(conn, _REQUEST.size)
            command, size = _REQUEST.unpack(header)
            if command == b"U":
                _, digest = receive_digest(conn, size)
                conn.sendall(digest.encode())
            elif command == b"D":
                send_stream(conn, size)
                conn.shutdown(socket.SHUT_WR)
                conn.recv(1)  # wait for the client to close
            elif command == b"E":
                while data := conn.recv(65536):
                    conn.sendall(data)
                conn.shutdown(socket.SHUT_WR)
            elif command == b"R":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif command == b"H":
                self.held.append(conn)
                return
        except OSError as exc:
            self.errors.append(exc)
        conn.close()

    def close(self) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def request(command: bytes, size: int = 0) -> bytes:
    return _REQUEST.pack(command, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("EOF")
        data += chunk
    return data


# ---- ways to reach the server from the client namespace -------------------------------------


def connect_direct(lab: Lab, target: tuple[str, int], timeout: float = 10) -> socket.socket:
    """A plain connect (intercepted by the PEP when transparent mode is on)."""
    return in_netns(lab.client_ns, lambda: socket.create_connection(target, timeout=timeout))


Dial = Callable[[tuple[str, int], float], socket.socket]


def connect_socks5(
    lab: Lab,
    target: tuple[str, int],
    timeout: float = 10,
    dial: Dial = socket.create_connection,
    pep_host: str | None = None,
) -> socket.socket:
    pep = (pep_host or lab.pep_client_side_ip, SOCKS_PORT)
    sock = in_netns(lab.client_ns, lambda: dial(pep, timeout))
    sock.sendall(b"\x05\x01\x00")
    assert recv_exact(sock, 2) == b"\x05\x00"
    if ":" in target[0]:
        address = b"\x04" + socket.inet_pton(socket.AF_INET6, target[0])
    else:
        address = b"\x01" + socket.inet_aton(target[0])
    sock.sendall(b"\x05\x01\x00" + address + struct.pack("!H", target[1]))
    reply = recv_exact(sock, 4)
    reply += recv_exact(sock, (16 if reply[3] == 4 else 4) + 2)  # the bound address
    if reply[1] != 0:
        sock.close()
        raise ConnectionRefusedError(f"SOCKS5 reply {reply[1]}")
    return sock


def connect_tlv(
    lab: Lab, target: tuple[str, int], timeout: float = 10, pep_host: str | None = None
) -> socket.socket:
    pep = (pep_host or lab.pep_client_side_ip, TLV_PORT)
    return in_netns(lab.client_ns, lambda: pep_tlv.connect(target, pep, timeout=timeout))


CONNECTORS: dict[str, Callable[[Lab, tuple[str, int]], socket.socket]] = {
    "transparent": connect_direct,
    "socks5": connect_socks5,
    "tlv": connect_tlv,
}

# (family, mode) -> a connection to the data server of that IP version through the PEP in
# that mode (the fixture through_pep)
ThroughPep = Callable[[str, str], socket.socket]


# ---- checks every mode must pass, over either IP version --------------------------------------


def check_half_close(sock: socket.socket) -> None:
    """The client's FIN reaches the server, which keeps answering until it closes too."""
    with sock:
        sock.sendall(request(b"E") + b"x" * 100_000)
        sock.shutdown(socket.SHUT_WR)  # the echo server only stops at our FIN
        echoed = b""
        while chunk := sock.recv(65536):
            echoed += chunk
        assert echoed == b"x" * 100_000


def check_server_reset(sock: socket.socket) -> None:
    """The server's RST reaches the client."""
    with sock:
        sock.sendall(request(b"R"))
        try:
            while sock.recv(1024):
                pass
        except ConnectionResetError:
            return
        raise AssertionError("the client saw a FIN, not the server's RST")


def check_client_abort(server: DataServer, connect: Callable[[], socket.socket]) -> None:
    """The client's RST reaches the server."""
    held = len(server.held)
    sock = connect()
    sock.sendall(request(b"H"))
    wait_for(lambda: len(server.held) > held, what="server to hold the connection")
    server_side = server.held[-1]
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # RST
    server_side.settimeout(5)
    try:
        server_side.recv(1)
    except ConnectionResetError:
        return
    raise AssertionError("the server saw no RST")


# ---- the PEP as a process in the lab's PEP namespace ----------------------------------------


class PepProcess:
    def __init__(
        self, lab: Lab, state_dir: Path, wrapper: Sequence[str] = (), **settings: Any
    ) -> None:
        """``wrapper``: a command the PEP runs under (e.g. one that installs a seccomp filter)."""
        self.lab = lab
        env = {
            **os.environ,
            "PEP_API_TOKENS": TOKEN,
            "PEP_HTTP_HOST": "127.0.0.1",
            "PEP_STATE_DIR": str(state_dir),
            "PEP_LOG_FORMAT": "console",
            "PEP_ALLOWED_CLIENTS": "10.201.1.0/24",
            "PEP_ALLOWED_DESTINATIONS": "10.201.2.0/24",
            "PEP_SOCKS5_PORT": str(SOCKS_PORT),
            "PEP_TLV_PORT": str(TLV_PORT),
            "PEP_TRANSPARENT_PORT": str(TPROXY_PORT),
            "PEP_BACKLOG_INTERVAL_MS": "0",
            "PEP_RAN_AWARE": "false",  # MELD/RAPID have their own tests (pep/tests/ran_aware)
        }
        for name, value in settings.items():
            key = f"PEP_{name.upper()}"
            if value is None:
                env.pop(key, None)
            else:
                env[key] = str(value)
        self.log_path = state_dir / "pep.log"
        self._log = self.log_path.open("wb")
        self.proc = lab.popen(
            lab.pep_ns,
            [*wrapper, sys.executable, "-m", "mec_pep", "serve"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.port = int(env.get("PEP_HTTP_PORT", "8102"))
        try:
            self._wait_ready()
        except BaseException:
            self.stop()  # else a PEP that was slow to start outlives its test and namespace
            raise

    def _wait_ready(self, timeout: float = 90) -> None:
        # A hang guard: at load 20-40 on the shared 2 cores the imports alone took 15-40 s.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pep exited {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if self.get("/healthz", auth=False).status_code in (200, 503):
                    return
            time.sleep(0.1)
        raise TimeoutError(f"pep did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def request(self, method: str, path: str, *, auth: bool = True, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {TOKEN}"} if auth else {}
        headers |= kw.pop("headers", {})
        url = f"http://127.0.0.1:{self.port}{path}"
        return in_netns(
            self.lab.pep_ns,
            lambda: httpx.request(method, url, headers=headers, timeout=30, **kw),
        )

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)

    def stats(self) -> dict[str, Any]:
        """``GET /pep/v1/stats``, which must answer."""
        response = self.get("/pep/v1/stats")
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def wait_for(predicate: Callable[[], bool], timeout: float = 10, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out waiting for {what}")


@contextlib.contextmanager
def core_service(
    lab: Lab, tmp_path: Path, extensions: list[PepExtension] | None = None, **settings: Any
) -> Iterator[PepService]:
    """A PEP with the core in the lab's PEP namespace, in this process (its data plane's
    counters can be read directly), with these extensions' hooks."""
    defaults = dict(
        relay_core="uring", transparent_port=15999, allowed_clients="10.201.1.0/24",
        allowed_destinations="10.201.2.0/24", backlog_interval_ms=0, ran_aware=False,
        state_dir=tmp_path, tproxy_nft_table="mts_pep_core", tproxy_mark=0x61, tproxy_table=161,
    )  # fmt: skip
    service = PepService(PepSettings(**{**defaults, **settings}), extensions=extensions)
    in_netns(lab.pep_ns, service.start)
    try:
        yield service
    finally:
        in_netns(lab.pep_ns, service.stop)
