package ran

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
)

// ChannelConfig is a bearer's channel model.
//   - fixed: a constant CQI;
//   - trace: CQI from a (time, CQI) trace, piecewise constant, optionally looped; a row
//     may carry a third value, the capacity (Mbit/s) the cell carries from then on
//     (a TBS trace: as CapacityMbps, for that row), so capacity traces such as measured
//     mmWave throughput replay in the emulator;
//   - markov: two-state LoS/NLoS chain with exponential dwell times, a CQI (and
//     optionally a capacity) per state.
//
// BLER is the probability that one HARQ transmission fails; Loss drops packets after
// HARQ and RLC (an extra residual loss, like interference bursts HARQ cannot hide).
// CapacityMbps, when set, replaces the TBS table: the cell then carries exactly that
// rate (scaled by the PRBs given to the UE), as in capacity-based emulations.
type ChannelConfig struct {
	Model        string       `json:"model"`
	CQI          int          `json:"cqi"`
	BLER         float64      `json:"bler"`
	Loss         float64      `json:"loss"`
	CapacityMbps float64      `json:"capacity_mbps"`
	Trace        [][]float64  `json:"trace"` // [[t_seconds, cqi], ...] or [[t_seconds, cqi, capacity_mbps], ...]
	TraceLoop    bool         `json:"trace_loop"`
	LoS          *StateConfig `json:"los"`
	NLoS         *StateConfig `json:"nlos"`
	StartNLoS    bool         `json:"start_nlos"`
	BlockedCQI   int          `json:"blocked_cqi"` // CQI while blocked (fixed/trace); 0 = out of range
	// GilbertElliott, when set, makes radio loss bursty (on top of any model).
	GilbertElliott *GilbertElliott `json:"gilbert_elliott,omitempty"`
}

// GilbertElliott is a two-state bursty channel stepped once per TTI: Good → Bad with
// probability PGoodBad, Bad → Good with PBadGood (bursts last 1/PBadGood TTIs on average,
// a fraction PGoodBad/(PGoodBad+PBadGood) of the time). In Bad the BLER and residual loss
// are BadBLER and BadLoss, and the CQI BadCQI if set (0: the model's CQI), so HARQ's
// residual loss is correlated within a burst and the reported CQI follows the channel.
type GilbertElliott struct {
	PGoodBad float64 `json:"p_good_bad"`
	PBadGood float64 `json:"p_bad_good"`
	BadBLER  float64 `json:"bad_bler"`
	BadLoss  float64 `json:"bad_loss"`
	BadCQI   int     `json:"bad_cqi"`
}

func (g *GilbertElliott) validate() error {
	if !(g.PGoodBad > 0 && g.PGoodBad <= 1 && g.PBadGood > 0 && g.PBadGood <= 1) {
		return fmt.Errorf("gilbert_elliott: p_good_bad and p_bad_good must be in (0, 1]")
	}
	if !(g.BadBLER >= 0 && g.BadBLER < 1 && g.BadLoss >= 0 && g.BadLoss < 1) {
		return fmt.Errorf("gilbert_elliott: bad_bler and bad_loss must be in [0, 1)")
	}
	if g.BadCQI < 0 || g.BadCQI > 15 {
		return fmt.Errorf("gilbert_elliott: bad_cqi must be 0..15")
	}
	return nil
}

// StateConfig is one state of the LoS/NLoS chain.
type StateConfig struct {
	CQI          int     `json:"cqi"`
	CapacityMbps float64 `json:"capacity_mbps"`
	BLER         float64 `json:"bler"`
	MeanDwellMS  float64 `json:"mean_dwell_ms"`
}

func (c *ChannelConfig) validate() error {
	cqiOK := func(v int) bool { return v >= 0 && v <= 15 }
	probOK := func(v float64) bool { return v >= 0 && v < 1 }
	if !cqiOK(c.CQI) || !cqiOK(c.BlockedCQI) {
		return fmt.Errorf("cqi must be 0..15")
	}
	if !probOK(c.BLER) || !probOK(c.Loss) {
		return fmt.Errorf("bler and loss must be in [0, 1)")
	}
	if c.CapacityMbps < 0 {
		return fmt.Errorf("capacity_mbps must not be negative")
	}
	if c.GilbertElliott != nil {
		if err := c.GilbertElliott.validate(); err != nil {
			return err
		}
	}
	switch c.Model {
	case "fixed":
		return nil
	case "trace":
		if len(c.Trace) == 0 {
			return fmt.Errorf("trace model needs a non-empty trace")
		}
		for i, p := range c.Trace {
			if err := tracePointOK(p, i, c.Trace); err != nil {
				return err
			}
		}
		return nil
	case "markov":
		for name, s := range map[string]*StateConfig{"los": c.LoS, "nlos": c.NLoS} {
			if s == nil || s.MeanDwellMS <= 0 || !cqiOK(s.CQI) || !probOK(s.BLER) || s.CapacityMbps < 0 {
				return fmt.Errorf("markov model: %s needs cqi 0..15, mean_dwell_ms > 0, bler in [0,1)", name)
			}
		}
		return nil
	}
	return fmt.Errorf("channel model %q: want fixed, trace or markov", c.Model)
}

