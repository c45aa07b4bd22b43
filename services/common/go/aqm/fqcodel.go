package aqm

import "mts.invalid/suite/services/common/go/pkt"

// FQCoDel is RFC 8290's flow queueing with CoDel per flow: hashed flow queues served by a
// two-list deficit round robin (new flows first), a shared byte limit enforced by dropping
// from the head of the fattest flow (reference §5.2–5.3).
type FQCoDel struct {
	p          Params
	flows      []fqFlow
	newFlows   flowList
	oldFlows   flowList
	bytes, len int
	drop       DropFunc
	// countingDrop wraps drop to keep bytes/len right when CoDel drops inside a flow.
	countingDrop DropFunc
}

type fqFlow struct {
	ring    Ring
	credits int
	codel   codelState
	list    *flowList // the list the flow is on, nil when inactive
	next    *fqFlow
	index   int // position in FQCoDel.flows
}

// flowList is an intrusive singly linked FIFO of flows.
type flowList struct{ head, tail *fqFlow }

func (l *flowList) empty() bool { return l.head == nil }

func (l *flowList) pushTail(f *fqFlow) {
	f.next, f.list = nil, l
	if l.tail == nil {
		l.head = f
	} else {
		l.tail.next = f
	}
	l.tail = f
}

func (l *flowList) popHead() *fqFlow {
	f := l.head
	l.head = f.next
	if l.head == nil {
		l.tail = nil
	}
	f.next, f.list = nil, nil
	return f
}

func newFQCoDel(p Params, drop DropFunc) *FQCoDel {
	q := &FQCoDel{p: p, flows: make([]fqFlow, p.Flows), drop: drop}
	for i := range q.flows {
		q.flows[i].codel.p = &q.p
		q.flows[i].index = i
	}
	q.countingDrop = func(pk *pkt.Packet, aqm bool) {
		q.bytes -= pk.N
		q.len--
		drop(pk, aqm)
	}
	return q
}

func (q *FQCoDel) Enqueue(p *pkt.Packet, _ int64) {
	f := &q.flows[q.FlowIndex(p)]
	if f.list == nil {
		q.newFlows.pushTail(f)
		f.credits = q.p.Quantum
	}
	f.ring.Push(p)
	q.bytes += p.N
	q.len++
	for q.bytes > q.p.LimitBytes {
		q.dropFromFattest()
	}
}

// dropFromFattest head-drops one packet from the flow with the largest backlog.
func (q *FQCoDel) dropFromFattest() {
	var fat *fqFlow
	for i := range q.flows {
		if f := &q.flows[i]; f.ring.Bytes() > 0 && (fat == nil || f.ring.Bytes() > fat.ring.Bytes()) {
			fat = f
		}
	}
	p := fat.ring.Pop()
	q.bytes -= p.N
	q.len--
	q.drop(p, false)
}

func (q *FQCoDel) Dequeue(now int64) *pkt.Packet {
	for {
		var l *flowList
		switch {
		case !q.newFlows.empty():
			l = &q.newFlows
		case !q.oldFlows.empty():
			l = &q.oldFlows
		default:
			return nil
		}
		f := l.head
		if f.credits <= 0 {
			f.credits += q.p.Quantum
			q.oldFlows.pushTail(l.popHead())
			continue
		}
		p := f.codel.dequeue(&f.ring, now, q.countingDrop)
		if p == nil {
			l.popHead()
			if l == &q.newFlows && !q.oldFlows.empty() {
				q.oldFlows.pushTail(f) // anti-starvation: old flows get their turn
			}
			continue
		}
		f.credits -= p.N
		q.bytes -= p.N
		q.len--
		return p
	}
}

func (q *FQCoDel) Len() int   { return q.len }
func (q *FQCoDel) Bytes() int { return q.bytes }

// OldestBorn scans the active flows' heads; it runs once per reporting period, not per packet.
func (q *FQCoDel) OldestBorn() int64 {
	var oldest int64
	for _, l := range []*flowList{&q.newFlows, &q.oldFlows} {
		for f := l.head; f != nil; f = f.next {
			if b := bornOf(f.ring.Peek()); b != 0 && (oldest == 0 || b < oldest) {
				oldest = b
			}
		}
	}
	return oldest
}

// FlowState is one active flow queue of an FQ-CoDel, for a look inside (REST, metrics).
type FlowState struct {
	Index    int    `json:"index"`    // hash bucket
	List     string `json:"list"`     // new or old
	Packets  int    `json:"packets"`  // queued
	Bytes    int    `json:"bytes"`    // queued
	Credits  int    `json:"credits"`  // DRR deficit left
	HeadBorn int64  `json:"-"`        // arrival of the head packet (ns), for its sojourn
	Dropping bool   `json:"dropping"` // CoDel is in its dropping state
	Count    int    `json:"codelCount"`
}

// Flows lists the active flows (on the new or the old list), new ones first; it walks the
// lists only, so it costs as much as there are active flows.
func (q *FQCoDel) Flows() []FlowState {
	var out []FlowState
	for _, l := range []*flowList{&q.newFlows, &q.oldFlows} {
		name := "new"
		if l == &q.oldFlows {
			name = "old"
		}
		for f := l.head; f != nil; f = f.next {
			out = append(out, FlowState{Index: f.index, List: name, Packets: f.ring.Len(),
				Bytes: f.ring.Bytes(), Credits: f.credits, HeadBorn: bornOf(f.ring.Peek()),
				Dropping: f.codel.dropping, Count: f.codel.count})
		}
	}
	return out
}

// FlowIndex is the flow queue p is classified into.
func (q *FQCoDel) FlowIndex(p *pkt.Packet) int {
	return int(p.FlowHash(q.p.Seed) % uint32(len(q.flows)))
}
