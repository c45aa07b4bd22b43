"""RNIS measurement → kernel radio state: MELD's thresholds, units and unknowns."""

from __future__ import annotations

import time

from mec_common.bus.rnis import RnisMeasurement
from mec_common.tables import lte_tbs_bytes_for_cqi
from mec_pep.ran_aware.radio import (
    U32_MAX,
    full_threshold_bytes,
    notify_cca,
    overflow_notify,
    q_threshold_bytes,
    radio_state,
)


def measurement(**fields: object) -> RnisMeasurement:
    base: dict[str, object] = {
        "cell": "10000-0",
        "bs_id": 10000,
        "rnti": 0x4601,
        "ue_ipv4": "10.30.1.1",
        "radio_tbs_bytes": 1000,
        "rlc_queue_bytes": 4000,
        "harq_processes": 8,
        "best_cqi_tbs_bytes": lte_tbs_bytes_for_cqi(15, 25),
        "rapid_capacity_bps": 16_000_000,
        "observed_ns": time.time_ns(),
        "cell_ues": 1,
    }
    base.update(fields)
    return RnisMeasurement.model_validate(base)


def test_thesis_numbers() -> None:
    """Table 4.1: 25 PRB at CQI 15 carry 2292 B; Q_th = 2292 B x 8 = 18,336 B (not bits)."""
    assert lte_tbs_bytes_for_cqi(15, 25) == 2292
    assert q_threshold_bytes(2292, 8) == 18_336
    update = radio_state(measurement(), default_harq=8)
    assert update is not None
    assert update.radio.q_th_bytes == 18_336
    assert update.radio.q_th_bytes != 2292 * 8 * 8  # the research code's bits/bytes slip


def test_s_tb_reference() -> None:
    # S_TB = 1460 / 8 = 182.5 B for the thesis's QUIC packets.
    assert notify_cca("meld-de", 182, 8, 1460, 0, 18_336)
    assert not notify_cca("meld-de", 183, 8, 1460, 0, 18_336)
    assert notify_cca("meld-me", 2292, 8, 1460, 18_336, 18_336)
    assert not notify_cca("meld-me", 2292, 8, 1460, 18_335, 18_336)


def test_full_buffer_threshold() -> None:
    """The emulator's 120 kB buffer at 90 %; OAI's 1,000,000 B; unknown stays unknown."""
    assert full_threshold_bytes(120_000, 90) == 108_000
    assert full_threshold_bytes(1_000_000, 90) == 900_000
    assert full_threshold_bytes(0, 90) == 0
    assert full_threshold_bytes(2**40, 100) == U32_MAX
    update = radio_state(measurement(), default_harq=8, full_bytes=108_000)
    assert update is not None and update.radio.full_bytes == 108_000
    assert overflow_notify(108_000, 108_000) and not overflow_notify(107_999, 108_000)
    assert overflow_notify(0, 0) is None


def test_units_and_fields() -> None:
    m = measurement(radio_tbs_bytes=777, rlc_queue_bytes=12_345, harq_processes=4)
    update = radio_state(m, default_harq=8)
    assert update is not None
    r = update.radio
    assert update.ue == "10.30.1.1"
    assert (r.d_tbs, r.txq_bytes, r.n_harq) == (777, 12_345, 4)
    assert r.q_th_bytes == 2292 * 4
    assert r.capacity_Bps == 2_000_000  # 16 Mbit/s in bytes/s


def test_observation_time_becomes_monotonic() -> None:
    """The kernel compares with bpf_ktime_get_ns (CLOCK_MONOTONIC), not the wall clock."""
    m = measurement(observed_ns=time.time_ns() - 30_000_000)  # measured 30 ms ago
    update = radio_state(m, default_harq=8)
    assert update is not None
    age_ms = (time.monotonic_ns() - update.radio.observed_ns) / 1e6
    assert 29 <= age_ms <= 40


def test_staleness_runs_from_the_measurement_not_the_poll() -> None:
    """A report measured 80 ms ago and polled again just now is 80 ms old (issue 22, #6)."""
    now = time.time_ns()
    m = measurement(observed_ns=now, source_time_ns=now - 80_000_000)
    update = radio_state(m, default_harq=8)
    assert update is not None
    age_ms = (time.monotonic_ns() - update.radio.observed_ns) / 1e6
    assert 75 <= age_ms < 1000


def test_unknowns_are_conservative() -> None:
    assert radio_state(measurement(radio_tbs_bytes=None), default_harq=8) is None
    assert radio_state(measurement(ue_ipv4=None), default_harq=8) is None
    no_queue = radio_state(measurement(rlc_queue_bytes=None), default_harq=8)
    assert no_queue is not None and no_queue.radio.txq_bytes == U32_MAX  # MELD-ME notifies
    no_tbs = radio_state(measurement(best_cqi_tbs_bytes=None), default_harq=8)
    assert no_tbs is not None and no_tbs.radio.q_th_bytes == 0  # MELD-ME notifies
    no_harq = radio_state(measurement(harq_processes=None), default_harq=8)
    assert no_harq is not None and no_harq.radio.n_harq == 8
    no_capacity = radio_state(measurement(rapid_capacity_bps=None), default_harq=8)
    assert no_capacity is not None and no_capacity.radio.capacity_Bps == 0
