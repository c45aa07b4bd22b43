"""make bench-tunnel's verdict on the latency goal: only a run that carried the half load it
asked for measured it (real-time ends once held the sender to ~200 of 830 Mbit/s)."""

from mts_lab.tunnel.bench import latency_goal


def test_latency_goal_needs_the_load_that_was_asked_for() -> None:
    run = {"half_load_bps": 900e6, "half_load_sent_bps": 890e6, "added_latency_p99_ms": 0.2}
    assert latency_goal(run) == "met"
    assert latency_goal({**run, "added_latency_p99_ms": 0.6}) == "NOT met"
    assert latency_goal({**run, "half_load_sent_bps": 200e6}).startswith("not measured")
