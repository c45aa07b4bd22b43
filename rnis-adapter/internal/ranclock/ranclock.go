// Package ranclock reads time from a RAN's report stream. It is the one owner of three
// things every consumer of the feed depends on:
//
//   - when a report was measured: the first time the adapter sees a new frame/subframe
//     (sfnSn) of a base station. FlexRAN's date_time is when the controller answered the
//     poll (it changes on every poll while sfnSn stays for a whole report period), so it
//     makes an old report look fresh and is not used;
//   - the report period: the time between two new sfnSn values, which is also the
//     uncertainty of the measurement time (the RAN can change at any point until the next
//     report) and what the adapter checks against its consumers' staleness bound;
//   - the TTI rate: subframes per second from the sfnSn progression. A simulated RAN (OAI's
//     RF simulator) does not run at 1 ms per TTI; every bytes-per-TTI to bits-per-second
//     conversion uses this rate (meas.Measurement.TTINs).
//
// How the sfnSn number packs frame and subframe depends on the source (SFNFormat).
package ranclock

import (
	"fmt"
	"sync"
	"time"
)

// SFNFormat is how a source writes sfnSn.
type SFNFormat int

const (
	// SFNDecimal is frame*10 + subframe: OAI's FlexRAN agent (flexran_get_sfn_sf in
	// openair2/ENB_APP/flexran_agent_ran_api.c) for the CQI reports, and the RAN emulator.
	SFNDecimal SFNFormat = iota
	// SFNPacked is frame<<4 | subframe (OAI's flexran_get_future_sfn_sf).
	SFNPacked
)

// ParseSFNFormat reads the setting RNIS_SFN_FORMAT.
func ParseSFNFormat(s string) (SFNFormat, error) {
	switch s {
	case "decimal":
		return SFNDecimal, nil
	case "packed":
		return SFNPacked, nil
	}
	return 0, fmt.Errorf("sfn format %q: want decimal (frame*10+subframe, OAI) or packed (frame<<4|subframe)", s)
}

// SubframesPerCycle is one SFN cycle: 1024 frames of 10 subframes.
const SubframesPerCycle = 10240

// NominalTTI is LTE's TTI.
const NominalTTI = time.Millisecond

// Split returns frame and subframe; ok is false for a value the format cannot produce.
func (f SFNFormat) Split(v int64) (frame, subframe int64, ok bool) {
	if v < 0 {
		return 0, 0, false
	}
	if f == SFNPacked {
		frame, subframe = v>>4, v&15
	} else {
		frame, subframe = v/10, v%10
	}
	return frame, subframe, frame < 1024 && subframe < 10
}

// index is the subframe's position in the SFN cycle (0..10239).
func (f SFNFormat) index(v int64) (int64, bool) {
	frame, sub, ok := f.Split(v)
	return frame*10 + sub, ok
}

// Reading is what the report stream says about one station's current report.
type Reading struct {
	MeasuredNs    int64         // when the report was measured (Unix ns, the adapter's clock)
	UncertaintyNs int64         // the report period: how far the RAN may have moved since
	ReportPeriod  time.Duration // measured; 0 until two reports were seen
	ReportSF      int64         // subframes between the last two reports; 0 until known
	TTI           time.Duration // measured TTI length (NominalTTI until measured)
	New           bool          // this poll brought a new report (a new sfnSn)
}

// Clock keeps one station state per base station. Safe for concurrent use.
type Clock struct {
	format SFNFormat
	mu     sync.Mutex
	st     map[int64]*station
}

// New returns a clock for a source writing sfnSn in the given format.
func New(format SFNFormat) *Clock { return &Clock{format: format, st: map[int64]*station{}} }

// Format is the source's sfnSn format.
func (c *Clock) Format() SFNFormat { return c.format }

// rateWindow is how long sfnSn progression is summed before the TTI rate is updated: a
// report's first-seen time is only known to a poll period, so short spans are noisy.
const rateWindow = 500 * time.Millisecond

// tolerance: a measured TTI rate within 3 % of nominal counts as nominal (real time).
const tolerance = 0.03

type station struct {
	sfn         int64 // index of the last report's sfnSn in the cycle
	seenNs      int64 // when that report was first seen
	period      time.Duration
	periodSF    int64
	minSF       int64         // fewest subframes between two reports since TakeShortest (0: none)
	minPeriod   time.Duration // shortest time between two reports since TakeShortest (0: none)
	winSF       int64         // subframes summed in the current rate window
	winStartNs  int64
	tti         time.Duration
	holMeasured bool
}

