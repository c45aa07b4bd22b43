package aqm

import (
	"math"

	"mts.invalid/suite/services/common/go/pkt"
)

// codelState is CoDel's control state for one queue (RFC 8289; the ACM pseudocode of the
// reference §5.4). Drops happen at the head, at dequeue.
type codelState struct {
	p              *Params
	firstAboveTime int64
	dropNext       int64
	count          int
	dropping       bool
}

// okToDrop tells whether the packet just dequeued has been above target for an interval.
func (s *codelState) okToDrop(p *pkt.Packet, now int64, backlog int) bool {
	sojourn := now - p.Born
	if sojourn < int64(s.p.Target) || backlog <= s.p.MTU {
		s.firstAboveTime = 0
		return false
	}
	if s.firstAboveTime == 0 {
		s.firstAboveTime = now + int64(s.p.Interval)
		return false
	}
	return now >= s.firstAboveTime
}

func (s *codelState) controlLaw(t int64) int64 {
	return t + int64(float64(s.p.Interval)/math.Sqrt(float64(s.count)))
}

// dequeue pops from r, applying CoDel; dropped packets go to drop.
func (s *codelState) dequeue(r *Ring, now int64, drop DropFunc) *pkt.Packet {
	p := r.Pop()
	if p == nil {
		s.dropping = false
		return nil
	}
	ok := s.okToDrop(p, now, r.Bytes()+p.N)
	interval := int64(s.p.Interval)
	switch {
	case s.dropping && !ok:
		s.dropping = false
	case s.dropping:
		for now >= s.dropNext && s.dropping {
			drop(p, true)
			s.count++
			p = r.Pop()
			if p == nil || !s.okToDrop(p, now, r.Bytes()+p.N) {
				s.dropping = false
			} else {
				s.dropNext = s.controlLaw(s.dropNext)
			}
		}
	case ok && (now-s.dropNext < interval || now-s.firstAboveTime >= interval):
		drop(p, true)
		p = r.Pop()
		s.dropping = true
		if s.count > 2 && now-s.dropNext < 8*interval {
			s.count -= 2
		} else {
			s.count = 1
		}
		s.dropNext = s.controlLaw(now)
	}
	return p
}

// CoDel is a single CoDel queue with a byte limit (tail drop when full, like FIFO).
type CoDel struct {
	FIFO
	st codelState
}

func (q *CoDel) Dequeue(now int64) *pkt.Packet { return q.st.dequeue(&q.ring, now, q.drop) }
