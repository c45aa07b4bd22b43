package aqm

import (
	"encoding/binary"
	"testing"
	"time"

	"mts.invalid/suite/services/common/go/pkt"
)

const ms = int64(time.Millisecond)

func packet(n int, srcPort uint16, born int64) *pkt.Packet {
	p := pkt.Get()
	b := p.Buf()
	clear(b[:40])
	b[0], b[9] = 0x45, 17
	copy(b[12:20], []byte{10, 10, 0, 2, 10, 30, 0, 1})
	binary.BigEndian.PutUint16(b[20:22], srcPort)
	p.N, p.Born = n, born
	return p
}

type drops struct{ limit, aqm int }

func (d *drops) fn(p *pkt.Packet, aqm bool) {
	if aqm {
		d.aqm++
	} else {
		d.limit++
	}
}

func newQ(t *testing.T, disc string, limit int, d *drops) Queue {
	p := Defaults()
	p.Discipline, p.LimitBytes = disc, limit
	q, err := New(p, d.fn)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestFIFOByteLimit(t *testing.T) {
	var d drops
	q := newQ(t, "fifo", 10_000, &d)
	for i := 0; i < 10; i++ {
		q.Enqueue(packet(1500, 1, 0), 0)
	}
	if q.Bytes() != 9000 || d.limit != 4 {
		t.Fatalf("bytes %d, drops %d; want 9000 and 4", q.Bytes(), d.limit)
	}
	if q.OldestBorn() != 0 || q.Dequeue(0).N != 1500 || q.Len() != 5 {
		t.Fatal("FIFO order broken")
	}
}

// CoDel leaves a queue alone while the sojourn time stays under target, and drops once
// it stayed above target for a whole interval.
func TestCoDel(t *testing.T) {
	var d drops
	q := newQ(t, "codel", 10<<20, &d)
	// a standing queue of 4 ms sojourn: below the 5 ms target, no drop
	now := int64(0)
	for i := 0; i < 2000; i++ {
		q.Enqueue(packet(1500, 1, now), now)
		now += ms
		q.Dequeue(now + 4*ms - ms)
	}
	if d.aqm != 0 {
		t.Fatalf("%d drops below target", d.aqm)
	}
	// a queue that grows: sojourn above target for more than 100 ms
	for i := 0; i < 400; i++ {
		q.Enqueue(packet(1500, 1, now), now)
		q.Enqueue(packet(1500, 1, now), now)
		q.Dequeue(now)
		now += ms
	}
	if d.aqm == 0 {
		t.Fatal("CoDel never dropped a growing queue")
	}
	if d.aqm > 50 {
		t.Fatalf("%d drops in 400 ms: the control law drops 1/interval, then faster by sqrt(count)", d.aqm)
	}
}

// FQ-CoDel serves a new sparse flow before a backlogged bulk flow, and on overflow drops
// from the fattest flow.
func TestFQCoDelSparseFlowFirstAndFatDrop(t *testing.T) {
	var d drops
	q := newQ(t, "fq_codel", 30_000, &d)
	for i := 0; i < 19; i++ {
		q.Enqueue(packet(1500, 1000, 0), 0) // bulk flow
	}
	q.Dequeue(0) // the bulk flow becomes an old flow after its quantum
	q.Dequeue(0)
	q.Enqueue(packet(100, 2000, 0), 0) // sparse flow
	if p := q.Dequeue(0); p.N != 100 {
		t.Fatalf("dequeued %d bytes: the new sparse flow should go first", p.N)
	}
	for i := 0; i < 5; i++ {
		q.Enqueue(packet(1500, 3000, 0), 0)
	}
	if d.limit == 0 {
		t.Fatal("no overflow drop")
	}
	// the drops came from the fat bulk flow: the third flow kept its packets
	got := 0
	for p := q.Dequeue(0); p != nil; p = q.Dequeue(0) {
		if binary.BigEndian.Uint16(p.Bytes()[20:22]) == 3000 {
			got++
		}
	}
	if got != 5 {
		t.Fatalf("flow 3 kept %d of 5 packets", got)
	}
}

func TestUnknownDiscipline(t *testing.T) {
	p := Defaults()
	p.Discipline = "red"
	if _, err := New(p, func(*pkt.Packet, bool) {}); err == nil {
		t.Fatal("accepted red")
	}
}
