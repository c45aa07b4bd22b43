package ran

import (
	"fmt"
	"math"
	"testing"

	"mts.invalid/suite/services/common/go/threegpp"
)

// Saturated, a 25-PRB cell at fixed CQI carries exactly TBS bytes per TTI.
func TestSaturatedThroughputIsTBS(t *testing.T) {
	for _, cqi := range []int{15, 9, 4} {
		e := testEmu(t, fmt.Sprintf(oneUE, "", 0, fmt.Sprintf(`{"cqi":%d}`, cqi)))
		b := e.UEs[0].Bearers[0]
		want, _ := threegpp.LTETBSBytesForCQI(cqi, 25)
		delivered := 0
		for tti := int64(0); tti < 1000; tti++ {
			for b.QueueBytes()+b.InboxBytes() < 200_000 {
				e.Inject(udp(1, 1500, 0, 1), tti*ms)
			}
			e.Step(tti * ms)
			for _, p := range b.Delivered(tti * ms) {
				delivered += p.N
			}
		}
		// the last TTI's partial packet is still in flight: allow one packet
		if got := float64(delivered) / 1000; math.Abs(got-float64(want)) > 1500.0/1000 {
			t.Errorf("CQI %d: %.1f bytes/TTI, want TBS %d", cqi, got, want)
		}
	}
}

// With BLER p and N retransmissions, RLC UM loses a TB with probability p^(N+1).
func TestHARQResidualLoss(t *testing.T) {
	const p, n, pkts = 0.5, 2, 20000
	e := testEmu(t, fmt.Sprintf(oneUE, `,"harq":{"max_retx":2}`, 0, `{"cqi":15,"bler":0.5}`))
	b := e.UEs[0].Bearers[0]
	for tti := int64(0); tti < pkts+100; tti++ {
		if tti < pkts {
			e.Inject(udp(1, 200, uint32(tti), 1), tti*ms) // one packet per TB
		}
		e.Step(tti * ms)
	}
	lost := float64(b.C.DLResidualLostPkts.Load()) / pkts
	want := math.Pow(p, n+1)
	sigma := math.Sqrt(want * (1 - want) / pkts)
	if math.Abs(lost-want) > 4*sigma {
		t.Errorf("residual loss %.4f, want %.4f ± %.4f", lost, want, 4*sigma)
	}
	newTBs := float64(b.C.TBs.Load() - b.C.TBRetx.Load())
	if f := float64(b.C.TBFailures.Load()) / newTBs; math.Abs(f-want) > 4*math.Sqrt(want*(1-want)/newTBs) {
		t.Errorf("TB failure rate %.4f, want %.4f", f, want)
	}
}

// HARQ retransmissions come one HARQ RTT (8 TTIs) later, and RLC delivers in order:
// packets sent after a failed TB wait for its retransmission.
func TestHARQRetransmissionTimingAndInOrderDelivery(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 5, `{"cqi":15}`))
	b := e.UEs[0].Bearers[0]
	ch := b.Channel()
	var got []uint32
	var times []int64
	for tti := int64(0); tti < 40; tti++ {
		now := tti * ms
		if tti < 3 {
			e.Inject(udp(1, 1000, uint32(tti), 1), now)
		}
		bler := 0.0
		if tti == 0 {
			bler = 0.999999 // the first TB fails once
		}
		ch.Apply(ChannelOverride{BLER: &bler})
		e.Step(now)
		for _, p := range b.Delivered(now) {
			got = append(got, seqOf(p))
			times = append(times, now)
		}
	}
	if fmt.Sprint(got) != "[0 1 2]" {
		t.Fatalf("delivery order %v, want [0 1 2]", got)
	}
	// TB 0 sent at TTI 0 fails, retransmitted at TTI 8, delivered at 8 + 5 ms delay;
	// packets 1 and 2 (TTIs 1, 2) wait for it.
	for i, at := range times {
		if at != 13*ms {
			t.Errorf("packet %d delivered at %d ms, want 13 ms", i, at/ms)
		}
	}
	if b.C.TBRetx.Load() != 1 {
		t.Errorf("%d retransmissions, want 1", b.C.TBRetx.Load())
	}
}

// RLC AM retransmits a block that failed every HARQ attempt: nothing is lost.
func TestRLCAMRecoversHARQFailures(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, `,"harq":{"max_retx":1},"rlc":{"mode":"am","am_retx_delay_ms":10}`, 0,
		`{"cqi":15,"bler":0.6}`))
	b := e.UEs[0].Bearers[0]
	delivered := 0
	for tti := int64(0); tti < 3000; tti++ {
		if tti < 1000 {
			e.Inject(udp(1, 300, uint32(tti), 1), tti*ms)
		}
		e.Step(tti * ms)
		delivered += len(b.Delivered(tti * ms))
	}
	if b.C.TBFailures.Load() == 0 {
		t.Fatal("no HARQ failure happened; the test needs some")
	}
	if delivered != 1000 || b.C.DLResidualLostPkts.Load() != 0 {
		t.Errorf("delivered %d of 1000, lost %d", delivered, b.C.DLResidualLostPkts.Load())
	}
}

