"""Registration, pins, maps, and the in-kernel decision against the thesis's formulas."""

from __future__ import annotations

import ctypes
import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mec_common.bpf import available_congestion_controls
from mec_pep.ran_aware.kernel import (
    HISTORY_BUCKET_NS,
    HISTORY_BUCKETS,
    LAYOUTS,
    CcaMode,
    DecideArgs,
    DrainArgs,
    KernelUnavailableError,
    MeldKernel,
    RadioWindow,
    RapidCwndArgs,
    Tuning,
    UeHistory,
    UeRadio,
    Verdict,
    _start_time,
    ca_names,
)
from mec_pep.ran_aware.radio import notify_cca, overflow_notify

pytestmark = pytest.mark.bpf


def test_registers_and_unregisters(build: tuple[Path, Path], pin_root: Path) -> None:
    instance = f"test-{secrets.token_hex(4)}"
    k = MeldKernel.load(*build, pin_root, instance)
    names = list(k.names.values())
    try:
        assert names == list(ca_names(instance).values())
        assert set(names) <= set(available_congestion_controls())
        pins = {p.name for p in (pin_root / instance).iterdir()}
        assert {"ue_radio", "ue_counters", "ue_mode", "meld_config"} <= pins
        assert {f"link_{n}" for n in names} <= pins
    finally:
        k.close()
    assert not set(names) & set(available_congestion_controls())
    assert not (pin_root / instance).exists()


def test_a_crashed_instance_is_cleaned_up_at_start(
    build: tuple[Path, Path], pin_root: Path
) -> None:
    """A PEP killed without stop() leaves pinned links; the next start removes them."""
    instance = f"test-{secrets.token_hex(4)}"
    crashed = MeldKernel.load(*build, pin_root, instance)
    crashed._close_fds()  # the process died: fds gone, pins left
    assert set(crashed.names.values()) <= set(available_congestion_controls())
    k = MeldKernel.load(*build, pin_root, instance)
    try:
        assert set(k.names.values()) <= set(available_congestion_controls())
    finally:
        k.close()
    assert not set(k.names.values()) & set(available_congestion_controls())


def test_an_instance_in_use_is_left_alone(build: tuple[Path, Path], pin_root: Path) -> None:
    """Two PEPs with the same instance name: the second must not unregister the first."""
    instance = f"test-{secrets.token_hex(4)}"
    first = MeldKernel.load(*build, pin_root, instance)
    other = subprocess.Popen(["sleep", "30"])
    try:
        owner = next((pin_root / instance).glob("owner-*"))
        owner.rename(pin_root / instance / f"owner-{other.pid}-{_start_time(other.pid)}")
        with pytest.raises(KernelUnavailableError, match="belongs to the running process"):
            MeldKernel.load(*build, pin_root, instance)
        assert set(first.names.values()) <= set(available_congestion_controls())
    finally:
        other.kill()
        other.wait()
        first.close()


def test_missing_build_is_a_clear_error(tmp_path: Path, pin_root: Path) -> None:
    with pytest.raises(KernelUnavailableError, match="not found"):
        MeldKernel.load(tmp_path / "meld-loader", tmp_path / "meld.bpf.o", pin_root, "x")


def test_loader_failure_is_reported(
    build: tuple[Path, Path], tmp_path: Path, pin_root: Path
) -> None:
    broken = tmp_path / "broken.bpf.o"
    broken.write_bytes(b"not an ELF object")
    with pytest.raises(KernelUnavailableError, match=r"ELF|BTF"):
        MeldKernel.load(build[0], broken, pin_root, f"test-{secrets.token_hex(4)}")


def test_names_fit_the_kernel_limit() -> None:
    for instance in ("default", "a", "a-very-long-instance-name-" * 4):
        for name in ca_names(instance).values():
            assert len(name) <= 15
    assert ca_names("default") == {"meld_reno": "meld_reno", "meld_cubic": "meld_cubic"}
    assert ca_names("x") != ca_names("y")


