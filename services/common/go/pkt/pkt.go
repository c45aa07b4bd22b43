// Package pkt holds the packet buffers of the Go data planes (RAN emulator, multipath
// tunnel). Buffers come from a pool so that the forwarding path does not allocate per packet.
package pkt

import (
	"encoding/binary"
	"sync"
)

// BufSize is the largest packet a data plane carries (TUN MTU 1500 plus headroom).
const BufSize = 2048

// Packet is one IP packet and the RLC bookkeeping the emulator's MAC keeps for it.
type Packet struct {
	buf  [BufSize]byte
	N    int   // length of the IP packet in buf
	Born int64 // arrival time at the queue's owner, ns on its clock
	Hash uint32

	// RLC state, owned by the emulator's TTI thread (unused elsewhere).
	Seq         uint64 // receive order: assigned when the first byte is scheduled
	Sent        int    // bytes already put into transport blocks
	Outstanding int    // segments sent but not yet acknowledged or given up
	Failed      bool   // a segment was lost (RLC UM): the packet is discarded
}

var pool = sync.Pool{New: func() any { return new(Packet) }}

// Get returns a clean packet from the pool.
func Get() *Packet {
	p := pool.Get().(*Packet)
	p.N, p.Born, p.Hash = 0, 0, 0
	p.Seq, p.Sent, p.Outstanding, p.Failed = 0, 0, 0, false
	return p
}

// Put returns p to the pool; p must not be used afterwards.
func Put(p *Packet) { pool.Put(p) }

// Buf is the whole backing buffer (to read into).
func (p *Packet) Buf() []byte { return p.buf[:] }

// Bytes is the IP packet.
func (p *Packet) Bytes() []byte { return p.buf[:p.N] }

// Version is the IP version (4 or 6), 0 if the packet is too short.
func (p *Packet) Version() int {
	if p.N < 1 {
		return 0
	}
	return int(p.buf[0] >> 4)
}

// Dst4 is the IPv4 destination address as a big-endian integer (0 if not IPv4).
func (p *Packet) Dst4() uint32 {
	if p.N < 20 || p.Version() != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(p.buf[16:20])
}

// Src4 is the IPv4 source address as a big-endian integer (0 if not IPv4).
func (p *Packet) Src4() uint32 {
	if p.N < 20 || p.Version() != 4 {
		return 0
	}
	return binary.BigEndian.Uint32(p.buf[12:16])
}

// FlowHash hashes the 5-tuple (IPv4) with a per-instance seed, for FQ-CoDel's
// classification (RFC 8290 §4.1.1: a perturbed hash so flows cannot choose to collide).
func (p *Packet) FlowHash(seed uint32) uint32 {
	if p.N < 20 || p.Version() != 4 {
		return seed
	}
	b := p.buf[:p.N]
	h := jenkinsMix(binary.BigEndian.Uint32(b[12:16]), binary.BigEndian.Uint32(b[16:20]), uint32(b[9])^seed)
	ihl := int(b[0]&0x0f) * 4
	if (b[9] == 6 || b[9] == 17) && p.N >= ihl+4 {
		h = jenkinsMix(h, binary.BigEndian.Uint32(b[ihl:ihl+4]), seed)
	}
	return h
}

// jenkinsMix is Bob Jenkins' final mix of three words (lookup3), as the kernel's jhash_3words.
func jenkinsMix(a, b, c uint32) uint32 {
	rot := func(x uint32, k uint) uint32 { return x<<k | x>>(32-k) }
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return c
}
