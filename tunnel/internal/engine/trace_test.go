package engine

import (
	"encoding/binary"
	"testing"
	"time"
)

func TestICMPEchoMarksPings(t *testing.T) {
	packet := func(proto, icmpType byte) []byte {
		b := make([]byte, 28)
		b[0], b[9], b[20], b[26], b[27] = 0x45, proto, icmpType, 0x01, 0x02
		return b
	}
	if x, ok := icmpEcho(packet(1, 8)); !ok || x.seq != 0x0102 || x.reply || !x.sentAt.IsZero() {
		t.Fatalf("echo request: %+v %v", x, ok)
	}
	if x, ok := icmpEcho(packet(1, 0)); !ok || !x.reply {
		t.Fatal("echo reply not marked")
	}
	if _, ok := icmpEcho(packet(1, 3)); ok {
		t.Fatal("unreachable marked")
	}
	if _, ok := icmpEcho(packet(17, 8)); ok {
		t.Fatal("UDP marked")
	}
}

// The age comes from ping's timestamp in the payload; a payload that is no timestamp gives none.
func TestICMPEchoAgeFromPingPayload(t *testing.T) {
	b := make([]byte, 28+16)
	b[0], b[9], b[20] = 0x45, 1, 8
	sent := time.Now().Add(-3 * time.Millisecond)
	binary.NativeEndian.PutUint64(b[28:], uint64(sent.Unix()))
	binary.NativeEndian.PutUint64(b[36:], uint64(sent.Nanosecond()/1000))
	x, _ := icmpEcho(b)
	if age := x.ageUS(); age < 3000 || age > 1e6 {
		t.Fatalf("age %d µs, want ~3000", age)
	}
	binary.NativeEndian.PutUint64(b[36:], 5e6) // usec out of range: not a timeval
	if x, _ := icmpEcho(b); x.ageUS() != -1 {
		t.Fatalf("age %d from a payload that is no timestamp", x.ageUS())
	}
}

// Go's scheduling latencies are counted, and each threshold's count is within the one below.
func TestGoSchedStatsCounts(t *testing.T) {
	done := make(chan struct{})
	for range 100 {
		go func() { done <- struct{}{} }()
	}
	for range 100 {
		<-done
	}
	s := goSchedStats()
	if s.Count == 0 || s.Over100us > s.Count || s.Over1ms > s.Over100us || s.Over5ms > s.Over1ms {
		t.Fatalf("%+v", s)
	}
}
