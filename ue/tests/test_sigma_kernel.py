"""SIGMA's capacity arithmetic (Eqs. 3.7-3.9) in the kernel, alone: against a Python
reference on the 3GPP tables, at extreme grant values, and the layouts against the BTF."""

from __future__ import annotations

import json
import time

import pytest

from mec_common.bpf import layout_mismatches
from mec_common.tables import lte_tbs_bytes_for_mcs, nr_tbs_bits
from mts_ue import cli
from mts_ue.sigma import (
    LAYOUTS,
    MCS_MAX,
    PRB_MAX,
    RAT_LTE,
    RAT_NR,
    CapacityArgs,
    Grant,
    Sigma,
    Verdict,
    build_paths,
)

U32_MAX, U64_MAX = 2**32 - 1, 2**64 - 1
STALE_NS = 20_000_000


def test_layouts_match_the_btf() -> None:
    assert layout_mismatches(build_paths()[1], LAYOUTS) == []


def fill_tbs(sigma: Sigma, rat: int, mcs: int, prbs: range) -> None:
    for n in prbs:
        tbs = lte_tbs_bytes_for_mcs(mcs, n) if rat == RAT_LTE else nr_tbs_bits(n, mcs) // 8
        sigma.set_tbs_bytes(rat, mcs, n, tbs)


def run(sigma: Sigma, rtt_min_us: int = 20_000, mss: int = 1448, **grant: int) -> CapacityArgs:
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    fields = {"tti_start_ns": now, "tti_ns": 1_000_000, "p_cell": 50, "mcs": 28} | grant
    args = CapacityArgs(
        grant=Grant(**fields), now_ns=now, stale_ns=STALE_NS, has_grant=1,
        rtt_min_us=rtt_min_us, mss=mss,
    )  # fmt: skip
    return sigma.capacity(args)


@pytest.mark.parametrize(
    ("n_users", "p_unused", "p_current", "p_max"),
    [
        (1, 0, 50, 50),  # alone and saturated: the whole cell
        (2, 0, 25, 25),  # two saturated UEs: half each
        (2, 10, 20, 35),  # half + what nobody used
        (0, 50, 0, 50),  # idle cell, this UE not granted yet: it counts as the one user
        (1, 30, 0, 50),  # one other UE (20 PRBs), this one not granted: 25 + 30, capped
        (3, 0, 0, 12),  # three others, this one not granted: 50 / 4
    ],
)
def test_capacity_matches_the_equations(
    sigma: Sigma, n_users: int, p_unused: int, p_current: int, p_max: int
) -> None:
    fill_tbs(sigma, RAT_LTE, 28, range(1, 51))
    out = run(sigma, n_users=n_users, p_unused=p_unused, p_current=p_current)
    tbs = lte_tbs_bytes_for_mcs(28, p_max)
    assert out.verdict == Verdict.OK
    assert (out.p_max, out.tbs_bytes) == (p_max, tbs)
    assert out.c_max_Bps == tbs * 1000  # (3.8): per 1 ms TTI
    assert out.w_max_bytes == tbs * 20  # (3.9): C_max * 20 ms
    assert out.w_max_segs == tbs * 20 // 1448


def test_nr_slot(sigma: Sigma) -> None:
    """NR µ=1: a 0.5 ms slot doubles C_max for the same TBS."""
    fill_tbs(sigma, RAT_NR, 27, range(106, 107))
    out = run(sigma, rat=RAT_NR, mcs=27, p_cell=106, n_users=1, p_current=106, tti_ns=500_000)
    tbs = nr_tbs_bits(106, 27) // 8
    assert (out.verdict, out.tbs_bytes, out.c_max_Bps) == (Verdict.OK, tbs, tbs * 2000)
    assert out.w_max_bytes == tbs * 40  # 20 ms of 0.5 ms slots


