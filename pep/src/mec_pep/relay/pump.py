"""Moving a flow's bytes: one ``Pump`` per direction, one ``Mover`` per relay thread.

A pump moves bytes src socket → pipe → dst socket with ``splice(2)``, so payload never
enters user space (or, with ``relay_method=copy``, through a user-space buffer: measured
no faster, kept for comparison). Edge-triggered: a pump moves until the source is empty
(``EAGAIN``) or the destination full, and then waits for epoll; a full destination makes
the source wait, so the sender's window closes (back-pressure through the socket
buffers). A FIN is forwarded (``shutdown(SHUT_WR)``) once everything before it is relayed.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import TYPE_CHECKING

from mec_pep.config import PepSettings
from mec_pep.relay.pools import BufferPool, PipePool

if TYPE_CHECKING:
    from mec_pep.relay.conn import Conn
    from mec_pep.relay.loop import RelayCounters

SPLICE_FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK


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


class Mover:
    """Moves the bytes of every pump of one relay thread and counts them."""

    def __init__(self, settings: PepSettings, counters: RelayCounters) -> None:
        self.counters = counters
        self.pipes = PipePool(settings.pipe_size)
        self.buffers = BufferPool(settings.pipe_size)
        splice = settings.relay_method == "splice"
        self._write = self._splice_out if splice else self._copy_out
        self._read = self._splice_in if splice else self._copy_in
        self.busy: set[Conn] = set()  # flows that may hold bytes toward the UE
        # Bytes read from servers per UE since start (all flows, closed ones too): the
        # arrival count of the UE's backlog, for the path manager (backlog feed).
        self.read_for_ue: dict[str, int] = {}

    def pump(self, conn: Conn, p: Pump) -> str | None:
        """Move what can be moved now; the reason to abort the flow, if it must be."""
        while p.pending:  # bytes read during a handshake go first
            try:
                sent = os.write(p.dst, p.pending)
            except BlockingIOError:
                return None
            except OSError:
                return "write failed"
            self._count(conn, p, sent)
            p.pending = p.pending[sent:]
        try:
            self._transfer(conn, p)
        except BlockingIOError:
            return None  # src empty (EPOLLIN will tell) or dst full (EPOLLOUT will tell)
        except OSError as exc:
            return "reset by peer" if exc.errno == errno.ECONNRESET else "write failed"
        if p.eof and not p.shut:
            p.shut = True
            self.release(p)
            try:
                p.dst_sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                if exc.errno != errno.ENOTCONN:
                    return "write failed"
        return None

    def release(self, p: Pump) -> None:
        """Return the pump's pipe or buffer (data still in it is dropped: the flow ends)."""
        if p.pipe is not None:
            self.pipes.put(p.pipe, empty=p.fill == 0)
            p.pipe = None
        if p.buf is not None:
            self.buffers.put(p.buf)
            p.buf = None
        p.fill = 0

    def close(self) -> None:
        self.pipes.close()

    def _transfer(self, conn: Conn, p: Pump) -> None:
        """Write out what is held, read again, until EOF (returns) or EAGAIN (raises)."""
        write, read = self._write, self._read
        while True:
            while p.fill:
                self._count(conn, p, write(p))
            if p.eof:
                return
            try:
                got = read(p)
            except BlockingIOError:
                self.release(p)  # nothing in flight: an idle flow holds no pipe or buffer
                raise
            if got == 0:
                p.eof = True
            elif p.to_ue:
                self._took_for_ue(conn, got)

    # splice: socket → pipe → socket, no copy.

    def _splice_out(self, p: Pump) -> int:
        assert p.pipe is not None
        moved = os.splice(p.pipe[0], p.dst, p.fill, flags=SPLICE_FLAGS)
        p.fill -= moved
        return moved

    def _splice_in(self, p: Pump) -> int:
        if p.pipe is None:
            p.pipe = self.pipes.get()
        p.fill = os.splice(p.src, p.pipe[1], self.pipes.size, flags=SPLICE_FLAGS)
        return p.fill

    # copy: socket → user-space buffer → socket (recv_into/send).

    def _copy_out(self, p: Pump) -> int:
        assert p.buf is not None
        sent = p.dst_sock.send(p.buf[p.start : p.start + p.fill])
        p.start += sent
        p.fill -= sent
        return sent

    def _copy_in(self, p: Pump) -> int:
        if p.buf is None:
            p.buf = self.buffers.get()
        p.start, p.fill = 0, p.src_sock.recv_into(p.buf)
        return p.fill

    def _count(self, conn: Conn, p: Pump, n: int) -> None:
        if p.to_ue:
            conn.flow.bytes_to_ue += n
            self.counters.bytes_to_ue += n
        else:
            conn.flow.bytes_from_ue += n
            self.counters.bytes_from_ue += n

    def _took_for_ue(self, conn: Conn, n: int) -> None:
        """Bytes read from the server: counted for the UE, and the flow sampled by the
        backlog feed from now until its backlog is seen at zero (as the core marks it)."""
        ue = conn.flow.ue
        self.read_for_ue[ue] = self.read_for_ue.get(ue, 0) + n
        self.busy.add(conn)
