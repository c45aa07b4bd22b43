"""mec_common.radio_view: dispatch by routing key, the measurement's own clock, and the one
policy for unknown and stale values, followed the same way by both consumers."""

from __future__ import annotations

import json
import time

import pytest

from mec_common.bus.rnis import RnisEvent, RnisMeasurement
from mec_common.radio_view import (
    RadioView,
    is_fresh,
    known,
    measured_ns,
    monotonic_ns_from_wall,
)
from mec_pep.ran_aware.radio import UNKNOWN_U32, notify_cca, radio_state
from mec_pep.ran_aware.settings import RanAwareSettings
from path_manager.path_radio import PathRadio, RadioSettings

UE = "10.30.1.1"
PEP_STALE_S = RanAwareSettings().meld_stale_ms / 1e3
PM = RadioSettings()
T_PDU = 1448  # bytes; with D_TBS far above T_PDU / N_HARQ, only the queue test decides


def measurement(*, rlc: int | None, measured_ago_s: float = 0.0) -> RnisMeasurement:
    """A measurement the RAN took ``measured_ago_s`` ago and the adapter just published."""
    now = time.time_ns()
    return RnisMeasurement(
        cell="10000-0", bs_id=10000, rnti=7, ue_ipv4=UE, cell_ues=1, wb_cqi=12,
        dl_tbs_bytes=2292, radio_tbs_bytes=2292, best_cqi_tbs_bytes=2292, harq_processes=8,
        rlc_queue_bytes=rlc, observed_ns=now, source_time_ns=now - int(measured_ago_s * 1e9),
    )  # fmt: skip


def pep_reading(m: RnisMeasurement) -> int | None:
    """The RLC queue the PEP's kernel will use at a loss now: the map entry's value if the
    entry is fresh by the kernel's test (meld.bpf.c decide()), else None."""
    update = radio_state(m, default_harq=8)
    assert update is not None
    entry = update.radio
    if not is_fresh(entry.observed_ns, time.monotonic_ns(), PEP_STALE_S):
        return None  # VERDICT_STALE: notify
    return None if entry.txq_bytes == UNKNOWN_U32 else int(entry.txq_bytes)


def pm_reading(m: RnisMeasurement) -> int | None:
    """The RLC queue the path manager's reactive trigger adds for this path now."""
    path = PathRadio("p0")
    now = time.monotonic()
    path.update(m, now, PM, monotonic_ns_from_wall(measured_ns(m)) / 1e9)
    return path.radio_queue(now, PM)


def test_a_known_fresh_value_reaches_both_consumers() -> None:
    m = measurement(rlc=30_000)
    assert pep_reading(m) == pm_reading(m) == 30_000


@pytest.mark.parametrize(
    "m",
    [measurement(rlc=None), measurement(rlc=10_000, measured_ago_s=2.0)],
    ids=["unknown", "stale"],
)
def test_unknown_and_stale_values_are_no_information_to_both_consumers(
    m: RnisMeasurement,
) -> None:
    assert pep_reading(m) is None and pm_reading(m) is None
    # ...and each falls back to what it does without the RAN. The PEP: MELD-ME notifies the
    # growth function (the unknown queue compares as full; a stale entry is STALE: notify).
    entry = radio_state(m, default_harq=8)
    assert entry is not None
    r = entry.radio
    if m.rlc_queue_bytes is None:
        assert notify_cca("meld-me", r.d_tbs, r.n_harq, T_PDU, r.txq_bytes, r.q_th_bytes)
    else:
        assert not is_fresh(r.observed_ns, time.monotonic_ns(), PEP_STALE_S)
        assert not notify_cca("meld-me", r.d_tbs, r.n_harq, T_PDU, r.txq_bytes, r.q_th_bytes), (
            "fresh, the same values would keep cwnd: only staleness makes it notify"
        )
    # The path manager: the queue is the PEP's unsent bytes alone (no RLC part).
    assert pm_reading(m) is None


def test_a_message_delivered_now_but_measured_long_ago_is_stale() -> None:
    m = measurement(rlc=1, measured_ago_s=1.0)
    assert measured_ns(m) == m.source_time_ns < m.observed_ns
    assert not is_fresh(measured_ns(m), time.time_ns(), PM.stale_after)
    path = PathRadio("p0")
    now = time.monotonic()
    path.update(m, now, PM, monotonic_ns_from_wall(measured_ns(m)) / 1e9)
    assert path.stale(now, PM)


def test_known_is_the_policy() -> None:
    assert known(5, 1_000, 1_000 + 10**8, 0.5) == 5
    assert known(None, 1_000, 1_000, 0.5) is None  # not reported
    assert known(5, 1_000, 1_000 + 10**9, 0.5) is None  # too old
    assert known(5, 2_000, 1_000, 0.5) is None  # from the future (a clock step)
    assert known(0, 1_000, 1_000, 0.5) == 0  # zero is a value, not "unknown"


def test_dispatch_by_routing_key() -> None:
    seen: list[object] = []
    view = RadioView(seen.append, seen.append)
    m = measurement(rlc=1)
    view.on_message("rnis.v1.meas.10000-0.-.10_30_1_1", m.model_dump_json().encode(), {})
    cell = json.loads(m.model_dump_json())
    ue_fields = {k: cell.pop(k) for k in list(cell) if k in ("rnti", "ue_ipv4", "wb_cqi")}
    ue_fields["rnti"] = 8
    cell_body = json.dumps(cell | {"ues": [ue_fields]}).encode()
    view.on_message("rnis.v1.cell.10000-0", cell_body, {})
    event = RnisEvent(event="attach", cell="10000-0", bs_id=10000, rnti=7, time_ns=1)
    view.on_message("rnis.v1.event.attach.10000-0.-.-", event.model_dump_json().encode(), {})
    view.on_message("rnis.v1.meas.10000-0.-.-", b'{"not": "a measurement"}', {})
    view.on_message("something.else", b"{}", {})
    assert [type(x).__name__ for x in seen] == ["RnisMeasurement", "RnisMeasurement", "RnisEvent"]
    assert seen[0] == m and isinstance(seen[1], RnisMeasurement) and seen[1].rnti == 8
    assert (view.stats.received, view.stats.rejected, view.stats.ignored) == (5, 1, 1)
