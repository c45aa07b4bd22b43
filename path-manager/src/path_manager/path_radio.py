"""Per-path radio state from the RNIS feed: capacity, LoS/NLoS, dwell-time estimates.

- Capacity: the rate the cell gives the UE when scheduled (``dl_tbs_bps``, the adapter's
  conversion of the TBS per TTI), smoothed by an EWMA kept per state, so the predictor
  gets C_LoS and C_NLoS of each path; until a state has been seen scheduled, the cell's
  rate at the reported CQI (``cqi_capacity_bps`` = TBS(MCS(CQI), cell PRBs)/TTI) stands in.
- LoS/NLoS: wideband CQI with hysteresis: LoS at or above ``los_cqi``, NLoS at or below
  ``nlos_cqi``, unchanged in between, and a state must hold ``min_dwell`` before it counts.
- Dwell times: rates μ̂ (LoS→NLoS) and λ̂ (NLoS→LoS) = transitions / time in the state, with
  exponential forgetting and the research's means (3 s LoS, 2.5 s NLoS) as prior
  pseudo-observations, so few observations stay close to the priors.
- Stale feed (the last measurement, by its own time, older than ``stale_after``): the
  priors and the last known state; an unknown or stale RLC queue is no information
  (``mec_common.radio_view``'s policy), so the path adds nothing to the queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mec_common.bus.rnis import RnisMeasurement
from mec_common.radio_view import is_fresh, known
from path_manager.predictor import PathState


@dataclass(frozen=True)
class RadioSettings:
    los_cqi: int = 10
    nlos_cqi: int = 6
    min_dwell: float = 0.030  # s
    capacity_alpha: float = 0.2  # EWMA weight of a new capacity sample
    prior_los: float = 3.0  # s, mean LoS time prior
    prior_nlos: float = 2.5  # s, mean NLoS time prior
    prior_weight: float = 2.0  # pseudo-transitions the priors are worth
    memory: float = 60.0  # s, time constant of the forgetting
    stale_after: float = 0.5  # s without a sample
    nlos_capacity_ratio: float = 0.111  # C_NLoS / C_LoS until both states were seen
    packet_bytes: int = 1500


@dataclass
class _StateTime:
    transitions: float = 0.0
    seconds: float = 0.0

    def decay(self, factor: float) -> None:
        self.transitions *= factor
        self.seconds *= factor


@dataclass
class PathRadio:
    """What the RNIS feed says about one path (one cell of one UE)."""

    id: str
    cell: str | None = None
    in_los: bool = True
    capacity_los: float | None = None  # bit/s
    capacity_nlos: float | None = None
    measured_at: float | None = None  # the last measurement's own time, monotonic seconds
    samples: int = 0
    rlc_queue_bytes: int | None = None  # the UE's RLC queues in this cell (all DRBs); unknown
    _candidate: bool | None = None
    _candidate_since: float = 0.0
    _state_since: float | None = None
    _los: _StateTime = field(default_factory=_StateTime)
    _nlos: _StateTime = field(default_factory=_StateTime)
    _last_decay: float | None = None
    _tbs_seen: dict[bool, bool] = field(default_factory=lambda: {True: False, False: False})

    def update(
        self, m: RnisMeasurement, now: float, s: RadioSettings, measured_at: float | None = None
    ) -> None:
        """Take ``m``, received at ``now``; ``measured_at`` is when the RAN measured it, on
        the same clock (``radio_view.measured_ns``; default: ``now``)."""
        self.cell, self.samples = m.cell, self.samples + 1
        self.measured_at = now if measured_at is None else measured_at
        self.rlc_queue_bytes = m.rlc_queue_bytes
        self._classify(m.wb_cqi, now, s)
        self._capacity(m, s)

    def radio_queue(self, now: float, s: RadioSettings) -> int | None:
        """Bytes waiting in this cell's RLC queues for the UE; None if unknown or stale."""
        if self.measured_at is None:
            return None
        return known(self.rlc_queue_bytes, _ns(self.measured_at), _ns(now), s.stale_after)

    def _classify(self, cqi: int | None, now: float, s: RadioSettings) -> None:
        if self._state_since is None:
            self._state_since = self._last_decay = now
        if cqi is None:
            return
        observed = True if cqi >= s.los_cqi else False if cqi <= s.nlos_cqi else self.in_los
        if observed == self.in_los:
            self._candidate = None
            return
        if self._candidate is not observed:
            self._candidate, self._candidate_since = observed, now
            return
        if now - self._candidate_since >= s.min_dwell:
            self._account(self._candidate_since, s, transition=True)
            self.in_los, self._candidate = observed, None
            self._state_since = self._candidate_since

    def _account(self, until: float, s: RadioSettings, *, transition: bool) -> None:
        assert self._state_since is not None and self._last_decay is not None
        factor = math.exp(-(until - self._last_decay) / s.memory)
        self._los.decay(factor)
        self._nlos.decay(factor)
        self._last_decay = until
        stats = self._los if self.in_los else self._nlos
        stats.seconds += max(until - self._state_since, 0.0)
        stats.transitions += 1.0 if transition else 0.0
        self._state_since = until

    def _capacity(self, m: RnisMeasurement, s: RadioSettings) -> None:
        """EWMA per state of the TBS the cell gives the UE per TTI (what it really carries).

        Before the first scheduled TTI in a state (an idle or inactive path) the estimate is
        the cell's rate at the reported CQI, ``cqi_capacity_bps``; TBS samples replace it.
        """
        los = self.in_los
        name = "capacity_los" if los else "capacity_nlos"
        old = getattr(self, name)
        if m.dl_tbs_bps is not None and m.dl_tbs_bps > 0:
            sample = float(m.dl_tbs_bps)
            if not self._tbs_seen[los]:
                self._tbs_seen[los], old = True, None  # the first TBS replaces the CQI guess
        elif not self._tbs_seen[los] and m.cqi_capacity_bps is not None:
            sample = float(m.cqi_capacity_bps)
        else:
            return
        new = sample if old is None else (1 - s.capacity_alpha) * old + s.capacity_alpha * sample
        setattr(self, name, float(new))

    def stale(self, now: float, s: RadioSettings) -> bool:
        return self.measured_at is None or not is_fresh(
            _ns(self.measured_at), _ns(now), s.stale_after
        )

    def rates(self, now: float, s: RadioSettings) -> tuple[float, float]:
        """(λ̂ NLoS→LoS, μ̂ LoS→NLoS) in 1/s; the priors when the feed is stale."""
        if self.stale(now, s) or self._state_since is None:
            return 1 / s.prior_nlos, 1 / s.prior_los
        los, nlos = (
            _StateTime(self._los.transitions, self._los.seconds),
            _StateTime(self._nlos.transitions, self._nlos.seconds),
        )
        (los if self.in_los else nlos).seconds += max(now - self._state_since, 0.0)
        w = s.prior_weight
        to_nlos = (los.transitions + w) / (los.seconds + w * s.prior_los)
        to_los = (nlos.transitions + w) / (nlos.seconds + w * s.prior_nlos)
        return to_los, to_nlos

    def model(self, now: float, s: RadioSettings) -> PathState | None:
        """The predictor's view in packets/s, or None before any capacity was seen."""
        c_los, c_nlos = self.capacity_los, self.capacity_nlos
        if c_los is None and c_nlos is None:
            return None
        if c_los is None:
            c_los = c_nlos / s.nlos_capacity_ratio if c_nlos else 0.0
        if c_nlos is None:
            c_nlos = c_los * s.nlos_capacity_ratio
        to_los, to_nlos = self.rates(now, s)
        bits = 8 * s.packet_bytes
        return PathState(c_los / bits, c_nlos / bits, to_los, to_nlos, self.in_los)


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)
