package ran

import (
	"math/rand/v2"
	"sync/atomic"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
)

// segment is the part of one RLC SDU (IP packet) carried by a transport block.
type segment struct {
	p     *pkt.Packet
	n     int
	ready int64 // RLC AM: when a lost segment may be retransmitted (ns)
}

// harqProc is one HARQ process of a bearer (synchronous HARQ: process k serves TTIs
// with tti mod processes == k, so a retransmission comes one HARQ RTT later).
type harqProc struct {
	busy     bool // waiting for a retransmission
	segs     []segment
	tbs      int // bytes
	nprb     int
	attempts int  // transmissions so far
	lastACK  bool // outcome of the last transmission, for the FlexRAN harq array
	used     bool
}

// Counters are a bearer's ground truth, for tests and the control API.
type Counters struct {
	DLArrivedPkts, DLArrivedBytes     atomic.Uint64 // read from the downlink TUN
	DLQueueDropPkts, DLQueueDropBytes atomic.Uint64 // queue full
	DLAQMDropPkts, DLAQMDropBytes     atomic.Uint64 // CoDel / FQ-CoDel
	DLDeliveredPkts, DLDeliveredBytes atomic.Uint64 // written to the UE's interface
	DLResidualLostPkts                atomic.Uint64 // RLC UM: a segment failed every HARQ attempt
	DLChannelLossPkts                 atomic.Uint64 // the channel's extra residual loss
	TBs, TBRetx, TBFailures           atomic.Uint64 // HARQ transmissions
	TBBytes, PRBs                     atomic.Uint64
	ULArrivedPkts, ULArrivedBytes     atomic.Uint64
	ULDropPkts                        atomic.Uint64
	ULDeliveredPkts, ULDeliveredBytes atomic.Uint64
	ULSpoofedPkts                     atomic.Uint64 // uplink packets with a foreign source address
}

// Bearer is one UE's data bearer on one cell: its RLC queue, HARQ processes, in-order
// receiver and delay lines. Readers hand packets over through lock-free inboxes;
// everything else runs on the TTI thread.
type Bearer struct {
	UE   *UE
	Cell *Cell
	Cfg  BearerConfig
	ip4  uint32

	inbox   *pkt.SPSC // downlink packets read, not yet in the RLC queue
	ulInbox *pkt.SPSC // uplink packets read, not yet in the uplink queue
	queue   aqm.Queue
	ul      aqm.Ring // uplink packets waiting for the uplink grant

	ch      *Channel
	rng     *rand.Rand
	cur     *pkt.Packet // SDU being segmented (already left the AQM queue)
	amRetx  []segment   // RLC AM: segments that failed HARQ, waiting for ARQ
	harq    []harqProc
	rx      aqm.Ring // SDUs in send order, until the receiver can deliver them in order
	dlDelay delayLine
	ulDelay delayLine
	ulCarry float64 // uplink byte credit carried between TTIs

	// last-TTI MAC state, for the northbound snapshot (TTI thread)
	mac           macState
	avgRate       float64 // proportional fair: average served bytes per TTI
	need          int     // scheduler scratch: PRBs wanted this TTI
	servedThisTTI int
	alloc         int // scheduler scratch: PRBs given this TTI

	C Counters
	// rlcHeld is what the RLC holds outside the queue (segmented SDU, AM retransmissions),
	// published by the TTI thread for the ground-truth API.
	rlcHeld        atomic.Int64
	heldTTI        atomic.Int64
	lastArrivalTTI atomic.Int64
	writer         *writer
	truth          *Truth
	now            int64 // start of the TTI being run (TTI thread), for drop labels

	up   *Bearer                   // the UE's uplink bearer (cell uplink MAC), or nil
	feed atomic.Pointer[grantFeed] // uplink bearer: the UE's grant feed, once opened
}

// macState is what the northbound reports about a bearer.
type macState struct {
	radio                        Radio
	mcs, tbs, prb, prbRetx       int
	harqRound                    int
	ulTBS, ulLast                int
	totalTBS, totalPRB, totalPDU uint64
	lastSDU                      int
}

