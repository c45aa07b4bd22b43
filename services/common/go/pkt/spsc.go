package pkt

import "sync/atomic"

// SPSC is a bounded lock-free queue for one producer goroutine and one consumer. It hands
// packets between the I/O goroutines and the real-time TTI thread without a mutex, so a
// preempted reader or writer can never make the clock wait (no priority inversion).
type SPSC struct {
	buf   []*Packet
	mask  uint64
	head  atomic.Uint64 // next slot to pop (consumer)
	_     [56]byte      // keep producer and consumer indexes on separate cache lines
	tail  atomic.Uint64 // next slot to push (producer)
	bytes atomic.Int64
}

// NewSPSC returns a queue of capacity rounded up to a power of two.
func NewSPSC(capacity int) *SPSC {
	n := 1
	for n < capacity {
		n <<= 1
	}
	return &SPSC{buf: make([]*Packet, n), mask: uint64(n - 1)}
}

// Push appends p; false if the queue is full (the caller still owns p).
func (q *SPSC) Push(p *Packet) bool {
	t := q.tail.Load()
	if t-q.head.Load() == uint64(len(q.buf)) {
		return false
	}
	q.buf[t&q.mask] = p
	q.bytes.Add(int64(p.N))
	q.tail.Store(t + 1)
	return true
}

// Pop removes the oldest packet, nil if empty.
func (q *SPSC) Pop() *Packet {
	h := q.head.Load()
	if h == q.tail.Load() {
		return nil
	}
	p := q.buf[h&q.mask]
	q.buf[h&q.mask] = nil
	q.head.Store(h + 1)
	q.bytes.Add(-int64(p.N))
	return p
}

// Bytes is the number of bytes queued (approximate while both sides run).
func (q *SPSC) Bytes() int { return int(q.bytes.Load()) }
