"""From an RNIS measurement to the kernel's per-UE radio state (MELD's inputs, RAPID's C_i).

MELD (thesis §4, Algorithm 2) compares, at each loss:
- ``D_TBS`` with ``S_TB = T_PDU / N_HARQ`` (Eq. 4.1; the kernel knows T_PDU per socket).
  D_TBS is the feed's ``radio_tbs_bytes`` (the adapter owns the formula: the TB the UE gets
  per TTI when it has data); FlexRAN's raw ``dl_tbs_bytes`` is 0 whenever the UE had nothing
  queued in the last TTI, which on a real MAC is most of the time at light load,
- ``S_TxQueue`` with ``Q_th = TBS(MCS(best CQI), current PRBs) · N_HARQ`` (Eq. 4.2).

Everything here is in **bytes**. The research code computed ``(2292*8)*8 = 146,688`` — the
TBS in bits times N_HARQ — and compared it with FlexRAN's queue in bytes, an 8x too high
threshold (digest §9, erratum 2); the thesis formula gives 2292 B · 8 = 18,336 B.

MELD-overflow (ours, ``docs/meld-rapid.md``) compares, at each loss, the largest RLC
queue measured while the lost data was in flight (the kernel's ``ue_history``, one smoothed
RTT back) with the queue of a **full** RLC buffer, ``full_bytes``. No RAN we read reports its
RLC buffer size (FlexRAN's ``rlcReport`` has the queue, not its limit; OAI's LTE RLC has a
fixed 1,000,000 B per DRB), so the buffer is a per-deployment setting
(``PEP_MELD_RLC_BUFFER_BYTES``), and a queue within ``PEP_MELD_RLC_FULL_PCT`` of it counts as
full: the queue is sampled once per RNIS poll and drains between two samples.

Unknown and stale inputs follow ``mec_common.radio_view``'s one policy: no information,
so the plain congestion response. No D_TBS → no update (the entry goes stale: STALE
verdict, notify); no RLC queue → ``UNKNOWN_U32`` in the map, which MELD-ME's queue test
reads as "notify"; no best-CQI TBS → Q_th = 0 (notify). Staleness is judged in the kernel
at loss time, against the measurement's own time (``radio_view.measured_ns``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mec_common.bus.rnis import RnisMeasurement
from mec_common.radio_view import measured_ns, monotonic_ns_from_wall
from mec_pep.ran_aware.kernel import U32_MAX, UeRadio

UNKNOWN_U32 = U32_MAX
"""The map's encoding of a value the RAN did not report (its test then notifies)."""


def q_threshold_bytes(best_cqi_tbs_bytes: int | None, n_harq: int) -> int:
    """Q_th of Eq. 4.2 in bytes: the TBS at the best CQI on the current PRBs, times N_HARQ."""
    if best_cqi_tbs_bytes is None:
        return 0
    return min(best_cqi_tbs_bytes * n_harq, U32_MAX)


def full_threshold_bytes(rlc_buffer_bytes: int, full_pct: int) -> int:
    """The queue at which the RLC buffer counts as full (0: buffer size unknown)."""
    return min(rlc_buffer_bytes * full_pct // 100, U32_MAX)


def notify_cca(
    mode: str, d_tbs: int, n_harq: int, t_pdu: int, txq_bytes: int, q_th_bytes: int
) -> bool:
    """Algorithm 2 in plain Python: the reference the kernel's decision is tested against."""
    small_tb = d_tbs < t_pdu / n_harq  # D_TBS < S_TB
    if mode == "meld-de":
        return small_tb
    return small_tb or txq_bytes >= q_th_bytes


def overflow_notify(window_txq_peak_bytes: int, full_bytes: int) -> bool | None:
    """MELD-overflow's rule: congestion iff the buffer was full while the lost data was in
    flight; None when it cannot tell (buffer size unknown): the plain response."""
    if not full_bytes:
        return None
    return window_txq_peak_bytes >= full_bytes


@dataclass(frozen=True)
class RadioUpdate:
    ue: str
    radio: UeRadio


def radio_state(
    m: RnisMeasurement, default_harq: int, *, full_bytes: int = 0
) -> RadioUpdate | None:
    """The kernel entry for the UE of ``m``, or None when the message cannot feed MELD."""
    if m.ue_ipv4 is None or m.radio_tbs_bytes is None:
        return None
    n_harq = m.harq_processes or default_harq
    txq = UNKNOWN_U32 if m.rlc_queue_bytes is None else min(m.rlc_queue_bytes, U32_MAX)
    capacity_Bps = (m.rapid_capacity_bps or 0) // 8  # noqa: N806 - B vs b matters here
    radio = UeRadio(
        observed_ns=max(monotonic_ns_from_wall(measured_ns(m)), 0),
        capacity_Bps=capacity_Bps,
        d_tbs=min(m.radio_tbs_bytes, U32_MAX),
        txq_bytes=txq,
        q_th_bytes=q_threshold_bytes(m.best_cqi_tbs_bytes, n_harq),
        n_harq=n_harq,
        full_bytes=full_bytes,
    )
    return RadioUpdate(str(m.ue_ipv4), radio)
