package path

import (
	"testing"
	"time"

	"mts.invalid/suite/tunnel/internal/wire"
)

const ms = int64(time.Millisecond)

func TestReplayWindow(t *testing.T) {
	var r Receiver
	for _, seq := range []uint64{1, 3, 2, 100} {
		if !r.Accept(seq, 0) {
			t.Fatalf("fresh %d refused", seq)
		}
	}
	for _, seq := range []uint64{0, 1, 2, 3, 100} {
		if r.Accept(seq, 0) {
			t.Fatalf("replayed %d accepted", seq)
		}
	}
	if !r.Accept(50, 0) {
		t.Fatal("a late first copy inside the window was refused")
	}
	r.Accept(100+replayBits, 0)
	if r.Accept(100, 0) || r.Accept(50, 0) {
		t.Fatal("a seq older than the window was accepted")
	}
	a := r.Ack(0)
	if a.Largest != 100+replayBits || r.Pending() != 0 {
		t.Fatalf("ack %+v", a)
	}
}

func TestAckRTTAndLoss(t *testing.T) {
	s := NewSender(Config{ID: 1, MSS: 1456, CwndMode: CwndStatic, CwndBytes: 10 * 1456}, 0)
	for i := 0; i < 10; i++ {
		s.OnSend(1456, int64(i)*ms, false)
	}
	if s.Room(1456) {
		t.Fatal("room beyond the static window")
	}
	// acks for 5..10 arrive (1..4 are missing): 1..4 are lost by the reorder threshold
	s.OnAck(wire.Ack{Largest: 10, Bitmap: 0b11111}, 30*ms)
	st := s.Snapshot()
	if st.AckedPackets != 6 || st.LostPackets != 4 || st.InflightB != 0 || st.LossEvents != 1 {
		t.Fatalf("%+v", st)
	}
	if st.SRTTms < 20.9 || st.SRTTms > 21.1 {
		t.Fatalf("srtt %.2f ms, want 21 (sent at 9, acked at 30)", st.SRTTms)
	}
	if st.CwndBytes != 10*1456 {
		t.Fatal("the static window moved")
	}
}

func TestATimeoutTakesThePathDownAndAnAckBringsItBack(t *testing.T) {
	s := NewSender(Config{ID: 1, MSS: 1456, CwndMode: CwndAdaptive, CwndBytes: 20 * 1456}, 0)
	s.Up = true // as after an acked probe
	s.OnSend(1456, 0, false)
	now := int64(s.RTO()) - ms
	if s.Tick(now) {
		t.Fatal("down before the timeout")
	}
	now += 2 * ms
	if !s.Tick(now) || s.Up || s.Timeouts != 1 || s.Snapshot().InflightB != 0 {
		t.Fatalf("after a timeout: up %v, %+v", s.Up, s.Snapshot())
	}
	if s.Snapshot().CwndBytes != minAdaptiveCwnd*1456 {
		t.Fatal("the adaptive window did not collapse on timeout")
	}
	seq := s.OnSend(wire.ProbeLen, now, true)
	if !s.OnAck(wire.Ack{Largest: seq}, now+ms) || !s.Up {
		t.Fatal("an acked probe did not bring the path up")
	}
}

func TestAdaptiveWindowGrowsAndHalves(t *testing.T) {
	s := NewSender(Config{ID: 1, MSS: 1000, CwndMode: CwndAdaptive, CwndBytes: 10_000}, 0)
	for i := uint64(1); i <= 10; i++ {
		s.OnSend(1000, 0, false)
		s.OnAck(wire.Ack{Largest: i}, ms)
	}
	if c := s.Snapshot().CwndBytes; c != 20_000 {
		t.Fatalf("slow start: cwnd %d, want 20000", c)
	}
	for i := 0; i < 5; i++ {
		s.OnSend(1000, ms, false)
	}
	s.OnAck(wire.Ack{Largest: 15, Bitmap: 0b111}, 2*ms) // 11 lost
	if c := s.Snapshot().CwndBytes; c != 16_800 {
		t.Fatalf("after a loss: cwnd %d, want 0.7 x (20000 + the 4 acks before it)", c)
	}
}

// ackRound sends n datagrams of 1000 B at t and acks them all with an RTT of rtt.
func ackRound(s *Sender, n int, t int64, rtt time.Duration) int64 {
	var last uint64
	for i := 0; i < n; i++ {
		last = s.OnSend(1000, t, false)
	}
	s.OnAck(wire.Ack{Largest: last, Bitmap: ^uint64(0)}, t+int64(rtt))
	return t + int64(rtt)
}

func TestDelayWindowSettlesAtTheTarget(t *testing.T) {
	s := NewSender(Config{ID: 1, MSS: 1000, CwndMode: CwndDelay, CwndBytes: 10_000, CwndTarget: 2 * time.Millisecond}, 0)
	now := ackRound(s, 10, 0, 10*time.Millisecond) // the base RTT: 10 ms, no queue
	if c := s.Snapshot().CwndBytes; c != 15_000 {
		t.Fatalf("no queue: cwnd %d, want 1.5 x 10000", c)
	}
	now = ackRound(s, 15, now, 12*time.Millisecond) // queueing = the target
	if c := s.Snapshot().CwndBytes; c != 15_000 {
		t.Fatalf("at the target: cwnd %d, want it unchanged", c)
	}
	now = ackRound(s, 15, now, 13*time.Millisecond) // 3 ms of queue: 1 + 0.5 x (2 - 3) / 2
	if c := s.Snapshot().CwndBytes; c != 11_250 {
		t.Fatalf("above the target: cwnd %d, want 0.75 x 15000", c)
	}
	ackRound(s, 2, now, 10*time.Millisecond) // a round that did not fill the window
	if c := s.Snapshot().CwndBytes; c != 11_250 {
		t.Fatalf("not filled: cwnd %d, want it not grown", c)
	}
	for i := 0; i < 20; i++ {
		now = ackRound(s, 11, now, 50*time.Millisecond)
	}
	if c := s.Snapshot().CwndBytes; c != minDelayCwnd*1000 {
		t.Fatalf("a standing queue far above the target: cwnd %d, want the minimum", c)
	}
}
