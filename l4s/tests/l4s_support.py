"""Test support: a packet capture independent of the BPF programs, and TCP workloads.

The capture is an AF_PACKET socket on an interface of the middle namespace of a
``mts_lab.line.Lab``: it records the TCP headers as they cross the wire, so the marks
are checked by code that shares nothing with the programs that wrote them.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from mec_common.netns import in_netns

NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, BPF)")
ETH_P_ALL = 0x0003
SO_TIMESTAMPNS = 35
SOL_PACKET = 263
PACKET_STATISTICS = 6
REPO = Path(__file__).resolve().parents[2]
MARKER_OBJ = REPO / "build/bpf/efm_marker.bpf.o"

TIME_BIT = 0x02
LOSS_BIT = 0x04
SYN, ACK = 0x02, 0x10


@dataclass(frozen=True)
class Seg:
    t: float  # the kernel's receive time (wall clock, s)
    src: str
    dst: str
    sport: int
    dport: int
    seq: int
    ack: int
    byte12: int
    flags: int
    payload: int
    sack: bool
    ecn: int  # the IP header's ECN field

    @property
    def time_bit(self) -> int:
        return 1 if self.byte12 & TIME_BIT else 0


def _has_sack(options: bytes) -> bool:
    i = 0
    while i < len(options):
        kind = options[i]
        if kind == 0:
            return False
        if kind == 1:
            i += 1
            continue
        if kind == 5:
            return True
        if i + 1 >= len(options) or options[i + 1] < 2:
            return False
        i += options[i + 1]
    return False


def parse_frame(frame: bytes, t: float) -> Seg | None:
    if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or len(ip) < ihl + 20:
        return None
    total = struct.unpack_from("!H", ip, 2)[0]
    tcp = ip[ihl:]
    doff = (tcp[12] >> 4) * 4
    sport, dport, seq, ack = struct.unpack_from("!HHII", tcp)
    return Seg(
        t=t,
        src=socket.inet_ntoa(ip[12:16]),
        dst=socket.inet_ntoa(ip[16:20]),
        sport=sport,
        dport=dport,
        seq=seq,
        ack=ack,
        byte12=tcp[12],
        flags=tcp[13],
        payload=total - ihl - doff,
        sack=_has_sack(tcp[20:doff]),
        ecn=ip[1] & 3,
    )


class Capture:
    """Every TCP segment crossing ``ifname`` in ``netns`` (both directions) until stop()."""

    def __init__(self, netns: str, ifname: str) -> None:
        def open_socket() -> socket.socket:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
            # the kernel's time of each packet: the reader thread may run late on a
            # loaded machine, and the tests compare times between packets
            s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            s.bind((ifname, 0))
            s.settimeout(0.2)
            return s

        self.sock = in_netns(netns, open_socket)
        self.segs: list[Seg] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame, anc, _, _ = self.sock.recvmsg(256, 64)
            except TimeoutError:
                continue
            stamp = time.time()
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("qq", data[:16])
                    stamp = sec + nsec / 1e9
            seg = parse_frame(frame, stamp)
            if seg is not None:
                self.segs.append(seg)

    def stop(self) -> list[Seg]:
        """The segments seen; fails if the kernel dropped any (the checks need them all)."""
        time.sleep(0.3)
        self._stop.set()
        self._thread.join(timeout=5)
        stats = self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8)
        self.sock.close()
        _, drops = struct.unpack("II", stats)
        assert drops == 0, f"the capture lost {drops} packets: the checks need every one"
        return self.segs


def flow(segs: list[Seg], port: int) -> list[Seg]:
    """The segments of the connection to server ``port``."""
    return [s for s in segs if port in (s.sport, s.dport)]


def frame(
    src: str,
    dst: str,
    sport: int,
    dport: int,
    *,
    flags: int = ACK,
    bits: int = 0,
    seq: int = 1000,
    ack: int = 1000,
    payload: int = 0,
    ihl: int = 5,
    doff: int = 5,
    tot_len: int | None = None,
) -> bytes:
    """An Ethernet frame with an IPv4/TCP packet, for BPF_PROG_TEST_RUN (checksums are not
    the programs' concern)."""
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (doff << 4) | bits, flags, 65535, 0, 0)
    tcp += b"\x01" * (max(doff, 5) * 4 - 20) + b"p" * payload
    opts = b"\x00" * (max(ihl, 5) * 4 - 20)
    total = tot_len if tot_len is not None else 20 + len(opts) + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, total, 0, 0x4000, 64, 6, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + opts + tcp
