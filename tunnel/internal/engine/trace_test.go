package engine

import (
	"testing"

	"mts.invalid/suite/services/common/go/pkt"
)

func TestICMPEchoMarksPings(t *testing.T) {
	packet := func(proto, icmpType byte) *pkt.Packet {
		p := pkt.Get()
		b := p.Buf()[:28]
		clear(b)
		b[0], b[9], b[20], b[26], b[27] = 0x45, proto, icmpType, 0x01, 0x02
		p.N = len(b)
		return p
	}
	if seq, ok := icmpEcho(packet(1, 8)); !ok || seq != 0x0102 {
		t.Fatalf("echo request: %d %v", seq, ok)
	}
	if _, ok := icmpEcho(packet(1, 0)); !ok {
		t.Fatal("echo reply not marked")
	}
	if _, ok := icmpEcho(packet(1, 3)); ok {
		t.Fatal("unreachable marked")
	}
	if _, ok := icmpEcho(packet(17, 8)); ok {
		t.Fatal("UDP marked")
	}
}
