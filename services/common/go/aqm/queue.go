package aqm

import (
	"fmt"
	"time"

	"mts.invalid/suite/services/common/go/pkt"
)

// Queue is a packet queue (an RLC SDU queue, a tunnel ingress). Enqueue may drop (queue full); Dequeue may drop at the
// head (AQM). Every dropped packet goes to the Drop callback given at construction.
type Queue interface {
	Enqueue(p *pkt.Packet, now int64)
	Dequeue(now int64) *pkt.Packet
	Len() int
	Bytes() int
	// OldestBorn is the arrival time of the oldest queued packet (0 if empty).
	OldestBorn() int64
}

// DropFunc receives a dropped packet; aqm is true for an AQM drop, false for a full queue.
type DropFunc func(p *pkt.Packet, aqm bool)

// Params configures a queue.
type Params struct {
	Discipline string // "fifo", "codel", "fq_codel" or "dualpi2" (RFC 9332, its defaults)
	LimitBytes int
	Target     time.Duration // CoDel target (5 ms)
	Interval   time.Duration // CoDel interval (100 ms)
	Flows      int           // FQ-CoDel flow queues (1024)
	Quantum    int           // FQ-CoDel DRR quantum in bytes (1400)
	MTU        int           // CoDel does not drop when no more than an MTU is queued
	Seed       uint32        // FQ-CoDel hash perturbation
}

// Defaults returns the parameters of the reference (§5): 5 ms / 100 ms, 1024 flows,
// quantum 1400 B, with the RLC buffer of 1 MB as the byte limit.
func Defaults() Params {
	return Params{Discipline: "fifo", LimitBytes: 1 << 20, Target: 5 * time.Millisecond,
		Interval: 100 * time.Millisecond, Flows: 1024, Quantum: 1400, MTU: 1500}
}

// New builds the queue p describes.
func New(p Params, drop DropFunc) (Queue, error) {
	if p.LimitBytes <= 0 {
		return nil, fmt.Errorf("queue limit %d bytes: must be positive", p.LimitBytes)
	}
	switch p.Discipline {
	case "fifo", "":
		return &FIFO{limit: p.LimitBytes, drop: drop}, nil
	case "codel":
		if p.Target <= 0 || p.Interval <= 0 {
			return nil, fmt.Errorf("codel target and interval must be positive")
		}
		return &CoDel{FIFO: FIFO{limit: p.LimitBytes, drop: drop}, st: codelState{p: &p}}, nil
	case "fq_codel":
		if p.Target <= 0 || p.Interval <= 0 || p.Flows <= 0 || p.Quantum <= 0 {
			return nil, fmt.Errorf("fq_codel needs positive target, interval, flows and quantum")
		}
		return newFQCoDel(p, drop), nil
	case "dualpi2":
		d := DualPI2Defaults()
		d.LimitBytes, d.Seed = p.LimitBytes, uint64(p.Seed)+1
		return NewDualPI2(d, drop), nil
	}
	return nil, fmt.Errorf("unknown queue discipline %q (fifo, codel, fq_codel, dualpi2)", p.Discipline)
}

// FIFO is a tail-drop queue with a byte limit (like RLC's buffer).
type FIFO struct {
	ring  Ring
	limit int
	drop  DropFunc
}

func (q *FIFO) Enqueue(p *pkt.Packet, _ int64) {
	if q.ring.Bytes()+p.N > q.limit {
		q.drop(p, false)
		return
	}
	q.ring.Push(p)
}

func (q *FIFO) Dequeue(int64) *pkt.Packet { return q.ring.Pop() }
func (q *FIFO) Len() int                  { return q.ring.Len() }
func (q *FIFO) Bytes() int                { return q.ring.Bytes() }
func (q *FIFO) OldestBorn() int64         { return bornOf(q.ring.Peek()) }

func bornOf(p *pkt.Packet) int64 {
	if p == nil {
		return 0
	}
	return p.Born
}
