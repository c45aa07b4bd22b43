"""One relay thread: its epoll loop and a flow's life in it (accept, handshake, connect, close).

Each relay thread has its own descriptor table (``descriptors.py``), its own listeners
(``SO_REUSEPORT``: the kernel spreads new connections over the relay threads) and its own
epoll set; the flow table, policy and settings are shared (``Shared``). Everything here
runs in the relay thread except ``start``/``stop``/``call``/``submit``/``post``.

End of a flow:
- FIN from one side: once that pump's pipe is drained, ``shutdown(SHUT_WR)`` on the
  other leg (half-close, ``pump.py``). When both directions have done this, both
  sockets close.
- RST or a socket error on either leg: the other leg is closed with an RST
  (``SO_LINGER`` 0), so both endpoints learn at once that the connection is gone.
- Timeouts (handshake/connect, idle, half-open) also end a flow with RSTs.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mec_common.logging import get_logger
from mec_pep import socks5
from mec_pep.config import PepSettings
from mec_pep.flows import Address, Flow, FlowTable, Hooks, Leg, ProxyMode
from mec_pep.policy import AccessPolicy
from mec_pep.relay.calls import CallQueue
from mec_pep.relay.conn import Conn, Stage
from mec_pep.relay.descriptors import SHARED_TABLE, own_descriptor_table, raise_fd_limit
from mec_pep.relay.handshake import HANDSHAKES, HandshakeError
from mec_pep.relay.legs import prepare_ran_leg, wan_socket
from mec_pep.relay.listeners import Listener, Listeners
from mec_pep.relay.pump import Mover, Pump
from mec_pep.sockets import reset_on_close, set_buffers

log = get_logger(__name__)

T = TypeVar("T")

FLOW_EVENTS = select.EPOLLIN | select.EPOLLOUT | select.EPOLLRDHUP | select.EPOLLET
READABLE = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
WRITABLE = select.EPOLLOUT | select.EPOLLHUP | select.EPOLLERR
FAILED = select.EPOLLHUP | select.EPOLLERR
ACCEPT_BATCH = 64  # accepts per listener event, so one busy port cannot starve flows
TICK = 0.25  # seconds between timer checks


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
        self.cpus: list[int] | None = None  # relay i runs on cpus[i] (relay_cpus)


def relay_cpus(settings: PepSettings, threads: int) -> list[int] | None:
    """The CPU of each of ``threads`` relay threads if they are to be pinned
    (``PEP_RELAY_CPU_AFFINITY``), else None: the CPUs this process may run on (read before
    any relay pins itself), one per relay thread."""
    if not settings.relay_cpu_affinity:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if threads > len(cpus):
        log.warning("relay threads not pinned: more of them than CPUs",
                    relay_threads=threads, cpus=len(cpus))  # fmt: skip
        return None
    return cpus[:threads]


class Relay:
    """One relay thread: its listeners, its flows, its epoll loop."""

    def __init__(self, shared: Shared, index: int = 0) -> None:
        self.shared = shared
        self.settings = shared.settings
        self.flows = shared.flows
        self.hooks = shared.hooks
        self.index = index
        self.counters = RelayCounters()
        self.mover = Mover(self.settings, self.counters)
        self.busy = self.mover.busy  # the backlog feed samples these flows
        self.read_for_ue = self.mover.read_for_ue
        # The first relay's listeners carry their groups' CPU selector (relays open theirs
        # in order, so relay i is socket i of each group).
        self.listeners = Listeners(self.settings, shared.cpus if index == 0 else None)
        self._conns: dict[int, Conn] = {}  # by fd, both legs
        # Descriptors closed while handling the current batch of events: the batch's later
        # events for them are stale, and a connection accepted in the same batch may
        # already have been given the same number (issue 20 review of the relay).
        self._closed_in_batch: set[int] = set()
        self._epoll: select.epoll | None = None
        self._calls = CallQueue()  # before the thread: its eventfd is valid in both tables
        self._ready: Future[None] = Future()
        self._thread: threading.Thread | None = None
        self.now = time.monotonic()
        self._next_sweep = self.now + 1.0
        self.private_table = False  # set by the thread: its own descriptor table or not

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
        self._calls.close()
        self._thread.join(10)
        self._thread = None
        self._calls.release()

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
            self._calls.put(fn, future)
        return future

    def post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the relay thread soon; exceptions are logged."""
        self._calls.put(fn, None)

    # ---- listeners and flows (relay thread) ---------------------------------------------

    def open_listener(
        self, mode: ProxyMode, host: str, port: int, host6: str | None = None
    ) -> tuple[str, int]:
        """Listen for ``mode`` (``Listeners.open``); the IPv4 address bound."""
        assert self._epoll is not None
        return self.listeners.open(self._epoll, mode, host, port, host6)

    def close_listener(self, mode: ProxyMode) -> None:
        self.listeners.close(mode)

    def abort(self, conn: Conn, reason: str) -> None:
        """Reset a flow (both legs get an RST)."""
        self._abort(conn, reason)

    def conns(self) -> list[Conn]:
        """This thread's flows (each once)."""
        return [c for fd, c in self._conns.items() if fd == c.ran_fd]

    # ---- the loop ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self.private_table = own_descriptor_table(keep=self._calls.wake_fd)
            if not self.private_table and self.index == 0:  # once: every relay is refused alike
                log.warning(SHARED_TABLE)
            if self.shared.cpus is not None:
                os.sched_setaffinity(0, {self.shared.cpus[self.index]})  # 0: this thread
            self._epoll = select.epoll()
            self._epoll.register(self._calls.wake_fd, select.EPOLLIN)
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
            self._calls.run_pending()
            self.mover.close()
            self._epoll.close()

    def _loop(self, epoll: select.epoll) -> None:
        poll = epoll.poll
        wake = self._calls.wake_fd
        listeners = self.listeners.by_fd
        while not self._calls.closed:
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
                elif fd == wake:
                    self._calls.run_pending()
                elif (listener := listeners.get(fd)) is not None:
                    self._guarded(self._accept, listener)
            if self.now >= self._next_sweep:
                self._guarded(self._sweep)
                self._next_sweep = self.now + 1.0

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Run fn; a bug or an unexpected error is logged, the relay keeps running."""
        try:
            fn(*args)
        except Exception:
            log.exception("relay error", relay=self.index)

    def _shutdown(self) -> None:
        self.listeners.close_all()
        for conn in self.conns():
            self._abort(conn, "shutdown")

    # ---- accepting ----------------------------------------------------------------------

    def _accept(self, listener: Listener) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                # socket.accept() without its Python wrapper, which converts the listener's
                # family and type to enums for every connection (~1-2 us each time).
                fd, peer = listener.sock._accept()  # type: ignore[attr-defined]
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning(
                        "accept failed; pausing the listener",
                        mode=str(listener.mode),
                        error=str(exc),
                    )
                    # Out of descriptors or memory: stop accepting for a moment, not spin.
                    assert self._epoll is not None
                    self.listeners.pause(self._epoll, listener, self.now + 0.5)
                    return
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client gave up in the accept queue
                raise
            sock = socket.socket(listener.family, socket.SOCK_STREAM, listener.proto, fd)
            self.counters.accepted += 1
            self._admit(listener.mode, sock, peer[:2])

    def _admit(self, mode: ProxyMode, sock: socket.socket, peer: Address) -> None:
        s = self.settings
        reason = self._refusal(peer[0])
        if reason is not None:
            self.counters.refuse(reason)
            reset_on_close(sock)
            sock.close()
            return
        congestion_control = self.hooks.ran_congestion_control(s.ran_congestion_control)
        try:
            prepare_ran_leg(s, sock, congestion_control)
        except BaseException:
            sock.close()  # here, in this thread's table: not left to a finalizer
            raise
        flow = Flow(next(self.shared.ids), mode, Leg(sock, sock.getsockname()[:2], peer))
        handshake = HANDSHAKES[mode]() if mode in HANDSHAKES else None
        conn = Conn(self, flow, handshake, self.now, self.now + s.handshake_timeout)
        flow._relay = conn
        with self.flows.lock:
            self.flows.add(flow)
        self._conns[conn.ran_fd] = conn
        assert self._epoll is not None
        self._epoll.register(conn.ran_fd, FLOW_EVENTS)
        self.hooks.ran_leg_ready(flow)
        if handshake is None:
            # TPROXY keeps the original destination as the accepted socket's local address.
            self._connect(conn, flow.ran.local)
        else:
            self._read_handshake(conn)

    def _refusal(self, client: str) -> str | None:
        """Why a connection from ``client`` is refused, or None."""
        s = self.settings
        if not self.shared.policy.client_allowed(client):
            return "client not allowed"
        if len(self.flows) >= s.max_flows:
            return "flow limit"
        if self.flows.count_for(client) >= s.max_flows_per_client:
            return "per-client flow limit"
        return None

    # ---- handshakes (explicit modes: handshake.py) ------------------------------------

    def _read_handshake(self, conn: Conn) -> None:
        handshake = conn.handshake
        assert handshake is not None
        sock = conn.flow.ran.sock
        closed = False
        while handshake.room > 0:
            try:
                data = sock.recv(handshake.room)
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
            handshake.receive(data)
        try:
            answer, destination = handshake.advance()
        except HandshakeError as exc:
            self._handshake_refused(conn, exc)
            return
        conn.stage = handshake.stage
        if answer:
            try:
                sock.send(answer)
            except OSError:
                self._abort(conn, "client reset during handshake")
                return
        if destination is not None:
            conn.handshake = None
            conn.inbox = handshake.inbox
            if destination.buffer_size is not None:
                self._client_buffers(conn, destination.buffer_size)
            self._connect(conn, destination.address)
        elif closed:
            self._refuse(conn, "client closed during handshake")

    def _client_buffers(self, conn: Conn, requested: int) -> None:
        """TLV BUFFER_SIZE: both legs' buffers for this flow, up to ``tlv_max_buffer``."""
        size = conn.buffer_size = min(requested, self.settings.tlv_max_buffer)
        if size:
            set_buffers(conn.flow.ran.sock, size, size, force=self.settings.force_buffers)

    def _handshake_refused(self, conn: Conn, exc: HandshakeError) -> None:
        if exc.answer:
            with contextlib.suppress(OSError):
                conn.flow.ran.sock.send(exc.answer)
        log.info("handshake refused", flow=conn.flow.id, client=conn.flow.ue, error=str(exc))
        self._refuse(conn, "bad handshake", reset=exc.reset)

    # ---- connecting the WAN leg -------------------------------------------------------

    def _connect(self, conn: Conn, destination: Address) -> None:
        flow, s = conn.flow, self.settings
        flow.destination = destination
        if not self.shared.policy.destination_allowed(destination[0]) or self._is_own_listener(
            destination
        ):
            log.info("destination refused", flow=flow.id, client=flow.ue, destination=destination)
            if flow.mode is ProxyMode.SOCKS5:
                with contextlib.suppress(OSError):
                    flow.ran.sock.send(socks5.reply(socks5.NOT_ALLOWED))
            self._refuse(conn, "destination not allowed", reset=flow.mode is not ProxyMode.SOCKS5)
            return
        family = socket.AF_INET6 if ":" in destination[0] else socket.AF_INET
        keep_source = flow.mode is ProxyMode.TRANSPARENT and s.keep_ue_source
        try:
            wan = wan_socket(s, family, conn.buffer_size, (flow.ue, 0) if keep_source else None)
        except OSError as exc:
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

    def _is_own_listener(self, destination: Address) -> bool:
        """A connection to one of our own ports on this host would loop through the PEP."""
        if destination[1] not in self.listeners.ports:
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

    def _on_connected(self, conn: Conn, *, server_readable: bool, failed: bool) -> None:
        flow = conn.flow
        assert flow.wan is not None
        # A failed connect reports EPOLLERR (and EPOLLHUP): only then is SO_ERROR read.
        err = flow.wan.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if failed else 0
        if err:
            self._connect_failed(conn, err)
            return
        flow.wan.local = flow.wan.sock.getsockname()[:2]
        if flow.mode is ProxyMode.SOCKS5:
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
        if flow.mode is ProxyMode.SOCKS5:
            with contextlib.suppress(OSError):
                flow.ran.sock.send(socks5.reply(socks5.reply_for_errno(err)))
        self._refuse(conn, "connect failed", reset=flow.mode is not ProxyMode.SOCKS5)

    # ---- relaying (pump.py) -------------------------------------------------------------

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
                self._on_connected(
                    conn, server_readable=bool(ev & READABLE), failed=bool(ev & FAILED)
                )
            elif fd == conn.ran_fd and ev & select.EPOLLERR:
                self._abort(conn, "client reset during connect")
            elif fd == conn.ran_fd and ev & READABLE:
                conn.ran_readable = True
        elif stage is not Stage.CLOSED and fd == conn.ran_fd and ev & READABLE:
            self._read_handshake(conn)

    def _pump(self, conn: Conn, p: Pump) -> bool:
        """Move what can be moved now; False if the flow had to be aborted."""
        reason = self.mover.pump(conn, p)
        if reason is None:
            return True
        self._abort(conn, reason)
        return False

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
                self.mover.release(pump)
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
        assert self._epoll is not None
        self.listeners.resume_due(self._epoll, now)


def _socket_error(conn: Conn, fd: int) -> int:
    """SO_ERROR of one of a flow's sockets (reading it clears it)."""
    leg = conn.flow.ran if fd == conn.ran_fd else conn.flow.wan
    return leg.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) if leg else 0
