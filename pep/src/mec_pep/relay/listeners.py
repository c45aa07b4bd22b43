"""One relay thread's listeners: per mode on IPv4 and IPv6, and the MPTCP join listeners."""

from __future__ import annotations

import errno
import select
import socket

from mec_common.logging import get_logger
from mec_pep.config import PepSettings
from mec_pep.flows import ProxyMode
from mec_pep.relay.legs import listen_socket
from mec_pep.sockets import select_listener_by_cpu, set_buffers

log = get_logger(__name__)

# A listener that cannot be made IPv6 because the namespace has none: run IPv4 only.
NO_IPV6 = (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL)


class Listener:
    __slots__ = ("family", "fd", "mode", "paused_until", "proto", "sock")

    def __init__(self, mode: ProxyMode, sock: socket.socket) -> None:
        self.mode = mode
        self.sock = sock
        self.fd = sock.fileno()
        self.family = int(sock.family)  # what accepted sockets are made with
        self.proto = sock.proto
        self.paused_until = 0.0


class Listeners:
    """The listening sockets of one relay thread, registered in its epoll."""

    def __init__(self, settings: PepSettings, select_by_cpu: list[int] | None = None) -> None:
        self.settings = settings
        self.select_by_cpu = select_by_cpu  # give new connections to the relay of their CPU
        self.v4: dict[ProxyMode, Listener] = {}
        self.v6: dict[ProxyMode, Listener] = {}  # the same modes for IPv6 clients
        self.joins: dict[int, Listener] = {}  # MPTCP joins in transparent mode, by port
        self.by_fd: dict[int, Listener] = {}
        self.ports: frozenset[int] = frozenset()  # of every listener, for loop detection

    def all(self) -> list[Listener]:
        return [*self.v4.values(), *self.v6.values(), *self.joins.values()]

    def open(
        self, epoll: select.epoll, mode: ProxyMode, host: str, port: int, host6: str | None
    ) -> tuple[str, int]:
        """Listen for ``mode`` on host:port (port 0 picks one), and on [host6]:port if given.

        Returns the IPv4 address bound. Without IPv6 in the namespace the mode stays IPv4
        only (logged).
        """
        self.close(mode)
        listener = self._add(epoll, mode, listen_socket(self.settings, mode, host, port))
        self.v4[mode] = listener
        bound: tuple[str, int] = listener.sock.getsockname()
        if host6 is not None:
            try:
                sock6 = listen_socket(self.settings, mode, host6, bound[1], socket.AF_INET6)
            except OSError as exc:
                if exc.errno not in NO_IPV6:
                    self.close(mode)
                    raise
                log.warning("no IPv6 listener", mode=str(mode), error=str(exc))
            else:
                self.v6[mode] = self._add(epoll, mode, sock6)
        if mode is ProxyMode.TRANSPARENT and self.settings.ran_mptcp:
            self._open_joins(epoll, host)
        self._changed()
        return bound

    def _open_joins(self, epoll: select.epoll, host: str) -> None:
        """Transparent MPTCP: a listener on each intercepted port, for the UE's MP_JOINs.

        The kernel accepts an MP_JOIN only on a listener whose port is the connection's
        own (the server's) port; TPROXY hands it to the transparent port, where it would be
        refused (MPTcpExtMismatchPortSynRx). A transparent listener on the server's port is
        found by the TPROXY table's first rule (``socket transparent 1``), so joins (and
        new connections to that port) reach it and the join finds its connection.
        """
        for port in self.settings.tproxy_ports:
            sock = listen_socket(self.settings, ProxyMode.TRANSPARENT, host, port)
            self.joins[port] = self._add(epoll, ProxyMode.TRANSPARENT, sock)

    def _add(self, epoll: select.epoll, mode: ProxyMode, sock: socket.socket) -> Listener:
        if self.select_by_cpu is not None:
            try:
                select_listener_by_cpu(sock, self.select_by_cpu)
            except OSError as exc:  # e.g. an MPTCP listener: the kernel's hash spreads
                log.warning("no CPU selector on a listener", mode=str(mode), error=str(exc))
        listener = Listener(mode, sock)
        self.by_fd[listener.fd] = listener
        epoll.register(listener.fd, select.EPOLLIN)
        return listener

    def close(self, mode: ProxyMode) -> None:
        """Close ``mode``'s listeners (closing also leaves the epoll set)."""
        closing = [t.pop(mode) for t in (self.v4, self.v6) if mode in t]
        if mode is ProxyMode.TRANSPARENT:
            closing += self.joins.values()
            self.joins = {}
        for listener in closing:
            del self.by_fd[listener.fd]
            listener.sock.close()
        self._changed()

    def close_all(self) -> None:
        for mode in list(self.v4):
            self.close(mode)

    def _changed(self) -> None:
        self.ports = frozenset(lst.sock.getsockname()[1] for lst in self.all())

    def pause(self, epoll: select.epoll, listener: Listener, until: float) -> None:
        """Stop accepting on ``listener`` until ``until`` (out of descriptors or memory)."""
        listener.paused_until = until
        epoll.modify(listener.fd, 0)

    def resume_due(self, epoll: select.epoll, now: float) -> None:
        for listener in self.all():
            if listener.paused_until and now >= listener.paused_until:
                listener.paused_until = 0.0
                epoll.modify(listener.fd, select.EPOLLIN)

    def resize_buffers(self) -> None:
        """Apply the RAN-leg buffer settings to new connections (existing ones keep theirs)."""
        s = self.settings
        for listener in self.all():
            set_buffers(listener.sock, s.ran_rcvbuf, s.ran_sndbuf, force=s.force_buffers)

    def buffers(self) -> tuple[int, int] | None:
        """(SO_RCVBUF, SO_SNDBUF) the kernel granted on a listener (new RAN legs get these)."""
        for listener in self.v4.values():
            sock = listener.sock
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            )
        return None
