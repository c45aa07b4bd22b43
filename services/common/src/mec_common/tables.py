"""3GPP lookups: CQI → MCS → I_TBS → TBS for LTE (TS 36.213) and NR (TS 38.214).

The tables are the CSV files in ``mec_common/data/3gpp`` (see their README for sources).
TBS values in the tables are in bits; the ``*_bytes`` helpers divide by 8.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from functools import cache
from importlib import resources

LTE_MAX_PRB = 110
LTE_MAX_MCS = 28
NR_MAX_PRB = 275
CQI_MAX = 15


def _rows(name: str) -> list[dict[str, str]]:
    text = resources.files("mec_common").joinpath("data/3gpp", name).read_text()
    return list(csv.DictReader(text.splitlines()))


@cache
def _lte_tbs() -> tuple[tuple[int, ...], ...]:
    rows = _rows("lte_tbs_36213_table_7.1.7.2.1-1.csv")
    return tuple(
        tuple(int(r[f"nprb_{n}"]) for n in range(1, LTE_MAX_PRB + 1))
        for r in sorted(rows, key=lambda r: int(r["itbs"]))
    )


@cache
def _lte_mcs() -> tuple[tuple[int, int], ...]:
    """(Qm, I_TBS) per MCS 0..28."""
    rows = _rows("lte_mcs_36213_table_7.1.7.1-1.csv")
    return tuple(
        (int(r["modulation_order"]), int(r["itbs"]))
        for r in sorted(rows, key=lambda r: int(r["mcs"]))
    )


@cache
def _oai_cqi_to_mcs() -> tuple[int, ...]:
    rows = _rows("oai_lte_cqi_to_mcs.csv")
    return tuple(int(r["mcs"]) for r in sorted(rows, key=lambda r: int(r["cqi"])))


@cache
def _nr_mcs(table: int) -> tuple[tuple[int, float], ...]:
    """(Qm, R·1024) per MCS for NR PDSCH MCS table 1 (64QAM) or 2 (256QAM)."""
    rows = _rows(f"nr_mcs_38214_table_5.1.3.1-{table}.csv")
    return tuple(
        (int(r["modulation_order"]), float(r["code_rate_x1024"]))
        for r in sorted(rows, key=lambda r: int(r["mcs"]))
    )


@cache
def _nr_cqi_efficiency(table: int) -> tuple[float, ...]:
    """Bits per RE per CQI, NR CQI table 1 (Table 5.2.2.1-2) or 2 (Table 5.2.2.1-3)."""
    rows = _rows(f"nr_cqi_38214_table_5.2.2.1-{table + 1}.csv")
    return tuple(float(r["efficiency"]) for r in sorted(rows, key=lambda r: int(r["cqi"])))


@cache
def _nr_tbs_small() -> tuple[int, ...]:
    return tuple(int(r["tbs"]) for r in _rows("nr_tbs_38214_table_5.1.3.2-1.csv"))


def _check(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")


def cqi_to_mcs(cqi: int, cqi_map: Sequence[int] | None = None) -> int:
    """DL MCS an eNB picks for a wideband CQI.

    The map is vendor-specific; the default is OpenAirInterface's ``cqi_to_mcs`` (what
    FlexRAN testbeds run). Pass another 16-entry map (CQI 0..15) for other eNBs.
    """
    _check("CQI", cqi, 0, CQI_MAX)
    table = _oai_cqi_to_mcs() if cqi_map is None else cqi_map
    if len(table) != CQI_MAX + 1:
        raise ValueError(f"a CQI map has {CQI_MAX + 1} entries, got {len(table)}")
    return table[cqi]


def mcs_to_itbs(mcs: int) -> int:
    """I_TBS of an LTE PDSCH MCS (36.213 Table 7.1.7.1-1; MCS 29..31 are retransmission-only)."""
    _check("MCS", mcs, 0, LTE_MAX_MCS)
    return _lte_mcs()[mcs][1]


def lte_tbs_bits(itbs: int, n_prb: int) -> int:
    """Transport block size in bits (36.213 Table 7.1.7.2.1-1); 0 PRBs carry nothing."""
    _check("I_TBS", itbs, 0, 26)
    _check("N_PRB", n_prb, 0, LTE_MAX_PRB)
    return 0 if n_prb == 0 else _lte_tbs()[itbs][n_prb - 1]


def lte_tbs_bytes(itbs: int, n_prb: int) -> int:
    return lte_tbs_bits(itbs, n_prb) // 8


def lte_tbs_bytes_for_mcs(mcs: int, n_prb: int) -> int:
    return lte_tbs_bytes(mcs_to_itbs(mcs), n_prb)


def lte_tbs_bytes_for_cqi(cqi: int, n_prb: int, cqi_map: Sequence[int] | None = None) -> int:
    """TBS in bytes per TTI that a UE reporting ``cqi`` gets on ``n_prb`` PRBs."""
    return lte_tbs_bytes_for_mcs(cqi_to_mcs(cqi, cqi_map), n_prb)


def nr_cqi_to_mcs(cqi: int, table: int = 1) -> int:
    """NR PDSCH MCS for a CQI: the highest MCS of MCS table ``table`` (1: 64QAM, 2: 256QAM)
    whose spectral efficiency does not exceed the CQI's (CQI table 1 or 2, TS 38.214).

    The choice is the gNB's; this is the usual efficiency match (same as the Go twin).
    """
    if table not in (1, 2):
        raise ValueError(f"NR table must be 1 or 2, got {table}")
    _check("CQI", cqi, 0, CQI_MAX)
    target = _nr_cqi_efficiency(table)[cqi] + 1e-4
    return max(
        (mcs for mcs, (qm, rate) in enumerate(_nr_mcs(table)) if qm * rate / 1024 <= target),
        default=0,
    )


def nr_tbs_bits(
    n_prb: int,
    mcs: int,
    *,
    mcs_table: int = 1,
    n_symbols: int = 12,
    n_dmrs_per_prb: int = 12,
    n_overhead: int = 0,
    layers: int = 1,
) -> int:
    """NR PDSCH transport block size in bits, TS 38.214 §5.1.3.2.

    Defaults: a 12-symbol allocation with one DMRS symbol (12 REs per PRB) and no extra
    overhead, single layer.
    """
    if mcs_table not in (1, 2):
        raise ValueError(f"NR MCS table must be 1 or 2, got {mcs_table}")
    _check("MCS", mcs, 0, len(_nr_mcs(mcs_table)) - 1)
    _check("N_PRB", n_prb, 0, NR_MAX_PRB)
    _check("symbols", n_symbols, 1, 14)
    _check("layers", layers, 1, 4)
    if n_prb == 0:
        return 0
    qm, rate_x1024 = _nr_mcs(mcs_table)[mcs]
    n_re_per_prb = min(156, 12 * n_symbols - n_dmrs_per_prb - n_overhead)
    n_info = n_re_per_prb * n_prb * (rate_x1024 / 1024) * qm * layers
    if n_info <= 3824:
        n = max(3, math.floor(math.log2(n_info)) - 6)
        n_info_q = max(24, 2**n * math.floor(n_info / 2**n))
        return next(t for t in _nr_tbs_small() if t >= n_info_q)
    n = math.floor(math.log2(n_info - 24)) - 5
    n_info_q = max(3840, 2**n * _round_half_up((n_info - 24) / 2**n))
    if rate_x1024 / 1024 <= 0.25:
        c = math.ceil((n_info_q + 24) / 3816)
        return int(8 * c * math.ceil((n_info_q + 24) / (8 * c)) - 24)
    if n_info_q > 8424:
        c = math.ceil((n_info_q + 24) / 8424)
        return int(8 * c * math.ceil((n_info_q + 24) / (8 * c)) - 24)
    return int(8 * math.ceil((n_info_q + 24) / 8) - 24)


def _round_half_up(x: float) -> int:
    # 38.214 "round" rounds halves up (Python's round() is banker's rounding).
    return math.floor(x + 0.5)


def tti_seconds(numerology: int = 0) -> float:
    """Slot duration: 1 ms for LTE / NR µ=0, halved for each numerology step (µ ≤ 3)."""
    _check("numerology", numerology, 0, 3)
    return 1e-3 / (1 << numerology)
