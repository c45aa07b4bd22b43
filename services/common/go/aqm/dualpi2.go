package aqm

import (
	"encoding/binary"
	"math/rand/v2"
	"time"

	"mts.invalid/suite/services/common/go/pkt"
)

// DualPI2 is the dual-queue coupled AQM of RFC 9332 with the Linux defaults
// (../shared/reference/001-spin-delay-bit-l4s.md §5):
//
//   - classification on the ECN field: ECT(1) and CE go to the L queue, Not-ECT and
//     ECT(0) to the C queue;
//   - a PI controller on the C queue's sojourn time, every Tupdate:
//     p′ += α·(qdelay − target) + β·(qdelay − qdelay_prev), clamped to [0, 1]
//     (α, β in Hz and the delays in seconds, as RFC 9332 A.1 and sch_dualpi2);
//   - classic packets are dropped (Not-ECT) or CE-marked (ECT(0)) with p_C = p′²;
//   - L packets are CE-marked with p_L = max(p_CL, step), p_CL = k·p′ (k = 2), step = 1
//     when the packet's own L-queue sojourn exceeds StepThresh (1 ms);
//   - overload: when p_CL would exceed 1, L packets are dropped with p_C like classic ones
//     (drop_on_overload);
//   - the scheduler gives the C queue at least ClassicProtection (10 %) of the bytes when
//     both queues are backlogged (a credit WRR, as sch_dualpi2's c_protection);
//   - drops and marks happen at dequeue; a CE mark rewrites the IPv4 header checksum.
//
// The sojourn times are those of the caller's clock: a queue served once per TTI sees them
// in TTI steps (the emulator's NR numerologies give 125 µs ticks for sub-ms resolution).
type DualPI2 struct {
	p        DualPI2Params
	l, c     Ring
	drop     DropFunc
	rng      *rand.Rand
	prob     float64 // p′, the base probability
	prevQ    float64 // qdelay at the previous update, s
	nextTick int64   // next PI update, ns
	credit   float64 // WRR credit: > 0 means the C queue is owed service, bytes
	Stats    DualPI2Stats
}

// DualPI2Params: the RFC 9332 / Linux defaults from DualPI2Defaults.
type DualPI2Params struct {
	LimitPackets      int
	LimitBytes        int
	Target            time.Duration // 15 ms
	Tupdate           time.Duration // 16 ms
	AlphaHz           float64       // 0.16
	BetaHz            float64       // 3.2
	Coupling          float64       // k = 2
	StepThresh        time.Duration // 1 ms, on the L queue's own sojourn
	ClassicProtection float64       // 0.10: the C queue's share when both are backlogged
	Seed              uint64
}

// DualPI2Stats counts what the queue did, in packets.
type DualPI2Stats struct {
	LPackets   uint64 `json:"l_packets"` // dequeued (sent) from each queue
	CPackets   uint64 `json:"c_packets"`
	LMarks     uint64 `json:"l_marks"` // CE marks (L: step and coupled)
	CMarks     uint64 `json:"c_marks"`
	LDrops     uint64 `json:"l_drops"` // AQM drops (L: only on overload)
	CDrops     uint64 `json:"c_drops"`
	StepMarks  uint64 `json:"step_marks"` // L marks by the step (own sojourn > StepThresh)
	LimitDrops uint64 `json:"limit_drops"`
}

// DualPI2Defaults are the Linux sch_dualpi2 defaults (limit 10000 packets).
func DualPI2Defaults() DualPI2Params {
	return DualPI2Params{LimitPackets: 10000, LimitBytes: 1 << 30, Target: 15 * time.Millisecond,
		Tupdate: 16 * time.Millisecond, AlphaHz: 0.16, BetaHz: 3.2, Coupling: 2,
		StepThresh: time.Millisecond, ClassicProtection: 0.10, Seed: 1}
}

// NewDualPI2 builds the queue; dropped packets go to drop.
func NewDualPI2(p DualPI2Params, drop DropFunc) *DualPI2 {
	return &DualPI2{p: p, drop: drop, rng: rand.New(rand.NewPCG(p.Seed, 0x4c345320))}
}

// ECN codepoints (the low two bits of the IPv4 DS field).
const (
	NotECT = 0
	ECT1   = 1
	ECT0   = 2
	CE     = 3
)

// ECNOf is the ECN field of an IPv4 packet (NotECT for anything else).
func ECNOf(p *pkt.Packet) int {
	if p.N < 20 || p.Version() != 4 {
		return NotECT
	}
	return int(p.Bytes()[1] & 3)
}