// dropped is the RLC queue's drop callback (TTI thread).
func (b *Bearer) dropped(p *pkt.Packet, byAQM bool) { b.droppedAt(p, byAQM, b.now) }

func (b *Bearer) droppedAt(p *pkt.Packet, byAQM bool, now int64) {
	cause := CauseOverflow
	if byAQM {
		cause = CauseAQM
		b.C.DLAQMDropPkts.Add(1)
		b.C.DLAQMDropBytes.Add(uint64(p.N))
	} else {
		b.C.DLQueueDropPkts.Add(1)
		b.C.DLQueueDropBytes.Add(uint64(p.N))
	}
	b.lose(p, cause, now)
}

// lose labels a dropped downlink packet and frees it.
func (b *Bearer) lose(p *pkt.Packet, cause Cause, now int64) {
	if b.truth != nil {
		b.truth.Record(now, b.UE.Cfg.Name, cause, p)
	}
	pkt.Put(p)
}

// enqueueDL is called by the downlink reader for a packet addressed to this bearer.
func (b *Bearer) enqueueDL(p *pkt.Packet, now int64, tti int64) {
	b.C.DLArrivedPkts.Add(1)
	b.C.DLArrivedBytes.Add(uint64(p.N))
	p.Born = now
	b.lastArrivalTTI.Store(tti)
	if !b.inbox.Push(p) {
		b.droppedAt(p, false, now) // the TTI thread is far behind: count it as a full queue
	}
}

// drainInbox moves newly read packets into the RLC queue (its AQM sees their arrival time).
func (b *Bearer) drainInbox() {
	for p := b.inbox.Pop(); p != nil; p = b.inbox.Pop() {
		b.queue.Enqueue(p, p.Born)
	}
}

// enqueueUL is called by the UE interface reader.
func (b *Bearer) enqueueUL(p *pkt.Packet, now int64) {
	if p.Src4() != b.ip4 {
		b.C.ULSpoofedPkts.Add(1) // no open relay: a UE sends only from its own address
		pkt.Put(p)
		return
	}
	b.C.ULArrivedPkts.Add(1)
	b.C.ULArrivedBytes.Add(uint64(p.N))
	if b.up != nil { // the UE's modem buffer, served by the uplink MAC
		b.up.enqueueDL(p, now, b.up.Cell.TTI.Load())
		return
	}
	p.Born = now
	if !b.ulInbox.Push(p) {
		b.C.ULDropPkts.Add(1)
		pkt.Put(p)
	}
}

// countULDelivered counts an uplink packet handed to the RAN namespace.
func (b *Bearer) countULDelivered(p *pkt.Packet) {
	b.C.ULDeliveredPkts.Add(1)
	b.C.ULDeliveredBytes.Add(uint64(p.N))
}

// drainULInbox moves uplink packets into the uplink queue, dropping beyond its limit.
func (b *Bearer) drainULInbox() {
	for p := b.ulInbox.Pop(); p != nil; p = b.ulInbox.Pop() {
		if b.ul.Bytes()+p.N > b.Cfg.ULLimit {
			b.C.ULDropPkts.Add(1)
			pkt.Put(p)
			continue
		}
		b.ul.Push(p)
	}
}

// backlog is the RLC buffer in bytes, without the inbox.
func (b *Bearer) backlog(now int64) int {
	n := b.queue.Bytes()
	if b.cur != nil {
		n += b.cur.N - b.cur.Sent
	}
	for _, s := range b.amRetx {
		n += s.n
	}
	return n
}

// oldestBorn is the arrival time of the oldest byte waiting to be sent (HOL).
func (b *Bearer) oldestBorn() int64 {
	oldest := b.queue.OldestBorn()
	if b.cur != nil && (oldest == 0 || b.cur.Born < oldest) {
		oldest = b.cur.Born
	}
	if len(b.amRetx) > 0 && (oldest == 0 || b.amRetx[0].p.Born < oldest) {
		oldest = b.amRetx[0].p.Born
	}
	return oldest
}

