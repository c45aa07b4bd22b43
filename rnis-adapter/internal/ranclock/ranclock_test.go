package ranclock

import (
	"testing"
	"time"
)

func TestSplitFormats(t *testing.T) {
	if f, s, ok := SFNDecimal.Split(3705); !ok || f != 370 || s != 5 {
		t.Errorf("decimal 3705 = %d/%d", f, s)
	}
	if f, s, ok := SFNPacked.Split(370<<4 | 5); !ok || f != 370 || s != 5 {
		t.Errorf("packed = %d/%d", f, s)
	}
	if _, _, ok := SFNPacked.Split(3<<4 | 12); ok {
		t.Error("packed subframe 12 accepted")
	}
	if _, _, ok := SFNDecimal.Split(10240); ok {
		t.Error("decimal frame 1024 accepted")
	}
	if _, err := ParseSFNFormat("hex"); err == nil {
		t.Error("unknown format accepted")
	}
}

// A RAN at 2 ms per TTI, reporting every 100 subframes and polled every 10 ms, across an
// SFN wrap; then an eNB restart that reuses the bs_id with an unrelated sfnSn.
func TestRateAcrossWrapAndRestart(t *testing.T) {
	c := New(SFNDecimal)
	t0 := time.Unix(1000, 0)
	var r Reading
	for poll := 0; poll < 300; poll++ { // 3 s
		now := t0.Add(time.Duration(poll) * 10 * time.Millisecond)
		sf := int64(10100 + (poll/20)*100) // a new report every 200 ms = 100 subframes
		r = c.Observe(7, sf%SubframesPerCycle, true, now)
	}
	if r.TTI < 1900*time.Microsecond || r.TTI > 2100*time.Microsecond {
		t.Errorf("TTI %v, want 2 ms", r.TTI)
	}
	if r.ReportSF != 100 || r.ReportPeriod != 200*time.Millisecond || r.UncertaintyNs != int64(200*time.Millisecond) {
		t.Errorf("period %v / %d subframes", r.ReportPeriod, r.ReportSF)
	}
	later := t0.Add(3010 * time.Millisecond)
	r = c.Observe(7, 5000, true, later) // 2500 subframes in 10 ms: not the same RAN
	if r.TTI != NominalTTI || r.ReportPeriod != 0 || r.MeasuredNs != later.UnixNano() {
		t.Errorf("after a restart: %+v", r)
	}
}

func TestNoFrameNumberMeansEveryPollIsNew(t *testing.T) {
	c := New(SFNDecimal)
	now := time.Unix(5, 0)
	if r := c.Observe(1, 0, false, now); !r.New || r.MeasuredNs != now.UnixNano() {
		t.Errorf("%+v", r)
	}
}