// MarkCE sets CE in an ECN-capable IPv4 packet and fixes the header checksum
// (RFC 1624 incremental update of the 16-bit word holding the DS field).
func MarkCE(p *pkt.Packet) bool {
	if ECNOf(p) == NotECT {
		return false
	}
	b := p.Bytes()
	old := binary.BigEndian.Uint16(b[0:2])
	b[1] |= CE
	new := binary.BigEndian.Uint16(b[0:2])
	sum := uint32(^binary.BigEndian.Uint16(b[10:12])) + uint32(^old) + uint32(new)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(b[10:12], ^uint16(sum))
	return true
}

func isL(p *pkt.Packet) bool {
	e := ECNOf(p)
	return e == ECT1 || e == CE
}

func (q *DualPI2) Enqueue(p *pkt.Packet, now int64) {
	if q.l.Len()+q.c.Len() >= q.p.LimitPackets || q.l.Bytes()+q.c.Bytes()+p.N > q.p.LimitBytes {
		q.Stats.LimitDrops++
		q.drop(p, false)
		return
	}
	if isL(p) {
		q.l.Push(p)
	} else {
		q.c.Push(p)
	}
}

// update runs the PI controller once per Tupdate (catching up after an idle gap).
func (q *DualPI2) update(now int64) {
	if q.nextTick == 0 {
		q.nextTick = now + int64(q.p.Tupdate)
		return
	}
	for now >= q.nextTick {
		qdelay := 0.0
		if head := q.c.Peek(); head != nil {
			qdelay = float64(q.nextTick-head.Born) / 1e9
		}
		q.prob = StepPI(q.prob, qdelay, q.prevQ, q.p)
		q.prevQ = qdelay
		q.nextTick += int64(q.p.Tupdate)
	}
}

// StepPI is one update of the PI controller: the new p′ from the old one, this qdelay and
// the previous one (seconds). The one owner of the control law.
func StepPI(prob, qdelay, prevQ float64, p DualPI2Params) float64 {
	prob += p.AlphaHz*(qdelay-p.Target.Seconds()) + p.BetaHz*(qdelay-prevQ)
	return min(max(prob, 0), 1)
}

// Probabilities are p_C = p′² and p_CL = k·p′ (uncapped: ≥ 1 is overload).
func Probabilities(prob float64, p DualPI2Params) (pC, pCL float64) {
	return prob * prob, p.Coupling * prob
}

// Params are the queue's settings.
func (q *DualPI2) Params() DualPI2Params { return q.p }

// Prob is the current p′ (for reports and tests).
func (q *DualPI2) Prob() float64 { return q.prob }

// SetProb sets p′ (tests, and a warm start).
func (q *DualPI2) SetProb(prob float64) { q.prob = min(max(prob, 0), 1) }

// pick chooses the queue to serve: L unless the C queue is owed its protected share.
func (q *DualPI2) pick() (r *Ring, fromL bool) {
	switch {
	case q.l.Len() == 0 && q.c.Len() == 0:
		return nil, false
	case q.c.Len() == 0:
		q.credit = 0
		return &q.l, true
	case q.l.Len() == 0:
		q.credit = 0
		return &q.c, false
	case q.credit <= 0:
		q.credit += q.p.ClassicProtection * float64(q.l.Peek().N)
		return &q.l, true
	default:
		q.credit -= (1 - q.p.ClassicProtection) * float64(q.c.Peek().N)
		return &q.c, false
	}
}

func (q *DualPI2) Dequeue(now int64) *pkt.Packet {
	q.update(now)
	for {
		r, fromL := q.pick()
		if r == nil {
			return nil
		}
		p := r.Pop()
		if q.admit(p, fromL, now) {
			return p
		}
	}
}

// admit applies the marking or dropping to a dequeued packet; false: it was dropped.
func (q *DualPI2) admit(p *pkt.Packet, fromL bool, now int64) bool {
	pC, pCL := Probabilities(q.prob, q.p)
	if fromL {
		if pCL >= 1 && q.rng.Float64() < pC { // overload: classic treatment
			q.Stats.LDrops++
			q.drop(p, true)
			return false
		}
		q.Stats.LPackets++
		if now-p.Born > int64(q.p.StepThresh) {
			q.Stats.StepMarks++
			q.Stats.LMarks++
			MarkCE(p)
		} else if q.rng.Float64() < pCL {
			q.Stats.LMarks++
			MarkCE(p)
		}
		return true
	}
	if q.rng.Float64() < pC {
		if ECNOf(p) == ECT0 {
			q.Stats.CMarks++
			q.Stats.CPackets++
			MarkCE(p)
			return true
		}
		q.Stats.CDrops++
		q.drop(p, true)
		return false
	}
	q.Stats.CPackets++
	return true
}

func (q *DualPI2) Len() int   { return q.l.Len() + q.c.Len() }
func (q *DualPI2) Bytes() int { return q.l.Bytes() + q.c.Bytes() }

func (q *DualPI2) OldestBorn() int64 {
	l, c := bornOf(q.l.Peek()), bornOf(q.c.Peek())
	if l == 0 || (c != 0 && c < l) {
		return c
	}
	return l
}
