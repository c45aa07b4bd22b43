// Package aqm implements the packet queue disciplines of the suite: a byte-limited FIFO,
// CoDel (RFC 8289) and FQ-CoDel (RFC 8290), with the parameters of
// ../shared/reference/003-fq-codel-multipath-tunnel.md §5, and DualPI2 (RFC 9332) for L4S. Its users are the RAN emulator's
// per-UE RLC queue and the multipath tunnel's ingress queue.
package aqm

import "mts.invalid/suite/services/common/go/pkt"

// Ring is a growable FIFO of packets that does not allocate once it has grown.
type Ring struct {
	buf        []*pkt.Packet
	head, size int
	bytes      int
}

func (r *Ring) Len() int   { return r.size }
func (r *Ring) Bytes() int { return r.bytes }

func (r *Ring) Push(p *pkt.Packet) {
	if r.size == len(r.buf) {
		r.grow()
	}
	r.buf[(r.head+r.size)%len(r.buf)] = p
	r.size++
	r.bytes += p.N
}

func (r *Ring) Peek() *pkt.Packet {
	if r.size == 0 {
		return nil
	}
	return r.buf[r.head]
}

func (r *Ring) Pop() *pkt.Packet {
	if r.size == 0 {
		return nil
	}
	p := r.buf[r.head]
	r.buf[r.head] = nil
	r.head = (r.head + 1) % len(r.buf)
	r.size--
	r.bytes -= p.N
	return p
}

func (r *Ring) grow() {
	n := max(16, 2*len(r.buf))
	buf := make([]*pkt.Packet, n)
	for i := 0; i < r.size; i++ {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}