// A packet spanning two TBs is delivered when its last byte is, not before.
func TestSegmentDeliveredWithLastByte(t *testing.T) {
	// CQI 1 on 25 PRB: TBS is small, so a 1500-byte packet needs several TTIs
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0, `{"cqi":1}`))
	b := e.UEs[0].Bearers[0]
	tbs, _ := threegpp.LTETBSBytesForCQI(1, 25)
	e.Inject(udp(1, 1500, 7, 1), 0)
	need := int64(math.Ceil(1500 / float64(tbs)))
	for tti := int64(0); tti < need+2; tti++ {
		e.Step(tti * ms)
		if d := b.Delivered(tti * ms); len(d) > 0 {
			if tti != need-1 {
				t.Errorf("delivered at TTI %d, want %d (TBS %d B)", tti, need-1, tbs)
			}
			return
		}
	}
	t.Fatal("never delivered")
}

const twoUEs = `{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000,"prb":25,"scheduler":"%s"}],
 "ues":[{"name":"ue1","imsi":"1","bearers":[{"bs_id":10000,"rnti":100,"ip":"10.30.0.1","tun":{"name":"a"},"channel":{"cqi":%d}}]},
        {"name":"ue2","imsi":"2","bearers":[{"bs_id":10000,"rnti":101,"ip":"10.30.0.2","tun":{"name":"b"},"channel":{"cqi":%d}}]}]}`

func saturate(e *Emulator, ttis int64) []int {
	served := make([]int, len(e.UEs))
	for tti := int64(0); tti < ttis; tti++ {
		for i, ue := range e.UEs {
			b := ue.Bearers[0]
			for b.QueueBytes()+b.InboxBytes() < 100_000 {
				e.Inject(udp(byte(i+1), 1500, 0, 1), tti*ms)
			}
		}
		e.Step(tti * ms)
		for i, ue := range e.UEs {
			for _, p := range ue.Bearers[0].Delivered(tti * ms) {
				served[i] += p.N
			}
		}
	}
	return served
}

// Round robin gives backlogged UEs equal PRBs: throughput in proportion to their TBS.
func TestRoundRobinSharesPRBs(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(twoUEs, "rr", 15, 9))
	served := saturate(e, 2000)
	prbs := []uint64{e.UEs[0].Bearers[0].C.PRBs.Load(), e.UEs[1].Bearers[0].C.PRBs.Load()}
	if d := math.Abs(float64(prbs[0])-float64(prbs[1])) / float64(prbs[0]); d > 0.02 {
		t.Errorf("PRBs %v: not an equal share", prbs)
	}
	if served[0] <= served[1] {
		t.Errorf("served %v: the CQI 15 UE should carry more on equal PRBs", served)
	}
}

// Proportional fair serves both UEs; with equal channels it splits the cell evenly.
func TestProportionalFair(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(twoUEs, "pf", 12, 12))
	served := saturate(e, 2000)
	if r := float64(served[0]) / float64(served[1]); r < 0.95 || r > 1.05 {
		t.Errorf("served %v with equal channels: ratio %.3f, want ~1", served, r)
	}
	e = testEmu(t, fmt.Sprintf(twoUEs, "pf", 15, 5))
	served = saturate(e, 2000)
	if served[1] == 0 {
		t.Errorf("PF starved the weak UE: %v", served)
	}
	full15, _ := threegpp.LTETBSBytesForCQI(15, 25)
	full5, _ := threegpp.LTETBSBytesForCQI(5, 25)
	// PF in time shares: each UE gets about half the TTIs, so about half its full rate
	for i, full := range []int{full15, full5} {
		if f := float64(served[i]) / 2000 / float64(full); f < 0.4 || f > 0.6 {
			t.Errorf("UE %d got %.2f of its full-cell rate, want ~0.5", i, f)
		}
	}
}

// The channel's extra residual loss drops about that fraction of packets.
func TestChannelLoss(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0, `{"cqi":15,"loss":0.1}`))
	b := e.UEs[0].Bearers[0]
	for tti := int64(0); tti < 10000; tti++ {
		e.Inject(udp(1, 200, 0, 1), tti*ms)
		e.Step(tti * ms)
	}
	if f := float64(b.C.DLChannelLossPkts.Load()) / 10000; math.Abs(f-0.1) > 0.015 {
		t.Errorf("lost %.3f, want 0.1", f)
	}
}

