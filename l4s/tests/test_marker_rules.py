"""The endpoint marker's spin guard on crafted segments (BPF_PROG_TEST_RUN: the real
``efm_in`` in the kernel, segments built here, for a real socket).

The guard (``efm_follows``) is RFC 9000 §17.4's rule with TCP's numbers: a received
segment sets the spin value only if it brings something new (data, or a higher ack), is
not old (below the in-order end, or an older ack) and is not the first beyond a hole (it
overtook segments still in flight, or follows a lost one; the segment after it in a loss
continues the block and is followed); and a new value no sooner than 7/8 of the base RTT
after the endpoint's own last edge (``spin_follows``; shown on a real path in
``test_spin_guard.py``). A loopback connection gives ``efm_in`` a socket to
find (``bpf_sk_lookup_tcp``); its state is written and read through the socket-storage map
by the socket's fd.
"""

from __future__ import annotations

import ctypes
import secrets
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from l4s_support import MARKER_OBJ, NEEDS_ROOT, TIME_BIT, frame

from mec_common.bpf import BpfProgram
from mec_l4s.efm import EfmOrder, EfmSock, Marker, Role, Technique

pytestmark = [pytest.mark.bpf, NEEDS_ROOT, pytest.mark.timeout(60)]

NEXT, HI_ACK = 0xFFFF_FF00, 5000  # the in-order end and highest ack so far (seq near the wrap)
MSS = 1448

# (seq, ack, payload, spin sent, spin the guarded client then holds): one server stream
SEGMENTS = (
    (NEXT, HI_ACK, MSS, 1, 1),  # the next segment, in order (past the wrap): followed
    (NEXT, HI_ACK, MSS, 0, 1),  # an older copy of it: below the in-order end
    (NEXT + MSS, HI_ACK, 0, 0, 1),  # a pure ACK repeating the highest pair
    (NEXT + MSS, HI_ACK - 1, 0, 0, 1),  # in order, but an older ack
    (NEXT + 3 * MSS, HI_ACK, MSS, 0, 1),  # overtook two segments still in flight
    (NEXT + MSS, HI_ACK, MSS, 1, 1),  # the first of them arrives, in order
    (NEXT + 2 * MSS, HI_ACK, MSS, 0, 0),  # the second: the edge at its own time
    (NEXT + 4 * MSS, HI_ACK, MSS, 1, 1),  # in order after the overtaker's block
    (NEXT + 6 * MSS, HI_ACK, MSS, 0, 1),  # the first beyond a loss (NEXT + 5 MSS lost)
    (NEXT + 7 * MSS, HI_ACK, MSS, 0, 0),  # continues the block beyond the loss: followed
    (NEXT + 5 * MSS, HI_ACK, MSS, 1, 1),  # the retransmission, in order
    (NEXT + 8 * MSS, HI_ACK, MSS, 0, 0),  # in order after the block
    (NEXT + 9 * MSS, HI_ACK + 1, 0, 1, 1),  # a pure ACK advancing the ack only
)


GAP_S = 0.02


def min_rtt_s(sock: socket.socket) -> float:
    """tcpi_min_rtt (µs) of struct tcp_info, at byte offset 148."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 152)
    return float(struct.unpack_from("I", raw, 148)[0]) / 1e6


@pytest.fixture
def connection() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A loopback connection: (client, server) sockets."""
    with socket.create_server(("127.0.0.1", 0)) as ls:
        client = socket.create_connection(ls.getsockname())
        server, _ = ls.accept()
        with client, server:
            yield client, server


def run_spin_guard(guard: bool, client: socket.socket, server: socket.socket) -> list[int]:
    """The client's spin value after each segment of a fixed sequence from the server."""
    marker = Marker.load(MARKER_OBJ, f"mts-efm-rules-{secrets.token_hex(3)}")
    prog = BpfProgram(str(marker.obj.pin_dir / "efm_in"))
    try:
        marker.configure(Technique.SPIN, spin_guard=guard)
        states = marker.obj.maps["efm_sock"]
        fd = ctypes.c_int(client.fileno())
        order = EfmOrder(seen=1, next=NEXT, hi_ack=HI_ACK, ooo_start=NEXT, ooo_end=NEXT)
        states.update(fd, EfmSock(role=Role.CLIENT, spin=0, order=order))
        (s_ip, s_port), (c_ip, c_port) = server.getsockname(), client.getsockname()
        # the guard holds a new value sooner than 7/8 of the base RTT (the handshake's
        # rtt_min) after the client's own edge: the segments come further apart than that
        assert min_rtt_s(client) < GAP_S
        spins = []
        for seq, ack, payload, spin, _ in SEGMENTS:
            time.sleep(GAP_S)
            bits = TIME_BIT if spin else 0
            packet = frame(s_ip, c_ip, s_port, c_port, bits=bits, seq=seq % 2**32, ack=ack,
                           payload=payload)  # fmt: skip
            prog.run_packet(packet)
            state = states.lookup(fd, EfmSock)
            assert state is not None
            spins.append(state.spin)
        return spins
    finally:
        prog.close()
        marker.close()


def test_the_guard_follows_only_new_in_sequence_segments(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    assert run_spin_guard(True, *connection) == [held for *_, held in SEGMENTS]


def test_without_the_guard_every_segment_sets_the_spin(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    # the research's rule: every segment, older or overtaking, sets the client's wave
    assert run_spin_guard(False, *connection) == [spin for _, _, _, spin, _ in SEGMENTS]
