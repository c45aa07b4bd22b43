"""The sockets of a flow's legs and of the listeners that accept RAN legs: their options.

RAN-leg buffers are set on the listeners (accepted sockets inherit them, and the window
scale is fixed at the SYN from the listener's receive buffer); the WAN leg's before
``connect()``.
"""

from __future__ import annotations

import socket

from mec_pep.config import PepSettings
from mec_pep.flows import Address, ProxyMode
from mec_pep.sockets import TCP_FASTOPEN_NO_COOKIE, apply_buffers, set_buffers

IPV6_TRANSPARENT = 75  # linux/in6.h; not in the socket module


def listen_socket(
    settings: PepSettings, mode: ProxyMode, host: str, port: int, family: int = socket.AF_INET
) -> socket.socket:
    """A listening socket for ``mode`` (``SO_REUSEPORT``: every relay thread has one)."""
    s = settings
    sock = ran_listener_socket(mptcp=s.ran_mptcp, family=family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        if mode is ProxyMode.TRANSPARENT:
            set_transparent(sock, family)
        if mode is ProxyMode.TLV and s.tfo_queue > 0:
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


def prepare_ran_leg(
    settings: PepSettings, sock: socket.socket, congestion_control: str | None
) -> None:
    """What an accepted socket does not inherit from its listener; ``congestion_control``:
    ``Hooks.ran_congestion_control`` (an extension's, else the settings')."""
    sock.setblocking(False)
    if settings.ran_mptcp:
        # A TCP socket inherits TCP_NODELAY (and the buffers) from its listener.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if congestion_control:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion_control.encode())


def wan_socket(
    settings: PepSettings, family: int, buffer_size: int | None, ue_source: Address | None
) -> socket.socket:
    """The WAN leg's socket, ready for ``connect()``; bound to the UE's address if given."""
    s = settings
    wan = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    try:
        wan.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if s.wan_congestion_control:
            wan.setsockopt(
                socket.IPPROTO_TCP, socket.TCP_CONGESTION, s.wan_congestion_control.encode()
            )
        if buffer_size:
            apply_buffers(wan, buffer_size, buffer_size, force=s.force_buffers)
        else:
            apply_buffers(wan, s.wan_rcvbuf, s.wan_sndbuf, force=s.force_buffers)
        if ue_source is not None:
            set_transparent(wan, family)
            wan.bind(ue_source)
    except BaseException:
        wan.close()
        raise
    return wan


def set_transparent(sock: socket.socket, family: int) -> None:
    """IP_TRANSPARENT / IPV6_TRANSPARENT: bind to (or accept for) a non-local address."""
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TRANSPARENT, 1)
    else:
        sock.setsockopt(socket.SOL_IP, socket.IP_TRANSPARENT, 1)
