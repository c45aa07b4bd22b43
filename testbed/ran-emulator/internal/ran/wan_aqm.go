package ran

import (
	"fmt"
	"sync/atomic"
	"time"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
)

// wanAQM is the AQM of one WAN direction and the time of the tick it is serving (for the
// drop records).
type wanAQM struct {
	q           *aqm.DualPI2
	now         int64
	published   atomic.Pointer[WANAQMState] // a copy for readers on other threads
	nextPublish int64
}

// WANAQMState is what a WAN direction's DualPI2 did so far, for the API: its counters and
// its base probability p′ (p_C = p′², p_CL = k·p′).
type WANAQMState struct {
	aqm.DualPI2Stats
	Prob float64 `json:"p_prime"`
}

// publishEvery: how often the TTI thread copies the AQM's state for readers.
const publishEvery = int64(100 * time.Millisecond)

// setQueue builds the WAN direction's AQM when the configuration asks for one (issue 14:
// DualPI2 at the WAN bottleneck). The FIFO stays the default and its own code path.
func (w *WANDir) setQueue() error {
	switch w.cfg.Queue {
	case "", "fifo":
		return nil
	case "dualpi2":
		p := aqm.DualPI2Defaults()
		p.LimitBytes = w.cfg.Limit
		if k := w.cfg.DualPI2Coupling; k != nil {
			p.Coupling = *k
		}
		if us := w.cfg.DualPI2StepUS; us != nil {
			p.StepThresh = time.Duration(*us * float64(time.Microsecond))
		}
		a := &wanAQM{}
		a.q = aqm.NewDualPI2(p, func(pk *pkt.Packet, _ bool) {
			w.Drops.Add(1)
			w.lost(pk, a.now)
		})
		w.aqm = a
		return nil
	}
	return fmt.Errorf("wan.queue %q: want fifo or dualpi2", w.cfg.Queue)
}

// serveAQM is serve() through the AQM: enqueue what arrived, then dequeue as much as the
// rate allows this tick (the AQM drops or CE-marks at dequeue), then the delay line.
// Sojourn times are in ticks: an NR numerology 3 cell gives 125 µs ticks, which the 1 ms
// step threshold of DualPI2 needs (with LTE's 1 ms tick every L packet would be marked).
func (w *WANDir) serveAQM(now, tick int64, perTick float64, delay int64) {
	q := w.aqm.q
	w.aqm.now = now
	for p := w.inbox.Pop(); p != nil; p = w.inbox.Pop() {
		q.Enqueue(p, now)
	}
	unlimited := w.cfg.RateMbps == 0
	if !unlimited {
		w.credit = min(w.credit+perTick, 2*perTick+float64(pkt.BufSize))
	}
	for unlimited || w.credit > 0 {
		p := q.Dequeue(now)
		if p == nil {
			w.credit = min(w.credit, perTick)
			break
		}
		w.credit -= float64(p.N)
		w.toDelay(p, now+delay)
	}
	if n := w.delay.popDue(now+tick/2, w.out, nil); n > 0 {
		w.DelivPkts.Add(uint64(n))
		w.out.kick()
	}
	if now >= w.aqm.nextPublish {
		w.aqm.published.Store(&WANAQMState{DualPI2Stats: q.Stats, Prob: q.Prob()})
		w.aqm.nextPublish = now + publishEvery
	}
}

// AQMStats reports the WAN direction's DualPI2 counters and p′ as of at most
// publishEvery ago (nil without a DualPI2, or before its first tick).
func (w *WANDir) AQMStats() *WANAQMState {
	if w.aqm == nil {
		return nil
	}
	return w.aqm.published.Load()
}
