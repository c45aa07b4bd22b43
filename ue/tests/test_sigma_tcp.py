"""SIGMA on real TCP connections from a UE namespace through the emulated uplink MAC,
with the emulator's grant feed writing the UE's grant into SIGMA's map every TTI.

Scenario: LTE, 50 uplink PRBs, uplink CQI 15 (MCS 28: 4,587 B per 1 ms TTI, 36.7 Mbit/s),
5 ms one-way each way: RTT_min ~11 ms, W_max ~50 kB (~35 segments, against the kernel's
IW of 10)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from mec_common.netns import in_netns
from mec_common.tables import cqi_to_mcs, lte_tbs_bytes_for_mcs, nr_tbs_bits
from mec_pep.sockets import tcp_info
from mts_testbed import builder
from mts_testbed.topology import Topology
from mts_ue.sigma import MCS_MAX, RAT_LTE, RAT_NR, Grant, Phase, Sigma

pytestmark = pytest.mark.netns

PRB, UL_CQI, DELAY_MS = 50, 15, 5.0
MCS = cqi_to_mcs(UL_CQI)
UL_CHANNEL = "/emulator/v1/ues/ue1/cells/10000/ul_channel"
TBS = lte_tbs_bytes_for_mcs(MCS, PRB)


def scenario(feed: Path) -> dict:
    return {
        "cells": [{"bs_id": 10000, "prb": PRB, "uplink": {}}],
        "ues": [
            {
                "cells": [
                    {
                        "bs_id": 10000,
                        "delay_ms": DELAY_MS,
                        "ul_delay_ms": DELAY_MS,
                        "channel": {"cqi": 15},
                        "ul_channel": {"cqi": UL_CQI},
                        "grant_feed": str(feed),
                    }
                ]
            }
        ],
    }


@pytest.fixture(scope="module")
def topo(sigma: Sigma, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Topology]:
    path = tmp_path_factory.mktemp("sigma") / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario(sigma.pin_dir)))
    name = "s" + sigma.pin_dir.name[1:]
    topology = builder.up(path, name, log=lambda _: None)
    try:
        yield topology
    finally:
        builder.down(name, log=None)


@pytest.fixture(scope="module")
def api(topo: Topology) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {topo.emulator.token}"}
    with httpx.Client(base_url=topo.emulator.url, headers=headers, timeout=5) as client:
        yield client


def ue_ip(topo: Topology) -> str:
    return topo.ues[0].paths[0].ip


def feed_stats(api: httpx.Client) -> dict:
    return api.get("/emulator/v1/ues/ue1/cells/10000").raise_for_status().json()["ul_mac"]


def wait_for_feed(sigma: Sigma, topo: Topology, timeout: float = 10) -> Grant:
    deadline = time.monotonic() + timeout
    while (grant := sigma.read_grant(ue_ip(topo))) is None:
        assert time.monotonic() < deadline, "the emulator never wrote the grant map"
        time.sleep(0.05)
    return grant


def wait_drained(api: httpx.Client, timeout: float = 30) -> None:
    """An earlier upload's packets still in the UE's modem buffer would delay this test's
    handshake (RTT_min) by their drain time."""
    deadline = time.monotonic() + timeout
    while feed_stats(api)["buffer_bytes"] > 0:
        assert time.monotonic() < deadline, "the UE's modem buffer never drained"
        time.sleep(0.05)


def now_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


# ---- the grant feed ---------------------------------------------------------------------


def test_the_feed_fills_the_tbs_table_from_the_3gpp_tables(sigma: Sigma, topo: Topology) -> None:
    wait_for_feed(sigma, topo)
    for mcs in range(MCS_MAX + 1):
        for prb in range(1, 111):
            assert sigma.tbs_bytes(RAT_LTE, mcs, prb) == lte_tbs_bytes_for_mcs(mcs, prb)
        for prb in (1, 24, 51, 106, 273, 275):
            assert sigma.tbs_bytes(RAT_NR, mcs, prb) == nr_tbs_bits(prb, mcs) // 8


def test_the_grant_map_holds_every_ttis_grant(
    sigma: Sigma, topo: Topology, api: httpx.Client
) -> None:
    """Idle UE: each read is a fresh TTI's grant (the one just run); the feed writes one
    grant per TTI; while the UE uploads it decodes the whole cell as its own."""
    wait_for_feed(sigma, topo)
    last_tti = -1
    for _ in range(20):
        before = now_ns()
        g = sigma.read_grant(ue_ip(topo))
        assert g is not None
        assert before - 50_000_000 < g.tti_start_ns <= now_ns()  # at most a loaded host's lag
        assert g.tti > last_tti
        last_tti = g.tti
        assert (g.tti_ns, g.p_cell, g.mcs, g.rat) == (1_000_000, PRB, MCS, RAT_LTE)
        assert (g.n_users, g.p_unused, g.p_current, g.buffer_bytes) == (0, PRB, 0, 0)
        time.sleep(0.013)

    # one write per TTI: the writes between two reads lie between the TTIs run between
    # the TTI counts read just inside and just outside them
    def ttis() -> int:
        return int(api.get("/emulator/v1/cells").json()[0]["ttis"])

    a, feed0, b = ttis(), feed_stats(api)["grant_feed"], ttis()
    time.sleep(0.5)
    c, feed1, d = ttis(), feed_stats(api)["grant_feed"], ttis()
    assert feed0["pinned"] and feed1["errors"] == 0
    assert c - b - 1 <= feed1["writes"] - feed0["writes"] <= d - a + 1
    # uploading: this UE alone holds every PRB of every TTI
    with uploading(topo, "cubic"):
        time.sleep(1.0)
        g = sigma.read_grant(ue_ip(topo))
    assert g is not None
    assert (g.n_users, g.p_current, g.p_unused) == (1, PRB, 0)
    assert g.buffer_bytes > TBS


# ---- SIGMA on a connection --------------------------------------------------------------


class Upload:
    """A TCP connection from the UE to a sink on the server, sending as fast as it can."""

    def __init__(self, topo: Topology, cc: str) -> None:
        server_ns, ue_ns = topo.server.ns, topo.ues[0].ns
        self.listener = in_netns(server_ns, lambda: socket.create_server(("0.0.0.0", 0)))
        port = self.listener.getsockname()[1]
        threading.Thread(target=self._sink, daemon=True).start()

        def connect() -> socket.socket:
            sock = socket.socket()
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
            sock.connect((topo.server.addresses["wan0"], port))
            return sock

        self.sock = in_netns(ue_ns, connect)
        self.stop = threading.Event()
        self.sent = 0

    def _sink(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            while conn.recv(1 << 16):
                pass

    def send(self, n: int) -> None:
        self.sock.sendall(b"x" * n)
        self.sent += n

    def run(self) -> None:
        chunk = b"x" * (1 << 16)
        with contextlib.suppress(OSError):  # closed under it
            while not self.stop.is_set():
                self.sock.sendall(chunk)
                self.sent += len(chunk)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.listener.close()


@contextmanager
def uploading(topo: Topology, cc: str) -> Iterator[Upload]:
    """An Upload sending from a thread until the block ends."""
    up = Upload(topo, cc)
    thread = threading.Thread(target=up.run, daemon=True)
    thread.start()
    try:
        yield up
    finally:
        up.close()
        thread.join(10)


def w_max_segs(tbs: int, rtt_min_us: int, mss: int, min_cwnd: int = 2) -> int:
    """(3.9) in segments as the kernel computes it: TBS * RTT_min / TTI, floor, >= min_cwnd."""
    return max(min_cwnd, tbs * rtt_min_us * 1000 // 1_000_000 // mss)


def test_max_start_sets_the_first_window_to_w_max(
    sigma: Sigma, topo: Topology, api: httpx.Client
) -> None:
    wait_for_feed(sigma, topo)
    wait_drained(api)
    up = Upload(topo, sigma.reno)
    try:
        info, flow = tcp_info(up.sock), sigma.flow(up.sock)
        assert flow is not None
        configured_us = 2 * DELAY_MS * 1000
        assert configured_us <= flow.rtt_min_us <= configured_us + 10_000
        assert flow.rtt_min_us == info["min_rtt_us"]  # the handshake's RTT
        iw = w_max_segs(TBS, flow.rtt_min_us, info["snd_mss"])  # idle cell: P_max = P_cell
        print(
            f"IW {flow.iw_segs} segments at RTT_min {flow.rtt_min_us} us, cwnd {info['snd_cwnd']}"
        )
        assert Phase(flow.phase) == Phase.MAX_START
        assert flow.iw_segs == iw > 10 and info["snd_cwnd"] == iw
        assert flow.pacing_Bps == iw * info["snd_mss"] * 1_000_000 // flow.rtt_min_us
        assert info["pacing_rate"] == flow.pacing_Bps  # until the first ACK
        counters = sigma.counters(ue_ip(topo))
        assert counters is not None and counters.max_starts >= 1
        # Max Start ends once IW segments are ACKed: pacing off, SIGMA's phases follow
        up.send(3 * iw * info["snd_mss"])
        deadline = time.monotonic() + 10
        while (flow := sigma.flow(up.sock)) is not None and flow.phase == Phase.MAX_START:
            assert time.monotonic() < deadline, "Max Start never ended"
            time.sleep(0.01)
        assert flow is not None and flow.acked_segs >= iw and flow.pacing_Bps == 0
        assert Phase(flow.phase) in (Phase.SAFE_INCREASE, Phase.PROPORTIONAL)
    finally:
        up.close()


def test_proportional_adjustment_when_rtt_doubles(
    sigma: Sigma, topo: Topology, api: httpx.Client
) -> None:
    """The uplink CQI falls from 15 to 5 (MCS 28 -> 7, capacity / 4.8) under a running
    upload: the UE's buffer grows, RTT_last reaches 2 RTT_min and SIGMA sets
    cwnd = W_max RTT_min / RTT_last (3.10) with W_max from the grant of the new MCS.
    (SIGMA also cuts at full capacity now and then: its operating point runs up to
    2 RTT_min; those cuts carry the old W_max.)"""
    wait_for_feed(sigma, topo)
    wait_drained(api)
    low_tbs = lte_tbs_bytes_for_mcs(cqi_to_mcs(5), PRB)
    with uploading(topo, sigma.reno) as up:
        try:
            time.sleep(1.0)
            mss = tcp_info(up.sock)["snd_mss"]
            api.patch(UL_CHANNEL, json={"cqi": 5}).raise_for_status()
            deadline = time.monotonic() + 10
            while True:
                flow = sigma.flow(up.sock)
                assert flow is not None
                if flow.cuts and flow.cut_w_max_segs == w_max_segs(
                    low_tbs, flow.cut_rtt_min_us, mss
                ):
                    break
                assert time.monotonic() < deadline, "no Proportional Adjustment at the new MCS"
                time.sleep(0.01)
        finally:
            api.patch(UL_CHANNEL, json={"clear_cqi": True}).raise_for_status()
    print(
        f"cut {flow.cuts}: cwnd {flow.cut_cwnd} = W_max {flow.cut_w_max_segs} x RTT_min "
        f"{flow.cut_rtt_min_us} / RTT_last {flow.cut_rtt_last_us} us"
    )
    assert flow.cut_rtt_last_us >= 2 * flow.cut_rtt_min_us
    expected = flow.cut_w_max_segs * flow.cut_rtt_min_us // flow.cut_rtt_last_us
    assert flow.cut_cwnd == max(2, expected)
    counters = sigma.counters(ue_ip(topo))
    assert counters is not None and counters.proportional >= 1


# ---- no grant, a stale grant: the kernel's Reno ----------------------------------------


@pytest.fixture(scope="module")
def unfed(sigma: Sigma) -> Iterator[Sigma]:
    """A second SIGMA instance no modem driver writes to."""
    other = Sigma.load(sigma.pin_dir.parent, sigma.pin_dir.name + "u")
    try:
        yield other
    finally:
        other.close()


def test_without_a_grant_reno_grows_the_window(
    unfed: Sigma, topo: Topology, api: httpx.Client
) -> None:
    wait_drained(api)
    up = Upload(topo, unfed.reno)
    try:
        flow = unfed.flow(up.sock)
        assert flow is not None and Phase(flow.phase) == Phase.FALLBACK
        assert tcp_info(up.sock)["snd_cwnd"] == 10  # the kernel's IW: no Max Start
        up.send(200_000)
        time.sleep(0.3)
        c = unfed.counters(ue_ip(topo))
        assert c is not None and c.acks > 0
        assert c.fallback_acks == c.no_grant == c.acks and c.sigma_acks == 0
        assert tcp_info(up.sock)["snd_cwnd"] > 10  # Reno's slow start
        # a stale grant (the modem driver stopped 1 s ago) is counted as stale
        stale = Grant(
            tti_start_ns=now_ns() - 10**9, tti_ns=1_000_000, p_cell=PRB, n_users=1,
            p_current=PRB, mcs=MCS, rat=RAT_LTE,
        )  # fmt: skip
        unfed.write_grant(ue_ip(topo), stale)
        up.send(200_000)
        time.sleep(0.3)
        c2 = unfed.counters(ue_ip(topo))
        assert c2 is not None and c2.stale > 0 and c2.sigma_acks == 0
        assert c2.fallback_acks == c2.acks
    finally:
        up.close()
        unfed.forget_grant(ue_ip(topo))
