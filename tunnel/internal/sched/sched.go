// Package sched holds the tunnel's path schedulers. The engine asks one for a path each
// time the ingress queue has a packet; the scheduler picks among the usable paths whose
// congestion window has room (the pull model of research 003 §6: FQ-CoDel decides which
// flow goes next, the scheduler which path).
package sched

import (
	"fmt"
	"time"
)

// Path is what a scheduler knows of a path.
type Path struct {
	ID   byte
	SRTT time.Duration
	// Radio is the path's latest RNIS report (zero when none is fresh).
	RadioCapacityBps float64
	RadioQueueBytes  int
}

// Scheduler picks one of candidates (all usable, all with room, in id order) for a packet
// of size bytes.
type Scheduler interface {
	Name() string
	Pick(candidates []Path, size int) int // index into candidates
}

// Names lists the schedulers.
var Names = []string{"rr", "lowrtt", "rnis"}

// New returns the scheduler called name.
func New(name string) (Scheduler, error) {
	switch name {
	case "rr":
		return &RoundRobin{}, nil
	case "lowrtt":
		return LowRTT{}, nil
	case "rnis":
		return RNIS{}, nil
	}
	return nil, fmt.Errorf("unknown scheduler %q (rr, lowrtt, rnis)", name)
}

// RoundRobin gives each transmission opportunity to the next path in id order; a path
// without room is skipped (it is not among the candidates).
type RoundRobin struct{ last byte }

func (*RoundRobin) Name() string { return "rr" }

func (r *RoundRobin) Pick(c []Path, _ int) int {
	for i, p := range c {
		if p.ID > r.last {
			r.last = p.ID
			return i
		}
	}
	r.last = c[0].ID
	return 0
}

// LowRTT sends on the path with the smallest smoothed RTT that has room.
type LowRTT struct{}

func (LowRTT) Name() string { return "lowrtt" }

func (LowRTT) Pick(c []Path, _ int) int {
	best := 0
	for i, p := range c {
		if p.SRTT < c[best].SRTT {
			best = i
		}
	}
	return best
}

// RNIS sends on the path where the packet is expected to arrive first: half the RTT plus
// the time the radio needs to drain its queue and the packet at the capacity the RNIS
// reports for that UE in that cell. A path without a fresh report counts its RTT only
// (LowRTT).
type RNIS struct{}

func (RNIS) Name() string { return "rnis" }

func (RNIS) Pick(c []Path, size int) int {
	best, bestDelay := 0, time.Duration(0)
	for i, p := range c {
		d := p.SRTT / 2
		if p.RadioCapacityBps > 0 {
			d += time.Duration(float64(p.RadioQueueBytes+size) * 8 / p.RadioCapacityBps * float64(time.Second))
		} else {
			d = p.SRTT
		}
		if i == 0 || d < bestDelay {
			best, bestDelay = i, d
		}
	}
	return best
}