// Observe records a poll of station bsID whose report carries sfnSn (set=false: the
// source gave none) and returns the report's reading. observed is when the poll answered.
func (c *Clock) Observe(bsID int64, sfnSn int64, set bool, observed time.Time) Reading {
	now := observed.UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st[bsID]
	idx, ok := c.format.index(sfnSn)
	if !set || !ok {
		// no frame number: every poll is a new report, measured when it arrived
		if s == nil {
			s = &station{tti: NominalTTI}
			c.st[bsID] = s
		}
		return Reading{MeasuredNs: now, TTI: s.tti, New: true, UncertaintyNs: int64(s.period)}
	}
	if s == nil {
		// the first report seen may be of any age: it starts nothing but the next one
		s = &station{sfn: idx, seenNs: now, tti: NominalTTI}
		c.st[bsID] = s
		return s.reading(true)
	}
	if idx == s.sfn {
		return s.reading(false)
	}
	c.advance(s, idx, now)
	return s.reading(true)
}

// advance moves a station to a new report seen at now.
func (c *Clock) advance(s *station, idx, now int64) {
	steps := (idx - s.sfn + SubframesPerCycle) % SubframesPerCycle
	elapsed := time.Duration(now - s.seenNs)
	// A jump the wall clock cannot explain (an eNB restart reusing its bs_id, or a gap so
	// long that the cycle may have wrapped) restarts the measurement.
	if elapsed <= 0 || elapsed > 4*time.Second || time.Duration(steps)*NominalTTI > 8*elapsed+time.Second {
		*s = station{sfn: idx, seenNs: now, tti: NominalTTI}
		return
	}
	if s.winStartNs == 0 { // the previous report was the first seen: its time is unknown
		s.sfn, s.seenNs, s.winStartNs = idx, now, now
		return
	}
	s.period, s.periodSF = elapsed, steps
	if s.minSF == 0 || steps < s.minSF {
		s.minSF = steps
	}
	if s.minPeriod == 0 || elapsed < s.minPeriod {
		s.minPeriod = elapsed
	}
	s.winSF += steps
	s.sfn, s.seenNs = idx, now
	if span := time.Duration(now - s.winStartNs); span >= rateWindow && s.winSF > 0 {
		s.tti = nominalOr(span / time.Duration(s.winSF))
		s.winSF, s.winStartNs = 0, now
	}
}

// nominalOr returns the measured TTI, or the nominal one when they agree within tolerance.
func nominalOr(tti time.Duration) time.Duration {
	ratio := float64(tti) / float64(NominalTTI)
	if ratio > 1-tolerance && ratio < 1+tolerance {
		return NominalTTI
	}
	return tti
}

func (s *station) reading(fresh bool) Reading {
	return Reading{MeasuredNs: s.seenNs, UncertaintyNs: int64(s.period), ReportPeriod: s.period,
		ReportSF: s.periodSF, TTI: s.tti, New: fresh}
}

// Shortest is the shortest interval between two reports of a station over a window.
type Shortest struct {
	SF     int64         // subframes (0: fewer than two reports in the window)
	Period time.Duration // time, as the adapter saw it
}

// TakeShortest returns, per station, the shortest interval between two reports seen since
// the previous call, and starts a new window. The agent reports at least that often: a
// poll that comes late (a loaded machine) or one period of polling that spans several
// reports only ever makes an interval look longer.
func (c *Clock) TakeShortest() map[int64]Shortest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]Shortest, len(c.st))
	for id, s := range c.st {
		out[id] = Shortest{SF: s.minSF, Period: s.minPeriod}
		s.minSF, s.minPeriod = 0, 0
	}
	return out
}

// Forget drops a station's state (it disappeared from the statistics).
func (c *Clock) Forget(bsID int64) {
	c.mu.Lock()
	delete(c.st, bsID)
	c.mu.Unlock()
}

// Stations is a copy of every station's latest reading.
func (c *Clock) Stations() map[int64]Reading {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[int64]Reading, len(c.st))
	for id, s := range c.st {
		out[id] = s.reading(false)
	}
	return out
}

// HOLMeasured tells whether station bsID measures the RLC head-of-line delay: once it has
// reported a delay other than 0 (sawNonZero). OAI's agent always writes 0; until a source
// shows otherwise its 0 means "not measured".
func (c *Clock) HOLMeasured(bsID int64, sawNonZero bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st[bsID]
	if s == nil {
		return sawNonZero
	}
	s.holMeasured = s.holMeasured || sawNonZero
	return s.holMeasured
}
