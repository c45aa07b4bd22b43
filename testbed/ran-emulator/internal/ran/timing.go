package ran

import "sync/atomic"

// Timing is the histogram of TTI lateness (how late each tick started, 1 µs buckets).
type Timing struct {
	buckets [10001]atomic.Uint64 // last bucket: 10 ms or more
	Ticks   atomic.Uint64
	Skipped atomic.Uint64 // ticks given up after a stall longer than 100 TTIs
	MaxNs   atomic.Int64
}

func (t *Timing) record(lateNs int64) {
	us := max(lateNs/1000, 0)
	t.buckets[min(us, int64(len(t.buckets)-1))].Add(1)
	t.Ticks.Add(1)
	if lateNs > t.MaxNs.Load() {
		t.MaxNs.Store(lateNs)
	}
}

// Reset clears the histogram (e.g. after a benchmark's warm-up).
func (t *Timing) Reset() {
	for i := range t.buckets {
		t.buckets[i].Store(0)
	}
	t.Ticks.Store(0)
	t.Skipped.Store(0)
	t.MaxNs.Store(0)
}

// Percentile returns the q-quantile (0..1) of lateness in µs (upper bucket edge).
func (t *Timing) Percentile(q float64) int64 {
	total := uint64(0)
	for i := range t.buckets {
		total += t.buckets[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total-1)) + 1
	seen := uint64(0)
	for i := range t.buckets {
		seen += t.buckets[i].Load()
		if seen >= rank {
			return int64(i + 1)
		}
	}
	return int64(len(t.buckets))
}
