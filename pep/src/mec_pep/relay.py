"""The relay: one thread, an edge-triggered epoll loop, ``splice`` through pipes.

Every flow has two pumps, one per direction (``up``: UE → server, ``down``: server → UE).
A pump moves bytes socket → pipe → socket with ``splice(2)``, so payload never enters
user space (or, with ``relay_method=copy``, through a user-space buffer: measured slower,
kept for comparison). Pipes come from a pool when data arrives and go back when the pump
has nothing in flight, so an idle flow holds two sockets and ~1.5 KiB of Python objects,
no pipe.

End of a flow:
- FIN from one side: once that pump's pipe is drained, ``shutdown(SHUT_WR)`` on the
  other leg (half-close). When both directions have done this, both sockets close.
- RST or a socket error on either leg: the other leg is closed with an RST
  (``SO_LINGER`` 0), so both endpoints learn at once that the connection is gone.
- Timeouts (handshake/connect, idle, half-open) also end a flow with RSTs.

Each relay thread has its own descriptor table (``unshare(CLONE_FILES)``), its own
listeners (``SO_REUSEPORT``: the kernel spreads new connections over the relay threads)
and its own epoll set; the flow table, policy and settings are shared. Everything in this
module runs in the relay thread except ``start``/``stop``/``call``/``post``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import itertools
import os
import resource
import select
import socket
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeVar

from mec_common.logging import get_logger
from mec_pep import socks5, tlv
from mec_pep.config import PepSettings
from mec_pep.flows import Flow, FlowTable, Hooks, Leg, Mode
from mec_pep.policy import AccessPolicy
from mec_pep.sockets import TCP_FASTOPEN_NO_COOKIE, apply_buffers, reset_on_close, set_buffers

log = get_logger(__name__)

T = TypeVar("T")

SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
FLOW_EVENTS = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET
READABLE = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
WRITABLE = select.EPOLLOUT | select.EPOLLHUP | select.EPOLLERR
HANDSHAKE_LIMIT = 512  # bytes a SOCKS5 or TLV header may take; more is an error
ACCEPT_BATCH = 64  # accepts per listener event, so one busy port cannot starve flows
TICK = 0.25  # seconds between timer checks
CLONE_FILES = 0x400
IPV6_TRANSPARENT = 75  # linux/in6.h; not in the socket module
# A listener that cannot be made IPv6 because the namespace has none: run IPv4 only.
NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL)
_libc = ctypes.CDLL(None, use_errno=True)


class Stage(IntEnum):
    SOCKS_GREETING = 1
    SOCKS_REQUEST = 2
    TLV_HEADER = 3
    CONNECTING = 4
    RELAYING = 5
    CLOSED = 6


FIRST_STAGE = {
    Mode.SOCKS5: Stage.SOCKS_GREETING,
    Mode.TLV: Stage.TLV_HEADER,
    Mode.TRANSPARENT: Stage.CONNECTING,
}


class PipePool:
    """Pipes of one size, reused so that a flow holds a pipe only while data is in it."""

    def __init__(self, size: int, keep: int = 256) -> None:
        self.size = size
        self._keep = keep
        self._free: list[tuple[int, int]] = []
        self.in_use = 0

    def get(self) -> tuple[int, int]:
        self.in_use += 1
        if self._free:
            return self._free.pop()
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            self.size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, self.size)
        except PermissionError:
            # Above fs.pipe-max-size without CAP_SYS_RESOURCE: take the largest allowed.
            limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
            self.size = fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, min(self.size, limit))
        return r, w

    def put(self, pipe: tuple[int, int], *, empty: bool) -> None:
        self.in_use -= 1
        if empty and len(self._free) < self._keep:
            self._free.append(pipe)
        else:
            os.close(pipe[0])
            os.close(pipe[1])

    def close(self) -> None:
        for r, w in self._free:
            os.close(r)
            os.close(w)
        self._free.clear()


class BufferPool:
    """User-space buffers for the copy method, lent to a pump only while data is in flight."""

    def __init__(self, size: int, keep: int = 256) -> None:
        self.size = size
        self._keep = keep
        self._free: list[memoryview] = []
        self.in_use = 0

    def get(self) -> memoryview:
        self.in_use += 1
        return self._free.pop() if self._free else memoryview(bytearray(self.size))

    def put(self, buf: memoryview) -> None:
        self.in_use -= 1
        if len(self._free) < self._keep:
            self._free.append(buf)


class Pump:
    """One direction of a flow: src socket → pipe (or buffer) → dst socket."""

    __slots__ = (
        "buf",
        "dst",
        "dst_sock",
        "eof",
        "fill",
        "pending",
        "pipe",
        "shut",
        "src",
        "src_sock",
        "start",
        "to_ue",
    )

    def __init__(self, src: socket.socket, dst: socket.socket, *, to_ue: bool) -> None:
        self.src = src.fileno()
        self.dst = dst.fileno()
        self.src_sock = src
        self.dst_sock = dst
        self.to_ue = to_ue
        self.pipe: tuple[int, int] | None = None  # splice method
        self.buf: memoryview | None = None  # copy method
        self.start = 0  # copy method: offset of the first unsent byte in buf
        self.fill = 0  # bytes in the pipe or buffer
        self.pending = b""  # bytes read in user space during a handshake, sent first
        self.eof = False  # src sent FIN and everything was read
        self.shut = False  # FIN forwarded to dst

    @property
    def done(self) -> bool:
        return self.shut


class Conn:
    """The relay's state of one flow."""

    __slots__ = (
        "buffer_size",
        "deadline",
        "down",
        "flow",
        "inbox",
        "last_active",
        "ran_fd",
        "ran_readable",
        "relay",
        "stage",
        "up",
        "wan_fd",
    )

    def __init__(self, relay: Relay, flow: Flow, stage: Stage, now: float, deadline: float) -> None:
        self.relay = relay
        self.flow = flow
        self.ran_fd = flow.ran.fileno()
        self.wan_fd = -1
        self.stage = stage
        self.inbox = b""
        self.buffer_size: int | None = None
        self.last_active = now
        self.deadline = deadline
        self.up: Pump | None = None
        self.down: Pump | None = None
        # The UE may have sent bytes the relay has not read (reported while connecting,
        # or left behind a handshake): pump toward the server once established.
        self.ran_readable = stage is not Stage.CONNECTING

    @property
    def alive(self) -> bool:
        return self.stage is not Stage.CLOSED

    def pipe_bytes(self) -> tuple[int, int]:
        """Bytes in the pipes: (toward the server, toward the UE)."""
        up = (self.up.fill + len(self.up.pending)) if self.up else len(self.inbox)
        return up, self.down.fill if self.down else 0