def test_layouts_match_the_object(build: tuple[Path, Path]) -> None:
    """The ctypes mirrors of meld.h against the BTF clang wrote into the object."""
    dump = subprocess.run(
        ["bpftool", "-j", "btf", "dump", "file", str(build[1])],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    structs = {t["name"]: t for t in json.loads(dump.stdout)["types"] if t["kind"] == "STRUCT"}
    for name, layout in LAYOUTS.items():
        btf = structs[name]
        assert btf["size"] == ctypes.sizeof(layout), name
        members = [(m["name"], m["bits_offset"] // 8) for m in btf["members"]]
        mirror = [(f, getattr(layout, f).offset) for f, *_ in layout._fields_]
        assert members == mirror, name


def test_maps_round_trip(kernel: MeldKernel, tuning: Tuning) -> None:
    ue = "10.30.1.7"
    r = UeRadio(observed_ns=123, capacity_Bps=2_000_000, d_tbs=2292, txq_bytes=5,
                q_th_bytes=18336, n_harq=8)  # fmt: skip
    kernel.set_radio(ue, r)
    got = kernel.radio(ue)
    assert got is not None and bytes(got) == bytes(r)
    assert ue in kernel.radio_ues()
    kernel.set_ue_mode(ue, CcaMode.RAPID)
    assert kernel.ue_modes()[ue] is CcaMode.RAPID
    kernel.set_ue_mode(ue, None)
    assert ue not in kernel.ue_modes()
    kernel.set_global_mode(CcaMode.OFF)
    assert kernel.config().global_mode == CcaMode.OFF
    assert kernel.config().stale_ns == int(tuning.stale_ms * 1e6)
    kernel.set_global_mode(CcaMode.MELD_ME)
    kernel.forget_radio(ue)
    assert kernel.radio(ue) is None


def test_map_update_cost(kernel: MeldKernel) -> None:
    """One RNIS message = one bpf(2) update: within the 1 ms of the fastest poll. CPU time,
    not wall time: other work on the machine does not count (the figure is bench-meld's)."""
    r = UeRadio(observed_ns=time.monotonic_ns(), d_tbs=100, n_harq=8)
    n = 2000
    start = time.process_time()
    for i in range(n):
        kernel.set_radio(f"10.31.{i % 250}.{i // 250 + 1}", r)
    per_update = (time.process_time() - start) / n
    assert per_update < 1e-3, f"{per_update * 1e6:.1f} µs of CPU per update"


# --- the decision, run in the kernel (BPF_PROG_TEST_RUN of the `meld_decide` program) ----

NOW = 10**12
STALE = 50 * 10**6


def decide(
    kernel: MeldKernel,
    mode: CcaMode,
    radio: UeRadio | None,
    t_pdu: int = 1500,
    window: RadioWindow | None = None,
    span_ns: int = 0,
) -> Verdict:
    args = DecideArgs(now_ns=NOW, stale_ns=STALE, span_ns=span_ns, mode=int(mode), t_pdu=t_pdu)
    if radio is not None:
        args.radio, args.has_radio = radio, 1
    if window is not None:
        args.window = window
    return kernel.decide(args)


def fresh(
    d_tbs: int, txq: int = 0, q_th: int = 18336, n_harq: int = 8, full: int = 108_000
) -> UeRadio:
    return UeRadio(observed_ns=NOW - 8 * 10**6, d_tbs=d_tbs, txq_bytes=txq,
                   q_th_bytes=q_th, n_harq=n_harq, full_bytes=full)  # fmt: skip


def peak(txq: int) -> RadioWindow:
    """A history window of a few buckets whose largest queue was ``txq``."""
    return RadioWindow(txq_peak_bytes=txq, d_tbs_low=2292, buckets=4)


def test_s_tb_boundary(kernel: MeldKernel) -> None:
    """S_TB = T_PDU / N_HARQ = 1500 / 8 = 187.5 B: 187 B is below it, 188 B is not."""
    assert decide(kernel, CcaMode.MELD_DE, fresh(187)) is Verdict.NOTIFY
    assert decide(kernel, CcaMode.MELD_DE, fresh(188)) is Verdict.SUPPRESS
    # The thesis's QUIC packets: T_PDU = 1460 B, "at least 183 bytes" (1460/8 = 182.5).
    assert decide(kernel, CcaMode.MELD_DE, fresh(182), t_pdu=1460) is Verdict.NOTIFY
    assert decide(kernel, CcaMode.MELD_DE, fresh(183), t_pdu=1460) is Verdict.SUPPRESS


def test_q_th_is_in_bytes(kernel: MeldKernel) -> None:
    """Q_th = 2292 B x 8 = 18,336 B. The research code's 146,688 (bits) would call a
    100 kB queue "random loss"; in bytes it is congestion."""
    assert decide(kernel, CcaMode.MELD_ME, fresh(2292, txq=18335)) is Verdict.SUPPRESS
    assert decide(kernel, CcaMode.MELD_ME, fresh(2292, txq=18336)) is Verdict.NOTIFY
    assert decide(kernel, CcaMode.MELD_ME, fresh(2292, txq=100_000)) is Verdict.NOTIFY
    # MELD-DE ignores the queue.
    assert decide(kernel, CcaMode.MELD_DE, fresh(2292, txq=100_000)) is Verdict.SUPPRESS


def test_modes_staleness_and_missing_data(kernel: MeldKernel) -> None:
    assert decide(kernel, CcaMode.OFF, fresh(2292)) is Verdict.OFF
    assert decide(kernel, CcaMode.MELD_ME, None) is Verdict.NO_DATA
    old = fresh(2292)
    old.observed_ns = NOW - STALE - 1
    assert decide(kernel, CcaMode.MELD_ME, old) is Verdict.STALE
    future = fresh(2292)
    future.observed_ns = NOW + 1
    assert decide(kernel, CcaMode.MELD_ME, future) is Verdict.STALE
    assert decide(kernel, CcaMode.RAPID, fresh(10, txq=10**6)) is Verdict.RAPID
    assert decide(kernel, CcaMode.RAPID, None) is Verdict.NO_DATA


def test_meld_overflow_decides_on_the_history_not_the_current_state(kernel: MeldKernel) -> None:
    """Full = 108,000 B. The queue at detection (txq_bytes) and the small TB play no part:
    only the largest queue while the data was out."""
    now_empty = fresh(137, txq=0)
    assert decide(kernel, CcaMode.MELD_OVERFLOW, now_empty, window=peak(108_000)) is Verdict.NOTIFY
    assert (
        decide(kernel, CcaMode.MELD_OVERFLOW, now_empty, window=peak(107_999)) is Verdict.SUPPRESS
    )
    now_full = fresh(2292, txq=120_000)
    assert decide(kernel, CcaMode.MELD_OVERFLOW, now_full, window=peak(50_000)) is Verdict.SUPPRESS
    # an unknown queue in the history (UNKNOWN_U32) is a full one
    assert (
        decide(kernel, CcaMode.MELD_OVERFLOW, now_empty, window=peak(2**32 - 1)) is Verdict.NOTIFY
    )


def test_meld_overflow_state_is_fresh_within_the_episodes_span(kernel: MeldKernel) -> None:
    """MELD-overflow judges the history over one srtt back: a measurement older than the
    staleness bound but taken within that span still saw the lost data in flight. The
    thesis's modes decide on the state at detection and keep the bound alone."""
    late = fresh(2292)
    late.observed_ns = NOW - 80 * 10**6  # 80 ms: stale by PEP_MELD_STALE_MS (50)
    srtt_100ms, srtt_60ms = 100 * 10**6, 60 * 10**6
    window = peak(50_000)
    assert decide(kernel, CcaMode.MELD_OVERFLOW, late, window=window, span_ns=srtt_100ms) is (
        Verdict.SUPPRESS)  # fmt: skip
    assert decide(kernel, CcaMode.MELD_OVERFLOW, late, window=window, span_ns=srtt_60ms) is (
        Verdict.STALE)  # fmt: skip
    assert decide(kernel, CcaMode.MELD_ME, late, span_ns=srtt_100ms) is Verdict.STALE


def test_meld_overflow_without_buffer_size_or_history_is_plain(kernel: MeldKernel) -> None:
    assert decide(kernel, CcaMode.MELD_OVERFLOW, fresh(2292, full=0), window=peak(0)) is (
        Verdict.NO_DATA)  # fmt: skip
    no_history = RadioWindow(txq_peak_bytes=0, d_tbs_low=2**32 - 1, buckets=0)
    assert decide(kernel, CcaMode.MELD_OVERFLOW, fresh(2292), window=no_history) is Verdict.NO_DATA
    assert decide(kernel, CcaMode.MELD_OVERFLOW, None, window=peak(0)) is Verdict.NO_DATA
    old = fresh(2292)
    old.observed_ns = NOW - STALE - 1
    assert decide(kernel, CcaMode.MELD_OVERFLOW, old, window=peak(0)) is Verdict.STALE


def test_ignore_loss_keeps_every_loss(kernel: MeldKernel) -> None:
    """The upper bound on goodput: no radio state, stale state or a full buffer alike."""
    old = fresh(137, txq=10**6)
    old.observed_ns = NOW - STALE - 1
    for radio in (None, old, fresh(137, txq=10**6)):
        assert decide(kernel, CcaMode.IGNORE_LOSS, radio, window=peak(10**6)) is Verdict.SUPPRESS


@settings(max_examples=200, deadline=None)
@given(peak_bytes=st.integers(0, 2**32 - 1), full=st.integers(0, 2**32 - 1),
       buckets=st.integers(0, HISTORY_BUCKETS))  # fmt: skip
def test_kernel_agrees_with_the_overflow_rule(
    kernel: MeldKernel, peak_bytes: int, full: int, buckets: int
) -> None:
    window = RadioWindow(txq_peak_bytes=peak_bytes, d_tbs_low=0, buckets=buckets)
    verdict = decide(kernel, CcaMode.MELD_OVERFLOW, fresh(2292, full=full), window=window)
    expected = overflow_notify(peak_bytes, full) if buckets else None
    want = {None: Verdict.NO_DATA, True: Verdict.NOTIFY, False: Verdict.SUPPRESS}[expected]
    assert verdict is want


# --- the radio history: what the PEP writes, what the kernel reads (meld_window) -----------


def test_history_buckets_keep_the_extremes_of_their_time(kernel: MeldKernel) -> None:
    ue = "10.31.250.1"
    t0 = 10**12 // HISTORY_BUCKET_NS * HISTORY_BUCKET_NS  # a bucket's start
    try:
        for dt_ms, txq, d_tbs in ((0, 5_000, 2292), (3, 110_000, 137), (7, 1_000, 2292),
                                  (8, 2_000, 1800), (40, 60_000, 2292)):  # fmt: skip
            kernel.set_radio(ue, UeRadio(observed_ns=t0 + dt_ms * 10**6, txq_bytes=txq,
                                         d_tbs=d_tbs))  # fmt: skip
        first = kernel.window(ue, t0, t0 + 7 * 10**6)
        assert (first.txq_peak_bytes, first.d_tbs_low, first.buckets) == (110_000, 137, 1)
        later = kernel.window(ue, t0 + 8 * 10**6, t0 + 50 * 10**6)
        assert (later.txq_peak_bytes, later.d_tbs_low, later.buckets) == (60_000, 1800, 2)
        # one bucket's width before its start is outside; its last ns is inside
        assert kernel.window(ue, t0 - 10**6, t0 - 1).buckets == 0
        last_ns = t0 + HISTORY_BUCKET_NS - 1
        assert kernel.window(ue, last_ns, last_ns).buckets == 1
        # a measurement older than its slot's bucket is dropped, not mixed in
        kernel.set_radio(ue, UeRadio(observed_ns=t0 - HISTORY_BUCKETS * HISTORY_BUCKET_NS,
                                     txq_bytes=999_999))  # fmt: skip
        assert kernel.window(ue, 0, t0 + 10**9).txq_peak_bytes == 110_000
        kernel.forget_radio(ue)
        assert kernel.window(ue, 0, 2**63).buckets == 0
    finally:
        kernel.forget_radio(ue)


@settings(max_examples=40, deadline=None)
@given(
    samples=st.lists(st.tuples(st.integers(0, 2_000), st.integers(0, 200_000),
                               st.integers(0, 3_000)), min_size=1, max_size=300),
    span=st.tuples(st.integers(0, 2_100), st.integers(0, 400)),
)  # fmt: skip
def test_kernel_window_agrees_with_the_python_history(
    kernel: MeldKernel, samples: list[tuple[int, int, int]], span: tuple[int, int]
) -> None:
    """Times in ms from 1000 s on, in any order (a late message): the kernel's walk of
    the map equals the reference walk of what the PEP wrote."""
    ue, base = "10.31.250.2", 10**12
    reference = UeHistory()
    try:
        for ms, txq, d_tbs in samples:
            r = UeRadio(observed_ns=base + ms * 10**6, txq_bytes=txq, d_tbs=d_tbs)
            kernel.set_radio(ue, r)
            reference.record(r)
        start = base + span[0] * 10**6
        end = start + span[1] * 10**6
        assert bytes(kernel.window(ue, start, end)) == bytes(reference.window(start, end))
    finally:
        kernel.forget_radio(ue)


@settings(max_examples=300, deadline=None)
@given(
    mode=st.sampled_from(["meld-de", "meld-me"]),
    d_tbs=st.integers(0, 10_000),
    n_harq=st.integers(1, 16),
    t_pdu=st.integers(60, 9000),
    txq=st.integers(0, 2**32 - 1),
    q_th=st.integers(0, 2**32 - 1),
)
def test_kernel_agrees_with_algorithm_2(
    kernel: MeldKernel, mode: str, d_tbs: int, n_harq: int, t_pdu: int, txq: int, q_th: int
) -> None:
    verdict = decide(kernel, CcaMode.parse(mode), fresh(d_tbs, txq, q_th, n_harq), t_pdu)
    expected = notify_cca(mode, d_tbs, n_harq, t_pdu, txq, q_th)
    assert verdict is (Verdict.NOTIFY if expected else Verdict.SUPPRESS)


# --- MELD-overflow's kept window at a radio loss (meld_drained, BPF_PROG_TEST_RUN) ---------


def drained(kernel: MeldKernel, cwnd: int, kept: int, rtt_min_us: int, srtt_us: int) -> int:
    args = DrainArgs(cwnd=cwnd, kept=kept, rtt_min_us=rtt_min_us, srtt_us=srtt_us)
    return kernel.drained(args)


def test_a_kept_loss_drains_the_windows_share_of_the_queue(kernel: MeldKernel) -> None:
    """cwnd x RTT_min / srtt within [Reno's halving, the kept window]."""
    infinite = 0x7FFFFFFF  # ssthresh in slow start
    # 60 segments, 25 ms path, 40 ms srtt: 15 ms of it is queue -> 60 x 25 / 40 = 37.5
    assert drained(kernel, 60, 60, 25_000, 40_000) == 37
    assert drained(kernel, 60, infinite, 25_000, 40_000) == 37  # slow start ends there
    # two flows of one UE see the same ratio: together they keep one BDP in flight
    assert drained(kernel, 30, 30, 25_000, 40_000) + drained(kernel, 30, 30, 25_000, 40_000) == 36
    # a deep queue: never below the plain response's halving (and never below 2 segments)
    assert drained(kernel, 60, 60, 25_000, 200_000) == 30
    assert drained(kernel, 3, 3, 25_000, 200_000) == 2
    # no queue, or no RTT sample yet: the kept window (MELD's silent retransmission)
    assert drained(kernel, 60, 60, 25_000, 25_000) == 60
    assert drained(kernel, 60, infinite, 0, 40_000) == infinite
    # never above the kept window
    assert drained(kernel, 60, 50, 25_000, 26_000) == 50


# --- RAPID's cwnd arithmetic alone (meld_rapid_cwnd, BPF_PROG_TEST_RUN) --------------------

U32_MAX = 2**32 - 1


def rapid_cwnd(kernel: MeldKernel, **kw: int) -> int:
    args = {"rate_Bps": 1_000_000, "rtt_us": 50_000, "rtt_extra_us": 0, "gain_pct": 100,
            "mss": 1448, "floor_cwnd": 4, "clamp": U32_MAX, **kw}  # fmt: skip
    return kernel.rapid_cwnd(RapidCwndArgs(**args))


def test_rapid_cwnd_is_one_bdp_in_segments(kernel: MeldKernel) -> None:
    assert rapid_cwnd(kernel) == 1_000_000 * 50_000 // 10**6 // 1448  # 34
    assert rapid_cwnd(kernel, gain_pct=150) == 1_000_000 * 50_000 * 150 // 10**8 // 1448
    assert rapid_cwnd(kernel, rtt_extra_us=50_000) == 69
    assert rapid_cwnd(kernel, rate_Bps=1000) == 4  # the floor
    assert rapid_cwnd(kernel, clamp=20) == 20


@pytest.mark.parametrize(
    ("edge", "want"),
    [
        # A quotient above 2^32 segments must clamp, not wrap to an arbitrary u32.
        ({"rate_Bps": 2**36, "rtt_us": 2**26, "mss": 1}, U32_MAX),
        (
            {
                "rate_Bps": 2**64 - 1,
                "rtt_us": U32_MAX,
                "rtt_extra_us": U32_MAX,
                "gain_pct": U32_MAX,
                "mss": 1,
            },
            U32_MAX,
        ),
        ({"rate_Bps": 2**64 - 1, "rtt_us": U32_MAX, "mss": 1448, "clamp": 10_000}, 10_000),
        ({"rate_Bps": 10**9, "rtt_us": 10**7, "mss": 0}, U32_MAX),  # no MSS yet: no division by 0
        ({"rate_Bps": 0, "rtt_us": 0}, 4),
    ],
)
def test_rapid_cwnd_edges_clamp_instead_of_wrapping(
    kernel: MeldKernel, edge: dict[str, int], want: int
) -> None:
    assert rapid_cwnd(kernel, **edge) == want


@given(
    rate=st.integers(0, 2**36), rtt=st.integers(0, 2**25), gain=st.integers(0, 1000),
    mss=st.integers(1, 9000),
)  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_rapid_cwnd_matches_the_formula(
    kernel: MeldKernel, rate: int, rtt: int, gain: int, mss: int
) -> None:
    """Within the caps, exactly floor(floor(rate·RTT/10^6)·gain/100 / MSS), floored and
    clamped: never a wrapped value."""
    exact = rate * rtt // 10**6 * gain // 100 // mss
    want = min(max(exact, 4), U32_MAX)
    assert rapid_cwnd(kernel, rate_Bps=rate, rtt_us=rtt, gain_pct=gain, mss=mss) == want