// tracePointOK checks row i of a trace: [t, cqi] or [t, cqi, capacity_mbps], times
// increasing, an integer CQI 0..15, a capacity not negative.
func tracePointOK(p []float64, i int, tr [][]float64) error {
	if len(p) != 2 && len(p) != 3 {
		return fmt.Errorf("trace point %d (%v): want [t, cqi] or [t, cqi, capacity_mbps]", i, p)
	}
	if !(p[1] >= 0 && p[1] <= 15) || p[1] != math.Trunc(p[1]) || (i > 0 && p[0] < tr[i-1][0]) {
		return fmt.Errorf("trace point %d (%v): want increasing times and integer CQI 0..15", i, p)
	}
	if len(p) == 3 && !(p[2] >= 0) {
		return fmt.Errorf("trace point %d (%v): capacity_mbps must not be negative", i, p)
	}
	return nil
}

// Radio is what the channel gives the MAC for one TTI.
type Radio struct {
	CQI          int
	BLER         float64
	Loss         float64
	CapacityMbps float64 // 0: use the TBS tables
	LoS          bool    // markov: current state
	Bad          bool    // Gilbert–Elliott: in a loss burst
}

// ChannelOverride is a run-time change from the control API; nil fields change nothing.
type ChannelOverride struct {
	CQI          *int     `json:"cqi,omitempty"`
	Blocked      *bool    `json:"blocked,omitempty"`
	BLER         *float64 `json:"bler,omitempty"`
	Loss         *float64 `json:"loss,omitempty"`
	CapacityMbps *float64 `json:"capacity_mbps,omitempty"`
	ClearCQI     bool     `json:"clear_cqi,omitempty"` // return to the model's CQI
	// RestartTrace starts a trace channel's trace again at the next TTI (time 0), so an
	// experiment can start a transfer at the trace's start; other models refuse it.
	RestartTrace bool `json:"restart_trace,omitempty"`
}

// Channel is the live channel state of one bearer. Step runs on the TTI thread; Apply
// and State may be called from API handlers.
type Channel struct {
	cfg ChannelConfig
	rng *rand.Rand

	mu       sync.Mutex // guards the overrides below
	cqiFixed *int
	blocked  bool
	bler     float64
	loss     float64
	capacity float64

	los        bool
	bad        bool    // Gilbert–Elliott state
	nextSwitch float64 // seconds
	last       Radio
	origin     float64 // the clock at the first Step
	stepped    bool
}

func newChannel(cfg ChannelConfig, seed uint64) *Channel {
	ch := &Channel{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		bler: cfg.BLER, loss: cfg.Loss, capacity: cfg.CapacityMbps, los: !cfg.StartNLoS}
	if cfg.Model == "markov" {
		ch.nextSwitch = ch.dwell()
	}
	return ch
}