// A seed gives the same channel whatever the clock reads at the emulator's start (the TTI
// clock is CLOCK_MONOTONIC: the host's uptime).
func TestMarkovChannelCountsFromItsStart(t *testing.T) {
	config := fmt.Sprintf(oneUE, "", 0,
		`{"model":"markov","los":{"cqi":15,"mean_dwell_ms":300},"nlos":{"cqi":3,"mean_dwell_ms":200}}`)
	early := testEmu(t, config).UEs[0].Bearers[0].Channel()
	late := testEmu(t, config).UEs[0].Bearers[0].Channel()
	flips, prev := 0, true
	for i := 0; i < 20000; i++ {
		a, b := early.Step(float64(i)/1000), late.Step(43210.5+float64(i)/1000)
		if a.LoS != b.LoS {
			t.Fatalf("TTI %d: LoS %v started at 0, %v started at 43210.5 s", i, a.LoS, b.LoS)
		}
		if a.LoS != prev {
			flips++
		}
		prev = a.LoS
	}
	if flips == 0 {
		t.Fatal("the channel never changed state")
	}
}

// The Markov channel spends time in LoS and NLoS in proportion to the mean dwell times.
func TestMarkovDwellTimes(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0,
		`{"model":"markov","los":{"cqi":15,"mean_dwell_ms":300},"nlos":{"cqi":3,"mean_dwell_ms":200}}`))
	ch := e.UEs[0].Bearers[0].Channel()
	los := 0
	const n = 600000
	for i := 0; i < n; i++ {
		if r := ch.Step(float64(i) / 1000); r.LoS {
			if r.CQI != 15 {
				t.Fatalf("LoS CQI %d", r.CQI)
			}
			los++
		}
	}
	if f := float64(los) / n; math.Abs(f-0.6) > 0.05 {
		t.Errorf("time in LoS %.3f, want 0.6", f)
	}
	blocked := true
	ch.Apply(ChannelOverride{Blocked: &blocked})
	if r := ch.Step(float64(n) / 1000); r.LoS || r.CQI != 3 {
		t.Errorf("blocked: %+v, want NLoS", r)
	}
}

func TestTraceChannel(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0, `{"model":"trace","trace":[[0,15],[1,7],[2.5,3]],"trace_loop":true}`))
	ch := e.UEs[0].Bearers[0].Channel()
	for _, c := range []struct {
		t   float64
		cqi int
	}{{0, 15}, {0.99, 15}, {1, 7}, {2.4, 7}, {2.5, 15}, {3.6, 7}} {
		if got := ch.Step(c.t).CQI; got != c.cqi {
			t.Errorf("t=%.2f: CQI %d, want %d", c.t, got, c.cqi)
		}
	}
}

