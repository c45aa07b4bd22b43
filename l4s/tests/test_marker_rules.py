"""The endpoint marker's spin guard on crafted segments (BPF_PROG_TEST_RUN: the real
``efm_in`` in the kernel, segments built here, for a real socket).

The guard is RFC 9000 §17.4's rule with TCP's numbers: a received segment sets the spin
value only if it advances the highest seq or ack received and takes neither below it. A
loopback connection gives ``efm_in`` a socket to find (``bpf_sk_lookup_tcp``); its state is
written and read through the socket-storage map by the socket's fd.
"""

from __future__ import annotations

import ctypes
import secrets
import socket
from collections.abc import Iterator

import pytest
from l4s_support import MARKER_OBJ, NEEDS_ROOT, TIME_BIT, frame

from mec_common.bpf import BpfProgram
from mec_l4s.efm import EfmSock, Marker, Role, Technique

pytestmark = [pytest.mark.bpf, NEEDS_ROOT, pytest.mark.timeout(60)]

HI_SEQ, HI_ACK = 0xFFFF_FF00, 5000  # the highest pair seen so far (seq near the wrap)


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
        start = EfmSock(role=Role.CLIENT, spin=0, ordered=1, hi_seq=HI_SEQ, hi_ack=HI_ACK)
        states.update(fd, start)
        (s_ip, s_port), (c_ip, c_port) = server.getsockname(), client.getsockname()
        spins = []
        for seq, ack, spin in (
            (HI_SEQ + 1448, HI_ACK, 1),  # the next segment: advances seq (past the wrap)
            (HI_SEQ, HI_ACK, 0),  # a reordered older segment: below the highest
            (HI_SEQ + 1448, HI_ACK, 0),  # the highest pair again (a duplicate)
            (HI_SEQ + 1448, HI_ACK - 1, 0),  # newer seq, older ack
            (HI_SEQ + 1448, HI_ACK + 1, 0),  # advances ack only (a pure ACK)
        ):
            bits = TIME_BIT if spin else 0
            prog.run_packet(frame(s_ip, c_ip, s_port, c_port, bits=bits, seq=seq % 2**32, ack=ack))
            state = states.lookup(fd, EfmSock)
            assert state is not None
            spins.append(state.spin)
        return spins
    finally:
        prog.close()
        marker.close()


def test_the_guard_follows_only_segments_that_advance(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    assert run_spin_guard(True, *connection) == [1, 1, 1, 1, 0]


def test_without_the_guard_every_segment_sets_the_spin(
    connection: tuple[socket.socket, socket.socket],
) -> None:
    # the research's rule: the reordered older segment flips the client's wave back
    assert run_spin_guard(False, *connection) == [1, 0, 0, 0, 0]