// fill builds a transport block of at most budget bytes: RLC AM retransmissions first,
// then the SDU being segmented, then new SDUs from the queue (the AQM may drop at its
// head).
func (b *Bearer) fill(h *harqProc, budget int, now int64) int {
	h.segs = h.segs[:0]
	used := 0
	for len(b.amRetx) > 0 && budget-used > 0 && b.amRetx[0].ready <= now {
		s := &b.amRetx[0]
		take := min(s.n, budget-used)
		h.segs = append(h.segs, segment{p: s.p, n: take})
		used += take
		if take == s.n {
			b.amRetx = b.amRetx[1:]
		} else {
			s.n -= take
			s.p.Outstanding++ // the rest stays queued as its own segment
		}
	}
	for budget-used > 0 {
		if b.cur == nil {
			b.cur = b.queue.Dequeue(now)
			if b.cur == nil {
				break
			}
			b.rx.Push(b.cur) // the receiver delivers in this order
		}
		p := b.cur
		take := min(p.N-p.Sent, budget-used)
		p.Sent += take
		p.Outstanding++
		h.segs = append(h.segs, segment{p: p, n: take})
		used += take
		if p.Sent == p.N {
			b.cur = nil
		}
	}
	return used
}

// hasData tells whether there is anything to send now.
func (b *Bearer) hasData(now int64) bool {
	return b.cur != nil || b.queue.Len() > 0 || (len(b.amRetx) > 0 && b.amRetx[0].ready <= now)
}

// resolve settles a transport block after its last HARQ attempt.
func (b *Bearer) resolve(h *harqProc, ok bool, now int64) {
	am := b.Cell.Cfg.RLC.Mode == "am"
	retxAt := now + int64(b.Cell.Cfg.RLC.AMRetxDelayMS*1e6)
	for _, s := range h.segs {
		switch {
		case ok:
			s.p.Outstanding--
		case am:
			s.ready = retxAt // ARQ: stays outstanding, sent again after the RLC delay
			b.amRetx = append(b.amRetx, s)
		default:
			s.p.Outstanding--
			s.p.Failed = true
		}
	}
	h.segs = h.segs[:0]
	h.busy = false
}

// release hands SDUs to the delay line in order, as RLC reordering does: an SDU leaves
// once it and every SDU before it is complete or lost. It is due delay after the TTI
// start, and never less than delay after its arrival (a TTI run late, catching up after
// a stall of the host, has a start earlier than packets that arrived during the stall).
func (b *Bearer) release(start, delay int64, loss float64) {
	for {
		p := b.rx.Peek()
		if p == nil || p.Sent < p.N || p.Outstanding > 0 {
			return
		}
		b.rx.Pop()
		switch {
		case p.Failed:
			b.C.DLResidualLostPkts.Add(1)
			b.lose(p, CauseRadio, start)
		case loss > 0 && b.rng.Float64() < loss:
			b.C.DLChannelLossPkts.Add(1)
			b.lose(p, CauseRadio, start)
		default:
			p.Born = max(start, p.Born) + delay // reused as the delivery time from here on
			b.dlDelay.push(p)
		}
	}
}

// QueueBytes is the ground truth of the RLC buffer at the end of the last TTI (see
// QueueTTI): every byte that reached the base station and is not sent yet, including
// packets read but not yet taken into the queue. Safe from any goroutine.
func (b *Bearer) QueueBytes() int { return int(b.rlcHeld.Load()) }

// QueueTTI is the TTI at whose end QueueBytes was taken.
func (b *Bearer) QueueTTI() int64 { return b.heldTTI.Load() }

// InboxBytes is what the reader handed over and the TTI thread has not taken in yet.
func (b *Bearer) InboxBytes() int { return b.inbox.Bytes() }

// Channel is the bearer's live channel.
func (b *Bearer) Channel() *Channel { return b.ch }

func (b *Bearer) publishHeld(now, tti int64) {
	b.rlcHeld.Store(int64(b.backlog(now) + b.inbox.Bytes()))
	b.heldTTI.Store(tti)
}
