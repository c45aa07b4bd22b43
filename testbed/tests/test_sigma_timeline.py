"""The SIGMA timeline's phases read from constructed TCP_INFO samples (issue 15)."""

from __future__ import annotations

from mts_lab.sigma.timeline import UNSCALED_MAX, phases


def test_phases_find_the_first_window_and_the_bdps() -> None:
    bdp = 1_000_000
    # t, cwnd, bytes_sent, bytes_acked, snd_wnd, rwnd_limited_us
    samples = [
        [0.10, 855, 0, 1, UNSCALED_MAX, 0],
        [0.11, 855, 65_535, 1, UNSCALED_MAX, 5_000],  # the SYN-ACK's window holds it
        [0.22, 855, 600_000, 65_536, 2_500_000, 110_000],  # the first ACK opens it
        [0.30, 855, 1_200_000, 700_000, 2_500_000, 110_000],
        [0.40, 855, 2_000_000, 1_500_000, 2_500_000, 110_000],
    ]
    got = phases({"connect_s": 0.1, "duration_s": 0.45, "samples": samples}, bdp)
    assert got == {
        "connect_s": 0.1, "first_data_s": 0.11, "window_opened_s": 0.22,
        "rwnd_limited_s": 0.11, "sent_1bdp_s": 0.30, "sent_2bdp_s": 0.40, "duration_s": 0.45,
    }  # fmt: skip
    assert (
        phases({"connect_s": 0.1, "duration_s": 0.2, "samples": samples[:2]}, bdp)[
            "window_opened_s"
        ]
        is None
    )
