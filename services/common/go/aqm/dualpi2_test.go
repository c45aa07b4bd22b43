package aqm

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"mts.invalid/suite/services/common/go/pkt"
)

// ecnPacket is a 1500-byte IPv4/TCP packet with the given ECN codepoint and a valid
// header checksum.
func ecnPacket(ecn int, born int64) *pkt.Packet {
	p := packet(1500, 1, born)
	b := p.Buf()
	b[1] = byte(ecn)
	b[9] = 6
	binary.BigEndian.PutUint16(b[2:4], 1500)
	binary.BigEndian.PutUint16(b[10:12], 0)
	binary.BigEndian.PutUint16(b[10:12], ipChecksum(b[:20]))
	return p
}

func ipChecksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < len(h); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i : i+2]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

func TestDualPI2Classifies(t *testing.T) {
	q := NewDualPI2(DualPI2Defaults(), func(*pkt.Packet, bool) {})
	for ecn, wantL := range map[int]bool{NotECT: false, ECT0: false, ECT1: true, CE: true} {
		q.Enqueue(ecnPacket(ecn, 0), 0)
		if got := q.l.Len() == 1; got != wantL {
			t.Fatalf("ECN %d: in L %v, want %v", ecn, got, wantL)
		}
		q.l, q.c = Ring{}, Ring{}
	}
}

func TestMarkCEKeepsTheChecksumValid(t *testing.T) {
	for _, ecn := range []int{ECT0, ECT1, CE} {
		p := ecnPacket(ecn, 0)
		if !MarkCE(p) || ECNOf(p) != CE {
			t.Fatalf("ECN %d not marked", ecn)
		}
		if ipChecksum(p.Bytes()[:20]) != 0 {
			t.Fatalf("ECN %d: header checksum broken after marking", ecn)
		}
	}
	if MarkCE(ecnPacket(NotECT, 0)) {
		t.Fatal("a Not-ECT packet cannot be marked")
	}
}

// The PI controller, driven by a C queue of known sojourn times, follows the control law
// p′ += α(qdelay − target) + β(qdelay − qdelay_prev) step by step.
func TestDualPI2ControlLaw(t *testing.T) {
	params := DualPI2Defaults()
	q := NewDualPI2(params, func(*pkt.Packet, bool) {})
	tu := int64(params.Tupdate)
	now := int64(1)
	q.update(now) // arms the first update
	want, prev := 0.0, 0.0
	sojourns := []float64{0.030, 0.030, 0.025, 0.040, 0.040, 0.010, 0.0, 0.020}
	for _, s := range sojourns {
		next := q.nextTick
		q.c = Ring{}
		q.c.Push(ecnPacket(NotECT, next-int64(s*1e9)))
		q.update(next)
		want = math.Min(math.Max(want+0.16*(s-0.015)+3.2*(s-prev), 0), 1)
		prev = s
		if math.Abs(q.Prob()-want) > 1e-12 {
			t.Fatalf("after sojourn %.3f s: p′ %.6f, control law %.6f", s, q.Prob(), want)
		}
		now = next + tu
	}
}

// measure dequeues n packets of one ECN codepoint and sojourn at a fixed p′.
func measure(t *testing.T, prob float64, ecn int, sojourn time.Duration, n int) (marks, drops int) {
	t.Helper()
	q := NewDualPI2(DualPI2Defaults(), func(*pkt.Packet, bool) { drops++ })
	q.nextTick = math.MaxInt64 // hold p′ where the test puts it
	q.SetProb(prob)
	now := int64(time.Second)
	for i := 0; i < n; i++ {
		q.Enqueue(ecnPacket(ecn, now-int64(sojourn)), now)
		if p := q.Dequeue(now); p != nil {
			if ECNOf(p) == CE && ecn != CE {
				marks++
			}
			pkt.Put(p)
		}
	}
	return marks, drops
}

// within checks an observed fraction against p with 5 binomial standard deviations.
func within(t *testing.T, what string, got, n int, p float64) {
	t.Helper()
	tol := 5*math.Sqrt(p*(1-p)/float64(n)) + 1e-9
	if f := float64(got) / float64(n); math.Abs(f-p) > tol {
		t.Fatalf("%s: %.4f of %d packets, control law %.4f (±%.4f)", what, f, n, p, tol)
	}
}

func TestDualPI2MarkingProbabilities(t *testing.T) {
	const n = 40000
	for _, prob := range []float64{0.05, 0.2, 0.4} {
		pC, pCL := prob*prob, 2*prob
		_, drops := measure(t, prob, NotECT, 0, n)
		within(t, "classic Not-ECT drops (p_C = p′²)", drops, n, pC)
		marks, _ := measure(t, prob, ECT0, 0, n)
		within(t, "classic ECT(0) CE marks (p_C = p′²)", marks, n, pC)
		marks, drops = measure(t, prob, ECT1, 500*time.Microsecond, n)
		within(t, "L marks below the step (p_CL = k·p′)", marks, n, pCL)
		if drops != 0 {
			t.Fatalf("p′ %.2f: %d L drops without overload", prob, drops)
		}
	}
	// above the 1 ms step every L packet is marked, whatever p′
	if marks, _ := measure(t, 0, ECT1, 2*time.Millisecond, 1000); marks != 1000 {
		t.Fatalf("step marking: %d of 1000", marks)
	}
	// overload (k·p′ ≥ 1): L packets are dropped with p_C
	_, drops := measure(t, 0.6, ECT1, 0, n)
	within(t, "L drops on overload (p_C)", drops, n, 0.36)
}

// With both queues backlogged, the C queue gets its protected 10 % of the bytes.
func TestDualPI2ClassicProtection(t *testing.T) {
	q := NewDualPI2(DualPI2Defaults(), func(*pkt.Packet, bool) {})
	q.nextTick = math.MaxInt64
	for i := 0; i < 2000; i++ {
		q.Enqueue(ecnPacket(ECT1, 0), 0)
		q.Enqueue(ecnPacket(NotECT, 0), 0)
	}
	for i := 0; i < 1000; i++ {
		pkt.Put(q.Dequeue(0))
	}
	if c := q.Stats.CPackets; c < 95 || c > 105 {
		t.Fatalf("C queue served %d of 1000 packets, want 10 %%", c)
	}
}