// Apply validates and applies an override atomically: on error nothing changes.
func (ch *Channel) Apply(o ChannelOverride) error {
	if o.CQI != nil && (*o.CQI < 0 || *o.CQI > 15) {
		return fmt.Errorf("cqi %d outside 0..15", *o.CQI)
	}
	for _, p := range []*float64{o.BLER, o.Loss} {
		if p != nil && (*p < 0 || *p >= 1 || math.IsNaN(*p)) {
			return fmt.Errorf("bler and loss must be in [0, 1)")
		}
	}
	if o.CapacityMbps != nil && (*o.CapacityMbps < 0 || math.IsNaN(*o.CapacityMbps)) {
		return fmt.Errorf("capacity_mbps must not be negative")
	}
	if o.RestartTrace && ch.cfg.Model != "trace" {
		return fmt.Errorf("restart_trace: the channel model is %q, not trace", ch.cfg.Model)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if o.RestartTrace {
		ch.stepped = false // the next Step is the trace's time 0
	}
	if o.ClearCQI {
		ch.cqiFixed = nil
	}
	if o.CQI != nil {
		v := *o.CQI
		ch.cqiFixed = &v
	}
	if o.Blocked != nil {
		ch.blocked = *o.Blocked
	}
	if o.BLER != nil {
		ch.bler = *o.BLER
	}
	if o.Loss != nil {
		ch.loss = *o.Loss
	}
	if o.CapacityMbps != nil {
		ch.capacity = *o.CapacityMbps
	}
	return nil
}

// Step advances the model to time t (seconds) and returns this TTI's radio. The model's
// time counts from the first Step (the emulator's first TTI): the TTI clock reads
// CLOCK_MONOTONIC, and a model on that clock would depend on the host's uptime (a Markov
// chain would have drawn its dwell times up to it), so a seed would not give the same
// channel twice.
func (ch *Channel) Step(t float64) Radio {
	ch.mu.Lock()
	if !ch.stepped {
		ch.origin, ch.stepped = t, true
	}
	t -= ch.origin
	r := Radio{CQI: ch.cfg.CQI, BLER: ch.bler, Loss: ch.loss, CapacityMbps: ch.capacity, LoS: true}
	switch ch.cfg.Model {
	case "trace":
		p := ch.tracePoint(t)
		r.CQI = int(p[1])
		if len(p) == 3 {
			r.CapacityMbps = p[2]
		}
	case "markov":
		ch.stepMarkov(t)
		s := ch.cfg.LoS
		if !ch.los {
			s = ch.cfg.NLoS
		}
		r.CQI, r.LoS = s.CQI, ch.los
		if s.BLER > 0 {
			r.BLER = s.BLER
		}
		if s.CapacityMbps > 0 {
			r.CapacityMbps = s.CapacityMbps
		}
	}
	if ge := ch.cfg.GilbertElliott; ge != nil {
		ch.stepGilbertElliott(ge, &r)
	}
	if ch.cqiFixed != nil {
		r.CQI = *ch.cqiFixed
	}
	if ch.blocked && ch.cfg.Model != "markov" {
		r.CQI = ch.cfg.BlockedCQI
	}
	ch.last = r
	ch.mu.Unlock()
	return r
}

// Last is the radio of the last TTI.
func (ch *Channel) Last() Radio {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.last
}

// Blocked tells whether blockage is forced on.
func (ch *Channel) Blocked() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.blocked
}

// tracePoint is the trace row in force at time t (the first before the trace starts).
func (ch *Channel) tracePoint(t float64) []float64 {
	tr := ch.cfg.Trace
	if span := tr[len(tr)-1][0]; ch.cfg.TraceLoop && span > 0 {
		t = math.Mod(t, span)
	}
	i := sort.Search(len(tr), func(i int) bool { return tr[i][0] > t })
	if i == 0 {
		return tr[0]
	}
	return tr[i-1]
}

// stepMarkov switches state when the exponential dwell time is over; blockage holds NLoS.
func (ch *Channel) stepMarkov(t float64) {
	if ch.blocked {
		ch.los = false
		ch.nextSwitch = t + ch.dwell()
		return
	}
	for t >= ch.nextSwitch {
		ch.los = !ch.los
		ch.nextSwitch += ch.dwell()
	}
}

func (ch *Channel) dwell() float64 {
	mean := ch.cfg.LoS.MeanDwellMS
	if !ch.los {
		mean = ch.cfg.NLoS.MeanDwellMS
	}
	return ch.rng.ExpFloat64() * mean / 1000
}

// stepGilbertElliott moves the burst state one TTI on and applies the Bad state's radio.
func (ch *Channel) stepGilbertElliott(ge *GilbertElliott, r *Radio) {
	flip := ge.PGoodBad
	if ch.bad {
		flip = ge.PBadGood
	}
	if ch.rng.Float64() < flip {
		ch.bad = !ch.bad
	}
	if !ch.bad {
		return
	}
	r.Bad, r.BLER, r.Loss = true, ge.BadBLER, ge.BadLoss
	if ge.BadCQI > 0 {
		r.CQI = ge.BadCQI
	}
}

// fail draws one HARQ transmission outcome.
func (ch *Channel) fail(bler float64) bool { return bler > 0 && ch.rng.Float64() < bler }
