"""The endpoints' spin guard under WAN reordering (root, BPF, the emulator's WAN stage).

client ─ MEC host ═ 20 ms each way, 1 % of the packets reordered ═ server. Without the
guard (the research's rule) the client follows reordered segments and sends spurious
spin edges itself, in order: the observer sees round trips far shorter than the path's
on the client's own packets, which no observer filter can tell from real ones. With the
guard (``spin_follows``) the client ignores old segments and the first beyond a hole, and
holds a new value sooner than 7/8 of the base RTT after its own edge (a segment that overtook
others would bring the edge early): the filtered spin RTT on its packets is the path's,
without short samples.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from l4s_support import NEEDS_ROOT

from mec_l4s.efm import Technique
from mec_l4s.observer import Kind, Observer, Rules, Sample
from mts_lab.l4s.bed import OBSERVER_OBJ, WanLine, marking, paced_download

DELAY_MS = 20.0
BASE_RTT_MS = 2 * DELAY_MS

pytestmark = [pytest.mark.netns, NEEDS_ROOT, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def line() -> Iterator[WanLine]:
    line = WanLine.create(DELAY_MS, reorder_pct=1.0)
    try:
        yield line
    finally:
        line.down()


def client_spin_rtts(line: WanLine, guard: bool) -> tuple[list[Sample], int]:
    """Spin e2e samples taken on the client's packets, and the client's guarded count."""
    observer = Observer.load(OBSERVER_OBJ, f"mts-obs-{line.name}")
    samples: list[Sample] = []
    try:
        observer.configure()
        observer.attach("m0", line.mec_ns)
        observer.attach("wan0", line.mec_ns)
        with marking(line, Technique.SPIN, spin_guard=guard) as (client, _server):
            paced_download(line, 3.0, on_tick=lambda: samples.extend(observer.poll()))
            guarded = client.counters()["spin_guarded"]
        samples += observer.poll()
    finally:
        observer.close()
    mine = [s for s in samples if s.kind == Kind.SPIN_E2E and s.from_client]
    return mine, guarded


@pytest.mark.parametrize("guard", [False, True])
def test_the_spin_guard_keeps_the_clients_wave(line: WanLine, guard: bool) -> None:
    samples, guarded = client_spin_rtts(line, guard)
    raw = [s.rtt_ms for s in samples if s.rules == Rules.RAW]
    filtered = [s.rtt_ms for s in samples if s.rules == Rules.FILTERED]
    assert len(raw) >= 10 and len(filtered) >= 10, (len(raw), len(filtered))
    if not guard:
        # the research's rule: reordered segments flip the client's own wave
        assert guarded == 0
        assert min(raw) < BASE_RTT_MS / 2, f"no spurious edge on the client's packets: {raw}"
    else:
        assert guarded >= 1, "no segment was held back by the guard"
        # p10, not minimum: a loaded host can still squeeze a single sample. Following the
        # newest segment (the guard until 26 Nov) took the edges that overtaking segments
        # brought early: p10 29 ms, min 20 ms on this line (p10 40.5 with spin_follows)
        p10 = sorted(filtered)[len(filtered) // 10]
        assert p10 >= BASE_RTT_MS * 0.95, f"filtered spin p10 {p10} ms with the guard"
