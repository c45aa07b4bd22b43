package ran

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"mts.invalid/suite/services/common/go/pkt"
)

// testWAN is one WAN direction without devices: its writer is never started, so what it
// delivers stays in the writer's queue in delivery order.
func testWAN(t *testing.T, queue string, reorderPct float64) *WANDir {
	t.Helper()
	cfg := &WANConfig{DelayMS: 30, Limit: 4 << 20, Queue: queue, ReorderPct: reorderPct}
	w := &WANDir{Name: "test", cfg: cfg, inbox: pkt.NewSPSC(inboxSize),
		out:  newWriter(nil, nil, func(int) { t.Fatal("writer queue full") }),
		lost: func(p *pkt.Packet, _ int64) { pkt.Put(p) }, rng: rand.New(rand.NewPCG(7, 7))}
	if err := w.setQueue(); err != nil {
		t.Fatal(err)
	}
	return w
}

// delivered sends n packets through w, one per 1 ms tick, and returns their sequence
// numbers in delivery order.
func delivered(w *WANDir, n int) []uint32 {
	var out []uint32
	drain := func() {
		for p := w.out.pending.Pop(); p != nil; p = w.out.pending.Pop() {
			out = append(out, seqOf(p))
			pkt.Put(p)
		}
	}
	for i := 0; i < n+100; i++ {
		now := int64(i) * ms
		if i < n {
			w.enqueue(udp(1, 200, uint32(i), 1000), now)
		}
		w.serve(now, ms)
		drain()
	}
	return out
}

// TestWANReorder: a reorder_pct share of the packets skips the 30 ms delay and overtakes
// the ~30 packets in it (netem's `delay 30ms reorder p`); the others keep their order;
// none is lost; both the FIFO and the DualPI2 paths.
func TestWANReorder(t *testing.T) {
	const n = 4000
	for _, queue := range []string{"fifo", "dualpi2"} {
		for _, pct := range []float64{0, 5} {
			t.Run(fmt.Sprintf("%s/%v%%", queue, pct), func(t *testing.T) {
				w := testWAN(t, queue, pct)
				order := delivered(w, n)
				if len(order) != n {
					t.Fatalf("delivered %d of %d", len(order), n)
				}
				early, maxAhead := 0, 0
				for i, seq := range order {
					ahead := 0 // later packets' positions it took: how far it overtook
					for _, later := range order[i+1:] {
						if later < seq {
							ahead++
						}
					}
					if ahead > 0 {
						early++
						maxAhead = max(maxAhead, ahead)
					}
				}
				if uint64(early) != w.Reordered.Load() {
					t.Fatalf("%d packets overtook others, %d counted as reordered", early, w.Reordered.Load())
				}
				want := float64(n) * pct / 100
				if sd := math.Sqrt(float64(n) * pct / 100 * (1 - pct/100)); math.Abs(float64(early)-want) > 5*sd+0.5 {
					t.Fatalf("%d reordered, want %.0f ± %.0f", early, want, 5*sd)
				}
				if maxAhead > 31 {
					t.Fatalf("a packet overtook %d others: more than the 30 ms delay holds", maxAhead)
				}
				if pct > 0 && maxAhead < 25 {
					t.Fatalf("reordered packets overtook at most %d others, want ~30", maxAhead)
				}
			})
		}
	}
}

// TestWANDualPI2Settings: dualpi2_coupling and dualpi2_step_us reach the queue (the
// defaults otherwise), bad values are refused, and the queue's counters are published.
func TestWANDualPI2Settings(t *testing.T) {
	w := testWAN(t, "dualpi2", 0)
	if p := w.aqm.q.Params(); p.Coupling != 2 || p.StepThresh != time.Millisecond {
		t.Fatalf("defaults: k %v, step %v", p.Coupling, p.StepThresh)
	}
	k, step := 0.0, 250.0
	w.cfg.DualPI2Coupling, w.cfg.DualPI2StepUS = &k, &step
	if err := w.setQueue(); err != nil {
		t.Fatal(err)
	}
	if p := w.aqm.q.Params(); p.Coupling != 0 || p.StepThresh != 250*time.Microsecond {
		t.Fatalf("k %v, step %v: want 0, 250µs", p.Coupling, p.StepThresh)
	}
	if len(delivered(w, 10)) != 10 {
		t.Fatal("not all delivered")
	}
	if s := w.AQMStats(); s == nil || s.CPackets != 10 || s.LPackets != 0 {
		t.Fatalf("published %+v, want 10 classic packets", s)
	}
	for _, bad := range []string{`"dualpi2_coupling":-1`, `"dualpi2_step_us":0`} {
		cfg := `{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000}],"ues":[],"wan":{` + bad + `}}`
		if _, err := ParseConfig([]byte(cfg)); err == nil {
			t.Fatalf("%s accepted", bad)
		}
	}
}

func TestWANReorderPctValidated(t *testing.T) {
	for _, pct := range []string{"-1", "100.5"} {
		cfg := `{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000}],"ues":[],"wan":{"reorder_pct":` + pct + `}}`
		if _, err := ParseConfig([]byte(cfg)); err == nil {
			t.Fatalf("reorder_pct %s accepted", pct)
		}
	}
}

// TestWANJitter: with jitter_ms the packets' delays spread within [delay - J, delay + J]
// (1 ms ticks), in order, none lost. Keeping order lifts the low end: a packet is not due
// before the one a millisecond ahead of it.
func TestWANJitter(t *testing.T) {
	w := testWAN(t, "fifo", 0)
	w.cfg.JitterMS = 10
	const n = 2000
	sent := map[uint32]int64{}
	var lo, hi int64 = math.MaxInt64, 0
	var last uint32
	for i := 0; i < n+100; i++ {
		now := int64(i) * ms
		if i < n {
			w.enqueue(udp(1, 200, uint32(i), 1000), now)
			sent[uint32(i)] = now
		}
		w.serve(now, ms)
		for p := w.out.pending.Pop(); p != nil; p = w.out.pending.Pop() {
			seq := seqOf(p)
			if seq < last {
				t.Fatalf("packet %d after %d: out of order", seq, last)
			}
			last = seq
			d := now - sent[seq]
			lo, hi = min(lo, d), max(hi, d)
			delete(sent, seq)
			pkt.Put(p)
		}
	}
	if len(sent) != 0 {
		t.Fatalf("%d packets not delivered", len(sent))
	}
	if lo > 27*ms || hi < 37*ms || lo < 19*ms || hi > 41*ms {
		t.Fatalf("delays %v..%v ms, want a spread within 20..40", lo/ms, hi/ms)
	}
}
