"""3GPP lookups against values printed in the specifications and an independent NR TBS."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mec_common import tables


def test_meld_max_tbs_25_prb_cqi_15_is_2292_bytes() -> None:
    # The MELD/RAPID testbed constant: LTE 5 MHz, 25 PRB, CQI 15 → MCS 28 → I_TBS 26.
    assert tables.cqi_to_mcs(15) == 28
    assert tables.mcs_to_itbs(28) == 26
    assert tables.lte_tbs_bits(26, 25) == 18336
    assert tables.lte_tbs_bytes_for_cqi(15, 25) == 2292


@pytest.mark.parametrize(
    ("cqi", "mcs", "itbs", "bits"),
    [(9, 16, 15, 7736), (4, 4, 4, 1800), (1, 0, 0, 680), (7, 11, 10, 4392)],
)
def test_lte_chain_at_25_prb(cqi: int, mcs: int, itbs: int, bits: int) -> None:
    assert tables.cqi_to_mcs(cqi) == mcs
    assert tables.mcs_to_itbs(mcs) == itbs
    assert tables.lte_tbs_bits(itbs, 25) == bits


def test_lte_table_corners_and_spec_cell() -> None:
    assert tables.lte_tbs_bits(0, 1) == 16
    assert tables.lte_tbs_bits(26, 110) == 75376
    assert tables.lte_tbs_bits(6, 1) == 328  # the spec's printed value (ns-3 uses 88)
    assert tables.lte_tbs_bits(26, 0) == 0


def test_mcs_to_itbs_follows_table_7_1_7_1_1() -> None:
    expected = [*range(10), 9, *range(10, 16), 15, *range(16, 27)]
    assert [tables.mcs_to_itbs(m) for m in range(29)] == expected


def test_oai_cqi_map() -> None:
    expected = [0, 0, 1, 2, 4, 6, 8, 11, 13, 16, 18, 20, 23, 25, 27, 28]
    assert [tables.cqi_to_mcs(c) for c in range(16)] == expected


def test_custom_cqi_map_and_bad_input() -> None:
    assert tables.cqi_to_mcs(3, cqi_map=list(range(16))) == 3
    with pytest.raises(ValueError, match="16 entries"):
        tables.cqi_to_mcs(3, cqi_map=[1, 2])
    for bad in (
        lambda: tables.cqi_to_mcs(16),
        lambda: tables.mcs_to_itbs(29),
        lambda: tables.lte_tbs_bits(27, 1),
        lambda: tables.lte_tbs_bits(0, 111),
    ):
        with pytest.raises(ValueError):
            bad()


def test_nr_tbs_small_and_large_branches() -> None:
    # 1 PRB, MCS 0 (QPSK, R=120/1024), 132 REs: N_info = 30.9 → quantized 24 → TBS 24.
    assert tables.nr_tbs_bits(1, 0) == 24
    # Above 3824 bits every TBS is byte aligned after adding the 24-bit CRC.
    tbs = tables.nr_tbs_bits(273, 27, mcs_table=2, layers=4)
    assert (tbs + 24) % 8 == 0 and tbs > 1_000_000


def _reference_nr_tbs(n_prb: int, qm: int, rate: float, n_re_prb: int) -> int:
    """38.214 §5.1.3.2 written out independently, step by step, for cross-checking."""
    n_info = min(156, n_re_prb) * n_prb * rate * qm
    if n_info <= 3824:
        n = max(3, int(math.log2(n_info)) - 6)
        q = max(24, 2**n * int(n_info // 2**n))
        small = [int(r) for r in tables._nr_tbs_small()]
        return min(t for t in small if t >= q)
    n = int(math.log2(n_info - 24)) - 5
    q = max(3840, 2**n * math.floor((n_info - 24) / 2**n + 0.5))
    if rate <= 0.25:
        c = -(-(q + 24) // 3816)
    elif q > 8424:
        c = -(-(q + 24) // 8424)
    else:
        c = 1
    return int(8 * c * math.ceil((q + 24) / (8 * c)) - 24)


@given(n_prb=st.integers(1, 275), mcs=st.integers(0, 27), table=st.sampled_from([1, 2]))
def test_nr_tbs_matches_independent_formula(n_prb: int, mcs: int, table: int) -> None:
    qm, rate_x1024 = tables._nr_mcs(table)[mcs]
    expected = _reference_nr_tbs(n_prb, qm, rate_x1024 / 1024, 12 * 12 - 12)
    assert tables.nr_tbs_bits(n_prb, mcs, mcs_table=table) == expected


@pytest.mark.parametrize(("cqi", "table", "mcs"), [(15, 1, 28), (15, 2, 27), (1, 1, 0), (0, 2, 0)])
def test_nr_cqi_to_mcs_matches_the_go_twin(cqi: int, table: int, mcs: int) -> None:
    assert tables.nr_cqi_to_mcs(cqi, table) == mcs


def test_tti() -> None:
    assert tables.tti_seconds(0) == 1e-3
    assert tables.tti_seconds(3) == 125e-6
