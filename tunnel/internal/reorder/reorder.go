// Package reorder puts the packets of all paths back into the sender's order (data seq)
// at the tunnel's egress. A gap is skipped as soon as every path has delivered a later
// packet: each path delivers in the order it was sent, so the missing packet is no longer
// on any path (it was lost); otherwise it is waited for at most Timeout (a path that
// carries nothing, or one that lost its last packets, gives no such proof). The tunnel
// does not retransmit: the inner transport recovers what a path lost. A Timeout of 0 turns
// ordering off: every packet is delivered as it comes, as research 003's VPN did (its QUIC
// datagram frames are unordered), so that a packet on a fast path does not wait for the
// packets of other flows still on a slower one.
package reorder

import "time"

const capacity = 1 << 13 // packets held at most; a larger gap is skipped at once

// Deliver receives packets in order; the buffer owns none of them afterwards.
type Deliver func(p []byte)

type slot struct {
	seq  uint64
	full bool
	at   int64  // arrival (ns)
	buf  []byte // kept across uses: no allocation per reordered packet
}

// Buffer is not safe for concurrent use; the engine serializes it.
type Buffer struct {
	Timeout time.Duration
	next    uint64 // the data seq expected next; 0 until the first packet
	slots   [capacity]slot
	held    int
	// passed[i]: the largest data seq path i delivered; a gap below all of them is lost
	passed []uint64

	InOrder, Reordered, Late, Skipped, Duplicates uint64
	// Lost: gaps skipped because every path had passed them (also counted in Skipped)
	Lost      uint64
	Unordered uint64 // delivered as they came (ordering off)
}

// New returns a buffer over paths paths (indexes 0..paths-1) that waits timeout for a gap
// no path has passed.
func New(timeout time.Duration, paths int) *Buffer {
	return &Buffer{Timeout: timeout, passed: make([]uint64, paths)}
}

// Reset forgets the order (the peer restarted).
func (b *Buffer) Reset() {
	for i := range b.slots {
		b.slots[i].full = false
	}
	clear(b.passed)
	b.next, b.held = 0, 0
}

// Held is the number of packets waiting for a gap.
func (b *Buffer) Held() int { return b.held }

// Push takes packet p with data seq, arrived on path index path at time now; p is a copy
// the buffer may keep.
func (b *Buffer) Push(seq uint64, path int, p []byte, now int64, deliver Deliver) {
	b.passed[path] = max(b.passed[path], seq)
	if b.Timeout <= 0 {
		b.Unordered++
		deliver(p)
		return
	}
	switch {
	case b.next == 0:
		b.next = seq
	case seq < b.next: // its gap was skipped already: late, but better late than lost
		b.Late++
		deliver(p)
		return
	case seq-b.next >= capacity:
		b.skipTo(seq-capacity+1, deliver)
	}
	if seq == b.next {
		b.InOrder++
		deliver(p)
		b.next++
		b.release(deliver)
		return
	}
	s := &b.slots[seq%capacity]
	if s.full { // the same seq again (gaps are < capacity, so no other seq is there)
		b.Duplicates++
		return
	}
	s.seq, s.full, s.at, s.buf = seq, true, now, append(s.buf[:0], p...)
	b.held++
	b.Reordered++
	b.skipPassed(deliver)
}

// skipPassed gives up on the gaps every path has passed: lost, not late.
func (b *Buffer) skipPassed(deliver Deliver) {
	lowest := b.passed[0]
	for _, s := range b.passed[1:] {
		lowest = min(lowest, s)
	}
	if lowest <= b.next {
		return
	}
	skipped := b.Skipped
	b.skipTo(lowest, deliver)
	b.Lost += b.Skipped - skipped
}

// release delivers what became in order.
func (b *Buffer) release(deliver Deliver) {
	for b.held > 0 {
		s := &b.slots[b.next%capacity]
		if !s.full || s.seq != b.next {
			break
		}
		deliver(s.buf)
		s.full = false
		b.held--
		b.next++
	}
}

// skipTo gives up on every seq below seq.
func (b *Buffer) skipTo(seq uint64, deliver Deliver) {
	for b.next < seq {
		s := &b.slots[b.next%capacity]
		if s.full && s.seq == b.next {
			deliver(s.buf)
			s.full = false
			b.held--
		} else {
			b.Skipped++
		}
		b.next++
		if b.held == 0 && b.next < seq {
			b.Skipped += seq - b.next
			b.next = seq
		}
	}
	b.release(deliver)
}

// Expire skips the head-of-line gap once the first packet behind it waited Timeout (a
// gap that opened later waits its own Timeout, however long packets have been held).
func (b *Buffer) Expire(now int64, deliver Deliver) {
	for b.held > 0 {
		first := b.next
		for s := &b.slots[first%capacity]; !s.full || s.seq != first; s = &b.slots[first%capacity] {
			first++
		}
		if now-b.slots[first%capacity].at < int64(b.Timeout) {
			return
		}
		b.Skipped += first - b.next
		b.next = first
		b.release(deliver)
	}
}