class Listener:
    __slots__ = ("fd", "mode", "paused_until", "sock")

    def __init__(self, mode: Mode, sock: socket.socket) -> None:
        self.mode = mode
        self.sock = sock
        self.fd = sock.fileno()
        self.paused_until = 0.0


@dataclass
class RelayCounters:
    """Totals since start (exported as Prometheus counters)."""

    accepted: int = 0
    established: int = 0
    closed: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # by reason
    aborted: dict[str, int] = field(default_factory=dict)  # by reason
    bytes_to_ue: int = 0
    bytes_from_ue: int = 0

    def refuse(self, reason: str) -> None:
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def abort(self, reason: str) -> None:
        self.aborted[reason] = self.aborted.get(reason, 0) + 1


class Shared:
    """What all relay threads of a PEP share; replaced attributes take effect at once."""

    def __init__(self, settings: PepSettings, flows: FlowTable, hooks: Hooks) -> None:
        self.settings = settings
        self.flows = flows
        self.hooks = hooks
        self.policy = AccessPolicy(settings.allowed_clients, settings.allowed_destinations)
        self.ids = itertools.count(1)  # flow ids (next() is atomic under the GIL)


class Relay:
    """One relay thread: its listeners, its flows, its epoll loop."""

    def __init__(self, shared: Shared, index: int = 0) -> None:
        self.shared = shared
        self.settings = shared.settings
        self.flows = shared.flows
        self.hooks = shared.hooks
        self.index = index
        self.counters = RelayCounters()
        self.pipes = PipePool(self.settings.pipe_size)
        self.buffers = BufferPool(self.settings.pipe_size)
        self._move = self._splice if self.settings.relay_method == "splice" else self._copy
        self.listeners: dict[Mode, Listener] = {}
        self.listeners6: dict[Mode, Listener] = {}  # the same modes for IPv6 clients
        self.join_listeners: dict[int, Listener] = {}  # MPTCP joins in transparent mode, by port
        self.busy: set[Conn] = set()  # flows that may hold bytes toward the UE
        # Bytes read from servers per UE since start (all flows, closed ones too): the
        # arrival count of the UE's backlog, for the path manager (backlog feed).
        self.read_for_ue: dict[str, int] = {}
        self._conns: dict[int, Conn] = {}  # by fd, both legs
        # Descriptors closed while handling the current batch of events: the batch's later
        # events for them are stale, and a connection accepted in the same batch may
        # already have been given the same number (issue 20 review of the relay).
        self._closed_in_batch: set[int] = set()
        self._listener_ports: frozenset[int] = frozenset()  # of every listener, for loops
        self._epoll: select.epoll | None = None
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._calls: list[tuple[Callable[[], Any], Future[Any] | None]] = []
        self._calls_lock = threading.Lock()
        self._stop = threading.Event()
        self._ready: Future[None] = Future()
        self._thread: threading.Thread | None = None
        self.now = time.monotonic()
        self._next_sweep = self.now + 1.0

    # ---- control (any thread) ---------------------------------------------------------

    def start(self) -> None:
        """Start the thread (it inherits the caller's network namespace)."""
        raise_fd_limit()
        self._thread = threading.Thread(
            target=self._run, name=f"pep-relay-{self.index}", daemon=True
        )
        self._thread.start()
        self._ready.result(10)

    def stop(self) -> None:
        """Close listeners and reset every flow (the PEP is going away)."""
        if self._thread is None:
            return
        with contextlib.suppress(TimeoutError, RuntimeError):
            self.call(self._shutdown)
        self._stop.set()
        os.eventfd_write(self._wake, 1)
        self._thread.join(10)
        self._thread = None
        os.close(self._wake)

    @property
    def native_id(self) -> int | None:
        """The relay thread's kernel id (its descriptor table: /proc/self/task/<id>/fd)."""
        return self._thread.native_id if self._thread is not None else None

    @property
    def in_relay_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``fn`` in the relay thread and return its result (or raise its exception)."""
        return self.submit(fn).result(timeout)

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` in the relay thread; its result arrives in the future."""
        future: Future[T] = Future()
        if self._thread is None or self.in_relay_thread:
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
        else:
            self._enqueue(fn, future)
        return future

    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the relay thread soon; exceptions are logged."""
        self._enqueue(fn, None)

    def _enqueue(self, fn: Callable[[], Any], future: Future[Any] | None) -> None:
        if self._stop.is_set():
            raise RuntimeError("relay stopped")
        with self._calls_lock:
            self._calls.append((fn, future))
        os.eventfd_write(self._wake, 1)

    # ---- listeners (relay thread) -----------------------------------------------------

    def open_listener(
        self, mode: Mode, host: str, port: int, host6: str | None = None
    ) -> tuple[str, int]:
        """Listen for ``mode`` on host:port (port 0 picks one), and on [host6]:port if given.

        Returns the IPv4 address bound. ``SO_REUSEPORT``: every relay thread listens on the
        same port. Without IPv6 in the namespace the mode stays IPv4 only (logged).
        """
        self.close_listener(mode)
        listener = Listener(mode, self._listen_socket(mode, host, port))
        self.listeners[mode] = listener
        assert self._epoll is not None
        self._epoll.register(listener.fd, select.EPOLLIN)
        bound: tuple[str, int] = listener.sock.getsockname()
        if host6 is not None:
            try:
                sock6 = self._listen_socket(mode, host6, bound[1], socket.AF_INET6)
            except OSError as exc:
                if exc.errno not in NO_IPV6:
                    self.close_listener(mode)
                    raise
                log.warning("no IPv6 listener", mode=str(mode), error=str(exc))
            else:
                self.listeners6[mode] = Listener(mode, sock6)
                self._epoll.register(sock6.fileno(), select.EPOLLIN)
        if mode is Mode.TRANSPARENT and self.settings.ran_mptcp:
            self._open_join_listeners(host)
        self._listeners_changed()
        return bound

    def _open_join_listeners(self, host: str) -> None:
        """Transparent MPTCP: a listener on each intercepted port, for the UE's MP_JOINs.

        The kernel accepts an MP_JOIN only on a listener whose port is the connection's
        own (the server's) port; TPROXY hands it to the transparent port, where it would be
        refused (MPTcpExtMismatchPortSynRx). A transparent listener on the server's port is
        found by the TPROXY table's first rule (``socket transparent 1``), so joins (and
        new connections to that port) reach it and the join finds its connection.
        """
        for port in self.settings.tproxy_ports:
            sock = self._listen_socket(Mode.TRANSPARENT, host, port)
            listener = Listener(Mode.TRANSPARENT, sock)
            self.join_listeners[port] = listener
            assert self._epoll is not None
            self._epoll.register(listener.fd, select.EPOLLIN)

    def _listen_socket(
        self, mode: Mode, host: str, port: int, family: int = socket.AF_INET
    ) -> socket.socket:
        s = self.settings
        sock = ran_listener_socket(mptcp=s.ran_mptcp, family=family)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if mode is Mode.TRANSPARENT:
                set_transparent(sock, family)
            if mode is Mode.TLV and s.tfo_queue > 0:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN, s.tfo_queue)
                if s.tfo_no_cookie:
                    sock.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN_NO_COOKIE, 1)
            # Accepted sockets inherit the buffers, and the window scale is fixed at the
            # SYN from the listener's receive buffer: set them here, before listen().
            set_buffers(sock, s.ran_rcvbuf, s.ran_sndbuf, force=s.force_buffers)
            sock.bind((host, port))
            sock.listen(socket.SOMAXCONN)
        except BaseException:
            sock.close()
            raise
        return sock

    def close_listener(self, mode: Mode) -> None:
        for listeners in (self.listeners, self.listeners6):
            listener = listeners.pop(mode, None)
            if listener is not None:
                listener.sock.close()
        if mode is Mode.TRANSPARENT:
            for join in self.join_listeners.values():
                join.sock.close()
            self.join_listeners.clear()
        self._listeners_changed()

    def _all_listeners(self) -> list[Listener]:
        return [
            *self.listeners.values(),
            *self.listeners6.values(),
            *self.join_listeners.values(),
        ]

    def _listeners_changed(self) -> None:
        self._listener_ports = frozenset(lst.sock.getsockname()[1] for lst in self._all_listeners())

    def resize_listener_buffers(self) -> None:
        """Apply the RAN-leg buffer settings to new connections (existing ones keep theirs)."""
        for listener in self._all_listeners():
            set_buffers(
                listener.sock,
                self.settings.ran_rcvbuf,
                self.settings.ran_sndbuf,
                force=self.settings.force_buffers,
            )

    def listener_buffers(self) -> tuple[int, int] | None:
        """(SO_RCVBUF, SO_SNDBUF) the kernel granted on a listener (new RAN legs get these)."""
        for listener in self.listeners.values():
            sock = listener.sock
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            )
        return None

    def abort(self, conn: Conn, reason: str) -> None:
        """Reset a flow (both legs get an RST)."""
        self._abort(conn, reason)

    def conns(self) -> list[Conn]:
        """This thread's flows (each once)."""
        return [c for fd, c in self._conns.items() if fd == c.ran_fd]

    # ---- the loop ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._own_descriptor_table()
            self._epoll = select.epoll()
            self._epoll.register(self._wake, select.EPOLLIN)
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        try:
            self._loop(self._epoll)
        finally:
            # Descriptors of this thread's table must be closed here: a socket object
            # collected in another thread would close that thread's descriptor instead.
            self._shutdown()
            self._run_calls()
            self.pipes.close()
            self._epoll.close()

    def _own_descriptor_table(self) -> None:
        """Give this thread a private copy of the descriptor table.

        Descriptors that existed before (BPF maps of an extension, the wake eventfd) stay
        usable here. Copies of sockets and pipes are closed: they would keep another
        thread's connections open, or a subprocess's pipe from ever reaching EOF.
        """
        if _libc.unshare(CLONE_FILES) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare(CLONE_FILES): {os.strerror(err)}")
        for entry in Path("/proc/thread-self/fd").iterdir():
            fd = int(entry.name)
            if fd <= 2 or fd == self._wake:
                continue
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue  # the descriptor listdir itself used
            if stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode):
                os.close(fd)

    def _loop(self, epoll: select.epoll) -> None:
        poll = epoll.poll
        while not self._stop.is_set():
            events = poll(TICK, 1024)
            self.now = time.monotonic()
            self._closed_in_batch.clear()
            for fd, ev in events:
                if fd in self._closed_in_batch:
                    continue  # the next poll reports a new socket with this number afresh
                conn = self._conns.get(fd)
                if conn is not None:
                    try:
                        self._on_flow_event(conn, fd, ev)
                    except Exception:
                        log.exception("relay error", flow=conn.flow.id)
                        self._abort(conn, "internal error")
                elif fd == self._wake:
                    self._run_calls()
                else:
                    self._guarded(self._on_listener_event, fd)
            if self.now >= self._next_sweep:
                self._guarded(self._sweep)
                self._next_sweep = self.now + 1.0

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Run fn; a bug or an unexpected error is logged, the relay keeps running."""
        try:
            fn(*args)
        except Exception:
            log.exception("relay error", relay=self.index)

    def _on_listener_event(self, fd: int) -> None:
        for listener in self._all_listeners():
            if listener.fd == fd:
                self._accept(listener)
                return

    def _run_calls(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self._wake)
        with self._calls_lock:
            calls, self._calls = self._calls, []
        for fn, future in calls:
            try:
                result = fn()
            except BaseException as exc:
                if future is None:
                    log.exception("posted call failed")
                else:
                    future.set_exception(exc)
            else:
                if future is not None:
                    future.set_result(result)

    def _shutdown(self) -> None:
        for mode in list(self.listeners):
            self.close_listener(mode)
        for conn in self.conns():
            self._abort(conn, "shutdown")

    # ---- accepting ----------------------------------------------------------------------

    def _accept(self, listener: Listener) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = listener.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(listener, exc)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client gave up in the accept queue
                raise
            self.counters.accepted += 1
            self._admit(listener.mode, sock, peer[:2])

    def _pause(self, listener: Listener, exc: OSError) -> None:
        """Out of descriptors or memory: stop accepting for a moment instead of spinning."""
        log.warning("accept failed; pausing the listener", mode=str(listener.mode), error=str(exc))
        listener.paused_until = self.now + 0.5
        assert self._epoll is not None
        self._epoll.modify(listener.fd, 0)

    def _admit(self, mode: Mode, sock: socket.socket, peer: tuple[str, int]) -> None:
        s = self.settings
        client = peer[0]
        reason = None
        if not self.shared.policy.client_allowed(client):
            reason = "client not allowed"
        elif len(self.flows) >= s.max_flows:
            reason = "flow limit"
        elif self.flows.count_for(client) >= s.max_flows_per_client:
            reason = "per-client flow limit"
        if reason is not None:
            self.counters.refuse(reason)
            reset_on_close(sock)
            sock.close()
            return
        sock.setblocking(False)
        if s.ran_mptcp:
            # A TCP socket inherits TCP_NODELAY (and the buffers) from its listener.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if s.ran_congestion_control:
            sock.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_CONGESTION, s.ran_congestion_control.encode()
            )
        flow = Flow(next(self.shared.ids), mode, Leg(sock, sock.getsockname()[:2], peer))
        conn = Conn(self, flow, FIRST_STAGE[mode], self.now, self.now + s.handshake_timeout)
        flow._relay = conn
        with self.flows.lock:
            self.flows.add(flow)
        self._conns[conn.ran_fd] = conn
        assert self._epoll is not None
        self._epoll.register(conn.ran_fd, FLOW_EVENTS)
        self.hooks.ran_leg_ready(flow)
        if mode is Mode.TRANSPARENT:
            # TPROXY keeps the original destination as the accepted socket's local address.
            self._connect(conn, flow.ran.local)
        else:
            self._read_handshake(conn)

    # ---- handshakes (explicit modes) --------------------------------------------------

    def _read_handshake(self, conn: Conn) -> None:
        sock = conn.flow.ran.sock
        closed = False
        while True:
            try:
                data = sock.recv(HANDSHAKE_LIMIT + 1 - len(conn.inbox))
            except BlockingIOError:
                break
            except OSError:
                self._abort(conn, "client reset during handshake")
                return
            if not data:
                # A client may send its header, its data and its FIN at once (TLV has no
                # reply to wait for): a complete handshake goes on, and the relay then
                # reads the FIN again (a stress test met it: issue 20).
                closed = True
                break
            conn.inbox += data
            if len(conn.inbox) > HANDSHAKE_LIMIT:
                break
        try:
            if conn.stage is Stage.TLV_HEADER:
                self._handle_tlv(conn)
            else:
                self._handle_socks(conn)
        except (tlv.TlvError, socks5.Socks5Error) as exc:
            self._handshake_failed(conn, exc)
            return
        if closed and conn.stage in (Stage.TLV_HEADER, Stage.SOCKS_GREETING, Stage.SOCKS_REQUEST):
            self._refuse(conn, "client closed during handshake")

    def _handle_tlv(self, conn: Conn) -> None:
        request = tlv.parse(conn.inbox)
        if request is None:
            if len(conn.inbox) > HANDSHAKE_LIMIT:
                raise tlv.TlvError("header too long")
            return
        if request.buffer_size is not None:
            conn.buffer_size = min(request.buffer_size, self.settings.tlv_max_buffer)
            if conn.buffer_size:
                size = conn.buffer_size
                set_buffers(conn.flow.ran.sock, size, size, force=self.settings.force_buffers)
        conn.inbox = conn.inbox[request.length :]
        self._connect(conn, request.destination)

    def _handle_socks(self, conn: Conn) -> None:
        sock = conn.flow.ran.sock
        if conn.stage is Stage.SOCKS_GREETING:
            greeting = socks5.parse_greeting(conn.inbox)
            if greeting is None:
                return
            if socks5.NO_AUTH not in greeting.methods:
                sock.send(socks5.method_reply(socks5.NO_ACCEPTABLE_METHOD))
                raise socks5.Socks5Error("client offers no 'no authentication' method")
            sock.send(socks5.method_reply(socks5.NO_AUTH))
            conn.inbox = conn.inbox[greeting.length :]
            conn.stage = Stage.SOCKS_REQUEST
        request = socks5.parse_request(conn.inbox)
        if request is None:
            if len(conn.inbox) > HANDSHAKE_LIMIT:
                raise socks5.Socks5Error("request too long", socks5.GENERAL_FAILURE)
            return
        conn.inbox = conn.inbox[request.length :]
        self._connect(conn, request.destination)

    def _handshake_failed(self, conn: Conn, exc: Exception) -> None:
        reply = getattr(exc, "reply", None)
        if reply is not None:
            with contextlib.suppress(OSError):
                conn.flow.ran.sock.send(socks5.reply(reply))
        log.info("handshake refused", flow=conn.flow.id, client=conn.flow.ue, error=str(exc))
        self._refuse(conn, "bad handshake", reset=reply is None)

    # ---- connecting the WAN leg -------------------------------------------------------

    def _connect(self, conn: Conn, destination: tuple[str, int]) -> None:
        flow, s = conn.flow, self.settings
        flow.destination = destination
        if not self.shared.policy.destination_allowed(destination[0]) or self._is_own_listener(
            destination
        ):
            log.info("destination refused", flow=flow.id, client=flow.ue, destination=destination)
            if flow.mode is Mode.SOCKS5:
                with contextlib.suppress(OSError):
                    flow.ran.sock.send(socks5.reply(socks5.NOT_ALLOWED))
            self._refuse(conn, "destination not allowed", reset=flow.mode is not Mode.SOCKS5)
            return
        family = socket.AF_INET6 if ":" in destination[0] else socket.AF_INET
        wan = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        try:
            wan.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if s.wan_congestion_control:
                wan.setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_CONGESTION, s.wan_congestion_control.encode()
                )
            size = conn.buffer_size
            if size:
                apply_buffers(wan, size, size, force=s.force_buffers)
            else:
                apply_buffers(wan, s.wan_rcvbuf, s.wan_sndbuf, force=s.force_buffers)
            if flow.mode is Mode.TRANSPARENT and s.keep_ue_source:
                set_transparent(wan, family)
                wan.bind((flow.ue, 0))
        except OSError as exc:
            wan.close()
            log.warning("cannot prepare the WAN leg", flow=flow.id, error=str(exc))
            self._refuse(conn, "WAN socket setup failed")
            return
        flow.wan = Leg(wan, ("::" if family == socket.AF_INET6 else "0.0.0.0", 0), destination)
        conn.wan_fd = wan.fileno()
        conn.stage = Stage.CONNECTING
        conn.deadline = self.now + s.handshake_timeout
        self._conns[conn.wan_fd] = conn
        self.hooks.wan_leg_ready(flow)
        err = wan.connect_ex(destination)
        if err not in (0, errno.EINPROGRESS):
            self._connect_failed(conn, err)
            return
        # Registering a connected socket reports EPOLLOUT at once, even edge-triggered.
        assert self._epoll is not None
        self._epoll.register(conn.wan_fd, FLOW_EVENTS)

    def _is_own_listener(self, destination: tuple[str, int]) -> bool:
        """A connection to one of our own ports on this host would loop through the PEP."""
        if destination[1] not in self._listener_ports:
            return False
        probe = socket.socket(
            socket.AF_INET6 if ":" in destination[0] else socket.AF_INET, socket.SOCK_STREAM
        )
        try:
            probe.bind((destination[0], 0))  # succeeds only for an address of this host
            return True
        except OSError:
            return False
        finally:
            probe.close()

    def _on_connected(self, conn: Conn, *, server_readable: bool) -> None:
        flow = conn.flow
        assert flow.wan is not None
        err = flow.wan.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._connect_failed(conn, err)
            return
        flow.wan.local = flow.wan.sock.getsockname()[:2]
        if flow.mode is Mode.SOCKS5:
            try:
                flow.ran.sock.send(socks5.reply(socks5.SUCCEEDED, flow.wan.local))
            except OSError:
                self._abort(conn, "client reset during handshake")
                return
        conn.up = Pump(flow.ran.sock, flow.wan.sock, to_ue=False)
        conn.down = Pump(flow.wan.sock, flow.ran.sock, to_ue=True)
        conn.up.pending, conn.inbox = conn.inbox, b""
        conn.stage = Stage.RELAYING
        flow.established_at = time.time()
        self.counters.established += 1
        self.hooks.flow_established(flow)
        # Bytes that arrived before we were ready are not reported again (edge-triggered):
        # pump a direction now if its source was reported readable (or had bytes left
        # behind a handshake). Pumping both always cost two empty splices per flow.
        if conn.ran_readable and not self._pump(conn, conn.up):
            return
        if server_readable and not self._pump(conn, conn.down):
            return
        self._close_if_done(conn)

    def _connect_failed(self, conn: Conn, err: int) -> None:
        flow = conn.flow
        log.info(
            "connect failed",
            flow=flow.id,
            destination=flow.destination,
            error=os.strerror(err),
        )
        if flow.mode is Mode.SOCKS5:
            with contextlib.suppress(OSError):
                flow.ran.sock.send(socks5.reply(socks5.reply_for_errno(err)))
        self._refuse(conn, "connect failed", reset=flow.mode is not Mode.SOCKS5)

    # ---- relaying -----------------------------------------------------------------------

    def _on_flow_event(self, conn: Conn, fd: int, ev: int) -> None:
        conn.last_active = self.now
        stage = conn.stage
        if stage is Stage.RELAYING:
            if ev & select.EPOLLERR and _socket_error(conn, fd):
                self._abort(conn, "reset by peer")
                return
            assert conn.up is not None and conn.down is not None
            from_ran = fd == conn.ran_fd
            if ev & READABLE and not self._pump(conn, conn.up if from_ran else conn.down):
                return
            if ev & WRITABLE and not self._pump(conn, conn.down if from_ran else conn.up):
                return
            self._close_if_done(conn)
        elif stage is Stage.CONNECTING:
            if fd == conn.wan_fd and ev & WRITABLE:
                self._on_connected(conn, server_readable=bool(ev & READABLE))
            elif fd == conn.ran_fd and ev & select.EPOLLERR:
                self._abort(conn, "client reset during connect")
            elif fd == conn.ran_fd and ev & READABLE:
                conn.ran_readable = True
        elif stage is not Stage.CLOSED and fd == conn.ran_fd and ev & READABLE:
            self._read_handshake(conn)

    def _pump(self, conn: Conn, p: Pump) -> bool:
        """Move what can be moved now; False if the flow had to be aborted."""
        while p.pending:  # bytes read during a handshake go first
            try:
                sent = os.write(p.dst, p.pending)
            except BlockingIOError:
                return True
            except OSError:
                self._abort(conn, "write failed")
                return False
            self._count(conn, p, sent)
            p.pending = p.pending[sent:]
        try:
            self._move(conn, p)
        except BlockingIOError:
            return True  # src empty (EPOLLIN will tell) or dst full (EPOLLOUT will tell)
        except OSError as exc:
            self._abort(conn, "reset by peer" if exc.errno == errno.ECONNRESET else "write failed")
            return False
        if p.eof and not p.shut:
            p.shut = True
            self._release_pipe(p)
            try:
                p.dst_sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                if exc.errno != errno.ENOTCONN:
                    self._abort(conn, "write failed")
                    return False
        return True

    def _splice(self, conn: Conn, p: Pump) -> None:
        """socket → pipe → socket, no copy. Returns at EOF; raises BlockingIOError to wait."""
        while True:
            while p.fill:
                assert p.pipe is not None
                moved = os.splice(p.pipe[0], p.dst, p.fill, flags=SPLICE_FLAGS)
                p.fill -= moved
                self._count(conn, p, moved)
            if p.eof:
                return
            if p.pipe is None:
                p.pipe = self.pipes.get()
            try:
                moved = os.splice(p.src, p.pipe[1], self.pipes.size, flags=SPLICE_FLAGS)
            except BlockingIOError:
                self._release_pipe(p)  # nothing in flight: an idle flow holds no pipe
                raise
            if moved == 0:
                p.eof = True
            elif p.to_ue:
                self._took_for_ue(conn, moved)
            p.fill = moved

    def _copy(self, conn: Conn, p: Pump) -> None:
        """socket → user-space buffer → socket (recv_into/send). Same contract as _splice."""
        while True:
            while p.fill:
                assert p.buf is not None
                sent = p.dst_sock.send(p.buf[p.start : p.start + p.fill])
                p.start += sent
                p.fill -= sent
                self._count(conn, p, sent)
            if p.eof:
                return
            if p.buf is None:
                p.buf = self.buffers.get()
            try:
                got = p.src_sock.recv_into(p.buf)
            except BlockingIOError:
                self._release_pipe(p)
                raise
            if got == 0:
                p.eof = True
            elif p.to_ue:
                self._took_for_ue(conn, got)
            p.start, p.fill = 0, got

    def _count(self, conn: Conn, p: Pump, n: int) -> None:
        if p.to_ue:
            conn.flow.bytes_to_ue += n
            self.counters.bytes_to_ue += n
            self.busy.add(conn)
        else:
            conn.flow.bytes_from_ue += n
            self.counters.bytes_from_ue += n

    def _took_for_ue(self, conn: Conn, n: int) -> None:
        ue = conn.flow.ue
        self.read_for_ue[ue] = self.read_for_ue.get(ue, 0) + n

    def _release_pipe(self, p: Pump) -> None:
        """Return the pump's pipe or buffer (data still in it is dropped: the flow ends)."""
        if p.pipe is not None:
            self.pipes.put(p.pipe, empty=p.fill == 0)
            p.pipe = None
        if p.buf is not None:
            self.buffers.put(p.buf)
            p.buf = None
        p.fill = 0

    def _close_if_done(self, conn: Conn) -> None:
        assert conn.up is not None and conn.down is not None
        if conn.up.done and conn.down.done:
            self._close(conn, reset=False)
            self.counters.closed += 1

    # ---- ending flows -------------------------------------------------------------------

    def _refuse(self, conn: Conn, reason: str, *, reset: bool = True) -> None:
        """End a flow that never got established."""
        self.counters.refuse(reason)
        self._close(conn, reset=reset)

    def _abort(self, conn: Conn, reason: str) -> None:
        """End a flow with an RST on both legs."""
        if conn.stage is Stage.CLOSED:
            return
        self.counters.abort(reason)
        log.debug("flow aborted", flow=conn.flow.id, reason=reason)
        self._close(conn, reset=True)

    def _close(self, conn: Conn, *, reset: bool) -> None:
        if conn.stage is Stage.CLOSED:
            return
        conn.stage = Stage.CLOSED
        flow = conn.flow
        flow.closed_at = time.time()
        self.hooks.flow_closed(flow)
        for pump in (conn.up, conn.down):
            if pump is not None:
                self._release_pipe(pump)
        self._conns.pop(conn.ran_fd, None)
        self._conns.pop(conn.wan_fd, None)
        self._closed_in_batch.update((conn.ran_fd, conn.wan_fd))
        self.busy.discard(conn)
        flow._relay = None  # no Conn <-> Flow cycle: a closed flow is freed by refcount
        with self.flows.lock:
            self.flows.remove(flow)
            for leg in (flow.ran, flow.wan):
                if leg is not None:
                    if reset:
                        reset_on_close(leg.sock)
                    leg.sock.close()  # also leaves the epoll set

    # ---- timers -------------------------------------------------------------------------

    def _sweep(self) -> None:
        """Once a second: handshake/connect deadlines, idle and half-open timeouts."""
        s, now = self.settings, self.now
        for conn in self.conns():
            if conn.stage is Stage.RELAYING:
                assert conn.up is not None and conn.down is not None
                half_open = conn.up.eof or conn.down.eof
                limit = s.half_open_timeout if half_open else s.idle_timeout
                if now - conn.last_active > limit:
                    self._abort(conn, "half-open timeout" if half_open else "idle timeout")
            elif conn.stage is not Stage.CLOSED and now > conn.deadline:
                if conn.stage is Stage.CONNECTING:
                    self._connect_failed(conn, errno.ETIMEDOUT)
                else:
                    self._refuse(conn, "handshake timeout")
        for listener in self._all_listeners():
            if listener.paused_until and now >= listener.paused_until:
                listener.paused_until = 0.0
                assert self._epoll is not None
                self._epoll.modify(listener.fd, select.EPOLLIN)