// A capacity (TBS) trace: each row's capacity is what the cell carries from its time on,
// and restart_trace starts the trace again from its first row.
func TestCapacityTraceAndRestart(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0,
		`{"model":"trace","trace":[[0,15,40],[0.5,0,0],[0.7,12,20]]}`))
	b := e.UEs[0].Bearers[0]
	ch := b.Channel()
	delivered := map[string]int{}
	for tti := int64(0); tti < 1000; tti++ {
		for b.QueueBytes()+b.InboxBytes() < 200_000 {
			e.Inject(udp(1, 1000, 0, 1), tti*ms)
		}
		e.Step(tti * ms)
		phase := map[bool]string{true: "a", false: "c"}[tti < 500]
		if tti >= 500 && tti < 700 {
			phase = "b"
		}
		for _, p := range b.Delivered(tti * ms) {
			delivered[phase] += p.N
		}
	}
	// 40 Mbit/s = 5,000 B per 1 ms TTI; 20 Mbit/s = 2,500 B; blocked: nothing (HARQ and the
	// radio delay shift a few TTIs' worth across the boundaries)
	for phase, want := range map[string]float64{"a": 5000 * 500, "b": 0, "c": 2500 * 300} {
		if got := float64(delivered[phase]); math.Abs(got-want) > 5000*12 {
			t.Errorf("phase %s: %.0f bytes, want ~%.0f", phase, got, want)
		}
	}
	if r := ch.Last(); r.CQI != 12 || r.CapacityMbps != 20 {
		t.Errorf("after the trace: %+v, want CQI 12 at 20 Mbit/s", r)
	}
	if err := ch.Apply(ChannelOverride{RestartTrace: true}); err != nil {
		t.Fatal(err)
	}
	if r := ch.Step(5.0); r.CQI != 15 || r.CapacityMbps != 40 {
		t.Errorf("restarted at 5 s: %+v, want the first row", r)
	}
	if r := ch.Step(5.6); r.CQI != 0 {
		t.Errorf("0.6 s after the restart: %+v, want the blockage row", r)
	}
	fixed := testEmu(t, fmt.Sprintf(oneUE, "", 0, `{"cqi":9}`)).UEs[0].Bearers[0].Channel()
	if err := fixed.Apply(ChannelOverride{RestartTrace: true}); err == nil {
		t.Error("a fixed channel accepted restart_trace")
	}
	for _, bad := range []string{`[[0,15,-1]]`, `[[0,15,10,3]]`, `[[0]]`, `[[0,16,10]]`} {
		_, err := ParseConfig([]byte(fmt.Sprintf(oneUE, "", 0, `{"model":"trace","trace":`+bad+`}`)))
		if err == nil {
			t.Errorf("accepted trace %s", bad)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, bad := range []string{
		`{"dl_tun":{"name":"x"},"cells":[]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1,"prb":300}],"ues":[]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1,"scheduler":"magic"}],"ues":[]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1}],"ues":[{"bearers":[{"bs_id":2,"rnti":1,"ip":"10.0.0.1","tun":{"name":"a"}}]}]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1}],"ues":[{"bearers":[{"bs_id":1,"rnti":1,"ip":"10.0.0.1","tun":{"name":"a"},"channel":{"cqi":16}}]}]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1}],"ues":[{"bearers":[{"bs_id":1,"rnti":1,"ip":"10.0.0.1","tun":{"name":"a"},"queue":{"discipline":"red"}}]}]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1}],"unknown":1}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestChannelOverrideValidation(t *testing.T) {
	e := testEmu(t, fmt.Sprintf(oneUE, "", 0, `{"cqi":9}`))
	ch := e.UEs[0].Bearers[0].Channel()
	bad, cqi := 1.5, 3
	if err := ch.Apply(ChannelOverride{CQI: &cqi, BLER: &bad}); err == nil {
		t.Fatal("accepted bler 1.5")
	}
	if got := ch.Step(0).CQI; got != 9 {
		t.Errorf("a rejected change changed the CQI to %d", got)
	}
}

// An NR cell of numerology 1 has 0.5 ms slots and the TS 38.214 TBS.
func TestNRNumerology(t *testing.T) {
	e := testEmu(t, `{"dl_tun":{"name":"x"},"cells":[{"bs_id":20000,"rat":"nr","numerology":1,"prb":51}],
	 "ues":[{"name":"ue1","imsi":"1","bearers":[{"bs_id":20000,"rnti":100,"ip":"10.30.0.1","tun":{"name":"a"},"channel":{"cqi":15}}]}]}`)
	if e.TickNs() != 500_000 {
		t.Fatalf("tick %d ns, want 500 µs", e.TickNs())
	}
	b := e.UEs[0].Bearers[0]
	bits, _ := threegpp.NRTBSBits(51, threegpp.CQIToMCS(15), threegpp.DefaultNR)
	delivered := 0
	for slot := int64(0); slot < 2000; slot++ {
		now := slot * 500_000
		for b.QueueBytes()+b.InboxBytes() < 100_000 {
			e.Inject(udp(1, 1500, 0, 1), now)
		}
		e.Step(now)
		for _, p := range b.Delivered(now) {
			delivered += p.N
		}
	}
	if got, want := float64(delivered)/2000, float64(bits/8); math.Abs(got-want) > 1 {
		t.Errorf("%.1f bytes per slot, want TBS %.0f", got, want)
	}
}

// The bearer's queue discipline is the configured one: CoDel drops at the head of an
// overloaded RLC queue, FIFO only when the buffer is full.
func TestQueueDisciplineInTheBearer(t *testing.T) {
	for _, disc := range []string{"fifo", "codel", "fq_codel"} {
		e := testEmu(t, fmt.Sprintf(`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1000,"prb":25}],
		 "ues":[{"name":"ue1","imsi":"1","bearers":[{"bs_id":1000,"rnti":100,"ip":"10.30.0.1","tun":{"name":"a"},
		 "queue":{"discipline":%q},"channel":{"cqi":9}}]}]}`, disc))
		b := e.UEs[0].Bearers[0]
		for tti := int64(0); tti < 2000; tti++ {
			if tti%10 < 8 { // 1200 B/ms offered on a 967 B/ms link
				e.Inject(udp(1, 1500, 0, uint16(tti%3)), tti*ms)
			}
			e.Step(tti * ms)
			b.Delivered(tti * ms)
		}
		aqmDrops := b.C.DLAQMDropPkts.Load()
		if (disc == "fifo") != (aqmDrops == 0) {
			t.Errorf("%s: %d AQM drops", disc, aqmDrops)
		}
	}
}