def test_stale_missing_and_invalid_grants(sigma: Sigma) -> None:
    fill_tbs(sigma, RAT_LTE, 28, range(1, 51))
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    missing = CapacityArgs(now_ns=now, stale_ns=STALE_NS, has_grant=0, rtt_min_us=1000)
    assert sigma.capacity(missing).verdict == Verdict.NONE
    assert run(sigma, tti_start_ns=now - 2 * STALE_NS).verdict == Verdict.STALE
    assert run(sigma, tti_start_ns=now + 10**9).verdict == Verdict.STALE  # from the future
    assert run(sigma, rtt_min_us=0).verdict == Verdict.NO_RTT
    for bad in ({"p_cell": 0}, {"p_cell": PRB_MAX + 1}, {"mcs": MCS_MAX + 1}, {"rat": 2},
                {"tti_ns": 0}, {"tti_ns": 999}, {"tti_ns": U32_MAX}):  # fmt: skip
        assert run(sigma, **bad).verdict == Verdict.INVALID, bad
    sigma.set_tbs_bytes(RAT_LTE, 5, 7, 0)  # a hole in the table
    assert run(sigma, mcs=5, p_cell=7).verdict == Verdict.INVALID


def test_extreme_values_neither_divide_by_zero_nor_overflow(sigma: Sigma) -> None:
    """Every u32 at its maximum where the grant allows it, the largest TBS the map could
    hold, the longest RTT: the outputs stay bounded and exact (Python's big integers)."""
    fill_tbs(sigma, RAT_NR, MCS_MAX, range(1, PRB_MAX + 1))
    sigma.set_tbs_bytes(RAT_NR, MCS_MAX, PRB_MAX, U32_MAX)  # a corrupt table entry
    cases = [
        {"n_users": U32_MAX, "p_unused": U32_MAX, "p_current": U32_MAX},
        {"n_users": U32_MAX, "p_unused": 0, "p_current": 0},  # N + 1 must not wrap to 0
        {"n_users": 0, "p_unused": U32_MAX, "p_current": 0},
    ]
    for grant in cases:
        out = run(
            sigma, rtt_min_us=U32_MAX, mss=0, rat=RAT_NR, mcs=MCS_MAX, p_cell=PRB_MAX,
            tti_ns=1000, **grant,
        )  # fmt: skip
        assert out.verdict == Verdict.OK, grant
        assert 1 <= out.p_max <= PRB_MAX
        if out.p_max == PRB_MAX:
            tbs = 1 << 20  # capped: SIGMA_TBS_CAP
            assert out.tbs_bytes == tbs
            assert out.c_max_Bps == tbs * 10**9 // 1000
            assert out.w_max_bytes == tbs * U32_MAX * 1000 // 1000 < U64_MAX
            assert out.w_max_segs == U32_MAX  # mss 0 read as 1, clamped to u32
        else:  # N = 2^32: the fair share rounds to 0 PRBs, taken as 1
            assert out.p_max == 1 and out.tbs_bytes == nr_tbs_bits(1, MCS_MAX) // 8
    # N larger than the cell: still one PRB, never zero
    fill_tbs(sigma, RAT_LTE, 0, range(1, 2))
    out = run(sigma, mcs=0, p_cell=1, n_users=5, p_current=1)
    assert (out.verdict, out.p_max) == (Verdict.OK, 1)


def test_cli_reads_the_grant_map(sigma: Sigma, capsys: pytest.CaptureFixture[str]) -> None:
    """`mts-sigma grant|counters UE` against a loaded instance: JSON, exit 1 when absent."""
    args = ["--pin-root", str(sigma.pin_dir.parent), "--instance", sigma.pin_dir.name]
    sigma.write_grant("10.99.99.7", Grant(tti=42, p_cell=25, n_users=1, p_current=25, mcs=9))
    try:
        assert cli.main([*args, "grant", "10.99.99.7"]) == 0
        grant = json.loads(capsys.readouterr().out)
        assert (grant["tti"], grant["p_cell"], grant["p_current"], grant["mcs"]) == (42, 25, 25, 9)
        assert cli.main([*args, "counters", "10.99.99.8"]) == 1  # no connection of that UE
        assert json.loads(capsys.readouterr().out) is None
    finally:
        sigma.forget_grant("10.99.99.7")