def set_transparent(sock: socket.socket, family: int) -> None:
    """IP_TRANSPARENT / IPV6_TRANSPARENT: bind to (or accept for) a non-local address."""
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TRANSPARENT, 1)
    else:
        sock.setsockopt(socket.SOL_IP, socket.IP_TRANSPARENT, 1)


def ran_listener_socket(*, mptcp: bool, family: int = socket.AF_INET) -> socket.socket:
    """A non-blocking listener socket for UE connections, MPTCP if asked.

    An MPTCP listener still accepts plain TCP clients (the kernel falls back per
    connection), so ``mptcp`` only adds subflows for UEs that speak MPTCP.
    """
    if not mptcp:
        return socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    try:
        return socket.socket(
            family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, socket.IPPROTO_MPTCP
        )
    except OSError as exc:  # no MPTCP in this kernel, or net.mptcp.enabled=0 here
        raise OSError(
            exc.errno,
            f"PEP_RAN_MPTCP is on but this namespace cannot make MPTCP sockets "
            f"({exc.strerror}); check net.mptcp.enabled",
        ) from exc


def _socket_error(conn: Conn, fd: int) -> int:
    """SO_ERROR of one of a flow's sockets (reading it clears it)."""
    leg = conn.flow.ran if fd == conn.ran_fd else conn.flow.wan
    return leg.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if leg else 0


def raise_fd_limit() -> int:
    """Raise RLIMIT_NOFILE to the hard limit: a flow needs 2 sockets and up to 4 pipe ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard
