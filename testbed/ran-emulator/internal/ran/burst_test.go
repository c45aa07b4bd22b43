package ran

import (
	"fmt"
	"math"
	"testing"
)

// The Gilbert–Elliott chain has the configured burst statistics: mean Bad and Good run
// lengths 1/p_bad_good and 1/p_good_bad TTIs, Bad a fraction p_gb/(p_gb+p_bg) of the time.
func TestGilbertElliottBurstStatistics(t *testing.T) {
	const pGB, pBG, ttis = 0.01, 0.2, 400_000
	ch := newChannel(ChannelConfig{Model: "fixed", CQI: 15,
		GilbertElliott: &GilbertElliott{PGoodBad: pGB, PBadGood: pBG, BadBLER: 0.5, BadCQI: 7}}, 42)
	var runs [2][]int // [good, bad] run lengths
	bad, run, inBad := false, 0, 0
	for i := range ttis {
		r := ch.Step(float64(i) / 1000)
		if r.Bad != (r.CQI == 7) || r.Bad != (r.BLER == 0.5) {
			t.Fatalf("TTI %d: Bad state not applied: %+v", i, r)
		}
		if r.Bad {
			inBad++
		}
		if i > 0 && r.Bad != bad {
			runs[b2i(bad)] = append(runs[b2i(bad)], run)
			run = 0
		}
		bad = r.Bad
		run++
	}
	mean := func(xs []int) float64 {
		s := 0
		for _, x := range xs {
			s += x
		}
		return float64(s) / float64(len(xs))
	}
	// run lengths are geometric: std ≈ mean, so the mean's relative error is ~1/sqrt(n)
	for state, want := range []float64{1 / pGB, 1 / pBG} {
		n := float64(len(runs[state]))
		if got := mean(runs[state]); math.Abs(got-want) > 5*want/math.Sqrt(n) {
			t.Errorf("state %d: mean run %.2f TTIs over %.0f runs, want %.2f", state, got, n, want)
		}
	}
	if f, want := float64(inBad)/ttis, pGB/(pGB+pBG); math.Abs(f-want) > 0.15*want {
		t.Errorf("Bad %.4f of the time, want %.4f", f, want)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Through HARQ and RLC, the bursts make residual loss correlated: a packet after a lost
// one is lost far more often than on average (i.i.d. loss would give the same rate).
func TestGilbertElliottLossComesInBursts(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, `,"harq":{"max_retx":1}`, 0,
		`{"cqi":15,"bler":0.01,"gilbert_elliott":{"p_good_bad":0.005,"p_bad_good":0.1,"bad_bler":0.9}}`))
	b := e.UEs[0].Bearers[0]
	const pkts = 40_000
	got := make([]bool, pkts)
	for tti := int64(0); tti < pkts+100; tti++ {
		if tti < pkts {
			e.Inject(udp(1, 200, uint32(tti), 1), tti*ms) // one packet per TB
		}
		e.Step(tti * ms)
		for _, p := range b.Delivered(tti * ms) {
			got[seqOf(p)] = true
		}
	}
	lost, afterLoss, lostAfterLoss := 0, 0, 0
	for i := range got {
		if got[i] {
			continue
		}
		lost++
		if i+1 < pkts {
			afterLoss++
			if !got[i+1] {
				lostAfterLoss++
			}
		}
	}
	p, pNext := float64(lost)/pkts, float64(lostAfterLoss)/float64(afterLoss)
	t.Logf("loss %.4f, after a loss %.4f (%d losses)", p, pNext, lost)
	if truth := e.Truth.Counts().Total[CauseRadio]; truth != uint64(lost) {
		t.Errorf("labelled radio drops %d, lost %d", truth, lost)
	}
	if lost < 200 || pNext < 5*p {
		t.Errorf("loss %.4f, after a loss %.4f: not bursty", p, pNext)
	}
}

func TestGilbertElliottValidation(t *testing.T) {
	for _, ge := range []string{`{"p_good_bad":0,"p_bad_good":0.1}`, `{"p_good_bad":0.1,"p_bad_good":1.5}`,
		`{"p_good_bad":0.1,"p_bad_good":0.1,"bad_bler":1}`, `{"p_good_bad":0.1,"p_bad_good":0.1,"bad_cqi":16}`} {
		c := fmt.Sprintf(oneUE, "", 0, `{"cqi":15,"gilbert_elliott":`+ge+`}`)
		if _, err := ParseConfig([]byte(c)); err == nil {
			t.Errorf("%s accepted", ge)
		}
	}
}
