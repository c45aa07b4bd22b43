// Package path keeps the state of one tunnel path: the sender's (sequence numbers, packets
// in flight, RTT estimation, loss detection, congestion window, liveness) and the
// receiver's (replay window, what to acknowledge). It does no I/O; the engine calls it
// under its locks.
package path

import (
	"math"
	"time"

	"mts.invalid/suite/tunnel/internal/wire"
)

// Congestion window modes.
const (
	CwndStatic   = "static"   // cwnd = the configured BDP (research 003's workaround)
	CwndAdaptive = "adaptive" // slow start, then AIMD with CUBIC's 0.7 decrease per loss event
	CwndDelay    = "delay"    // once per round trip, steered to keep the path's queueing delay at a target
)

// Modes lists the window modes.
var Modes = []string{CwndStatic, CwndAdaptive, CwndDelay}

const (
	ringSize        = 1 << 16 // packets in flight a path can track
	lossReorder     = 3       // a packet is lost when 3 later ones were acked (RFC 9002)
	minRTO          = 200 * time.Millisecond
	downAfterRTOs   = 1 // consecutive timeouts before a path is declared down (a probe brings it back)
	initialRTT      = 100 * time.Millisecond
	minAdaptiveCwnd = 4
	minDelayCwnd    = 2   // datagrams: a slow path's window may be tiny
	delayGain       = 0.5 // per round: cwnd × (1 + gain × (target − queueing delay) / target)
)

// Config of a path's sender.
type Config struct {
	ID        byte
	MSS       int    // largest datagram payload the path carries (bytes)
	CwndMode  string // CwndStatic or CwndAdaptive
	CwndBytes int    // static cwnd (BDP), or the adaptive window's start
	// CwndTarget is the delay window's queueing delay target: the window settles near the
	// path's BDP plus this much of queue.
	CwndTarget time.Duration
}

type sent struct {
	seq   uint64
	size  int
	at    int64 // ns
	acked bool
	probe bool
}

// Sender is the sending side of a path.
type Sender struct {
	cfg     Config
	Enabled bool // the path manager may use it (false: probes only)
	Up      bool // answered lately

	nextSeq      uint64
	ring         [ringSize]sent
	lowest       uint64 // lowest seq possibly in flight
	inflight     int
	cwnd         float64
	ssthresh     float64
	recoveryEnd  uint64 // losses below this seq belong to the current loss event
	srtt, rttvar time.Duration
	minRTT       time.Duration
	hasRTT       bool
	lastAckAt    int64
	lastSendAt   int64
	rtoCount     int
	// the delay window's round: the smallest RTT sample and the most in flight since the
	// round began; it ends when roundEnd is acked
	roundEnd      uint64
	roundMinRTT   time.Duration
	roundInflight int

	// counters
	SentPackets, SentBytes, AckedPackets, LostPackets, Probes uint64
	LossEvents, Timeouts, SendErrors                          uint64
}

// never is the send time of a path that sent nothing: it is probed at once.
const never = math.MinInt64 / 2

// NewSender returns a path sender, enabled and down: a path is up once the peer acked a
// datagram of this run on it, which tells that the peer knows this run's key (data goes
// with the short header, which does not name the run). Its first probe is due at once.
func NewSender(cfg Config, now int64) *Sender {
	s := &Sender{cfg: cfg, Enabled: true, nextSeq: 1, lowest: 1, cwnd: float64(cfg.CwndBytes),
		ssthresh: math.Inf(1), lastAckAt: now, lastSendAt: never}
	return s
}

// PeerRestarted: the peer is a new run, which does not know this run's key; what was in
// flight is lost, and the path is down until a probe (full header) is acked, due at once.
func (s *Sender) PeerRestarted(now int64) {
	s.loseInflight(now)
	s.Up, s.lastSendAt = false, never
}

// ID of the path.
func (s *Sender) ID() byte { return s.cfg.ID }

// Usable: enabled and up.
func (s *Sender) Usable() bool { return s.Enabled && s.Up }

// Room tells whether a datagram of size bytes fits into the window.
func (s *Sender) Room(size int) bool { return s.inflight+size <= int(s.cwnd) || s.inflight == 0 }

// Inflight is the bytes sent and neither acked nor declared lost.
func (s *Sender) Inflight() int { return s.inflight }

// SRTT is the smoothed RTT (the initial 100 ms before any sample).
func (s *Sender) SRTT() time.Duration {
	if !s.hasRTT {
		return initialRTT
	}
	return s.srtt
}

// OnSend records a datagram of size bytes sent now and returns its path seq.
func (s *Sender) OnSend(size int, now int64, probe bool) uint64 {
	seq := s.nextSeq
	s.nextSeq++
	r := &s.ring[seq%ringSize]
	if !r.acked && r.seq != 0 && r.seq >= s.lowest {
		s.declareLost(r) // wrapped around a packet never acknowledged
	}
	*r = sent{seq: seq, size: size, at: now, probe: probe}
	s.inflight += size
	s.roundInflight = max(s.roundInflight, s.inflight)
	s.lastSendAt = now
	s.SentPackets++
	s.SentBytes += uint64(size)
	if probe {
		s.Probes++
	}
	return seq
}

// OnAck processes an ack; it returns whether the path came up with it.
func (s *Sender) OnAck(a wire.Ack, now int64) (cameUp bool) {
	if a.Largest == 0 || a.Largest >= s.nextSeq {
		return false
	}
	newly := s.ackOne(a.Largest, now, a.Delay, true)
	for i := uint64(0); i < 64 && i+1 < a.Largest; i++ {
		if a.Bitmap&(1<<i) != 0 {
			newly += s.ackOne(a.Largest-1-i, now, 0, false)
		}
	}
	if newly == 0 {
		return false
	}
	s.lastAckAt = now
	s.rtoCount = 0
	cameUp = !s.Up
	s.Up = true
	s.detectLosses(a.Largest, now)
	if s.cfg.CwndMode == CwndDelay && a.Largest >= s.roundEnd {
		s.endRound()
	}
	return cameUp
}

// endRound steers the delay window once per round trip from the round's smallest RTT
// sample (the least disturbed by ack timing and host scheduling): its excess over the
// path's minimum RTT is the queue the path holds. Below the target the window grows (by
// half at an empty queue, so it finds the BDP in a few rounds), above it shrinks (at most
// by half). A window the round did not fill is not grown: an idle path would otherwise
// grow without bound and then flood its queue in a burst.
func (s *Sender) endRound() {
	if s.roundMinRTT > 0 && s.minRTT > 0 && s.cfg.CwndTarget > 0 {
		queueing := float64(s.roundMinRTT - s.minRTT)
		factor := 1 + delayGain*(float64(s.cfg.CwndTarget)-queueing)/float64(s.cfg.CwndTarget)
		factor = min(max(factor, 0.5), 1.5)
		if factor < 1 || float64(s.roundInflight) >= s.cwnd/2 {
			s.cwnd = max(s.cwnd*factor, float64(minDelayCwnd*s.cfg.MSS))
		}
	}
	s.roundEnd, s.roundMinRTT, s.roundInflight = s.nextSeq, 0, s.inflight
}

// ackOne marks seq acknowledged; the ack's largest is also the RTT sample (from the send
// time the sender kept, minus the receiver's ack delay).
func (s *Sender) ackOne(seq uint64, now, ackDelay int64, sample bool) int {
	r := &s.ring[seq%ringSize]
	if r.seq != seq || r.acked || seq < s.lowest {
		return 0
	}
	r.acked = true
	s.inflight -= r.size
	s.AckedPackets++
	if sample {
		s.sampleRTT(time.Duration(now-r.at-ackDelay), r.probe)
	}
	s.grow(r.size)
	return 1
}

// sampleRTT updates SRTT and RTTVAR; the minimum RTTs (the delay window's base and round
// minimum) come from data datagrams only: a probe is a few bytes and crosses a slow link
// faster than any data datagram can, so its RTT would read as a standing queue.
func (s *Sender) sampleRTT(rtt time.Duration, probe bool) {
	if rtt <= 0 {
		rtt = time.Microsecond
	}
	if !probe && (s.minRTT == 0 || rtt < s.minRTT) {
		s.minRTT = rtt
	}
	if !probe && (s.roundMinRTT == 0 || rtt < s.roundMinRTT) {
		s.roundMinRTT = rtt
	}
	if !s.hasRTT { // RFC 6298
		s.srtt, s.rttvar, s.hasRTT = rtt, rtt/2, true
		return
	}
	d := s.srtt - rtt
	if d < 0 {
		d = -d
	}
	s.rttvar = (3*s.rttvar + d) / 4
	s.srtt = (7*s.srtt + rtt) / 8
}

func (s *Sender) grow(acked int) {
	if s.cfg.CwndMode != CwndAdaptive {
		return
	}
	if s.cwnd < s.ssthresh {
		s.cwnd += float64(acked)
	} else {
		s.cwnd += float64(s.cfg.MSS) * float64(acked) / s.cwnd
	}
}

// detectLosses declares lost what lossReorder later packets overtook, or what is older
// than 9/8 RTT behind an acked packet (RFC 9002 §6.1).
func (s *Sender) detectLosses(largest uint64, now int64) {
	timeThreshold := int64(9 * max(s.SRTT(), time.Millisecond) / 8)
	for ; s.lowest < largest; s.lowest++ {
		r := &s.ring[s.lowest%ringSize]
		if r.seq != s.lowest || r.acked {
			continue
		}
		if largest-s.lowest < lossReorder && now-r.at < timeThreshold {
			return
		}
		s.declareLost(r)
	}
}

func (s *Sender) declareLost(r *sent) {
	r.acked = true
	s.inflight -= r.size
	s.LostPackets++
	if r.seq >= s.recoveryEnd { // one decrease per loss event (per window)
		s.LossEvents++
		s.recoveryEnd = s.nextSeq
		switch s.cfg.CwndMode {
		case CwndAdaptive:
			s.ssthresh = max(s.cwnd*0.7, float64(minAdaptiveCwnd*s.cfg.MSS))
			s.cwnd = s.ssthresh
		case CwndDelay: // a loss the delay did not foresee (a queue shorter than the target)
			s.cwnd = max(s.cwnd*0.7, float64(minDelayCwnd*s.cfg.MSS))
		}
	}
}

// RTO is the retransmission timeout of RFC 6298 (at least 200 ms).
func (s *Sender) RTO() time.Duration { return max(s.SRTT()+4*s.rttvar, minRTO) << min(s.rtoCount, 4) }

// Tick runs the timers: a timeout declares everything in flight lost, and after
// downAfterRTOs of them the path is down. It returns whether the path went down now.
func (s *Sender) Tick(now int64) (wentDown bool) {
	if s.inflight == 0 || now-s.lastAckAt < int64(s.RTO()) || now-s.oldestSend() < int64(s.RTO()) {
		return false
	}
	s.Timeouts++
	s.rtoCount++
	s.loseInflight(now)
	if s.rtoCount >= downAfterRTOs && s.Up {
		s.Up = false
		return true
	}
	return false
}

// SendFailed: the kernel refused a datagram (the local link or route is gone): the path is
// down at once, what it had in flight is lost. It returns whether the path went down now.
func (s *Sender) SendFailed(now int64) (wentDown bool) {
	s.SendErrors++
	s.loseInflight(now)
	wentDown, s.Up = s.Up, false
	return wentDown
}

func (s *Sender) loseInflight(now int64) {
	for ; s.lowest < s.nextSeq; s.lowest++ {
		if r := &s.ring[s.lowest%ringSize]; r.seq == s.lowest && !r.acked {
			s.declareLost(r)
		}
	}
	s.inflight = 0
	s.lastAckAt = now
	switch s.cfg.CwndMode {
	case CwndAdaptive:
		s.cwnd = float64(minAdaptiveCwnd * s.cfg.MSS)
	case CwndDelay:
		s.cwnd = float64(minDelayCwnd * s.cfg.MSS)
	}
}

func (s *Sender) oldestSend() int64 {
	for seq := s.lowest; seq < s.nextSeq; seq++ {
		if r := &s.ring[seq%ringSize]; r.seq == seq && !r.acked {
			return r.at
		}
	}
	return math.MaxInt64
}

// NeedsProbe: nothing sent for interval (keeps the RTT fresh and finds a path back up).
func (s *Sender) NeedsProbe(now int64, interval time.Duration) bool {
	return now-s.lastSendAt >= int64(interval) && (s.inflight == 0 || !s.Up)
}

// State is a snapshot for the API and metrics.
type State struct {
	ID           byte    `json:"id"`
	Enabled      bool    `json:"enabled"`
	Up           bool    `json:"up"`
	CwndMode     string  `json:"cwndMode"`
	CwndBytes    int     `json:"cwndBytes"`
	InflightB    int     `json:"inflightBytes"`
	SRTTms       float64 `json:"srttMs"`
	RTTVarms     float64 `json:"rttvarMs"`
	MinRTTms     float64 `json:"minRttMs"`
	RTOms        float64 `json:"rtoMs"`
	SentPackets  uint64  `json:"sentPackets"`
	SentBytes    uint64  `json:"sentBytes"`
	AckedPackets uint64  `json:"ackedPackets"`
	LostPackets  uint64  `json:"lostPackets"`
	Probes       uint64  `json:"probes"`
	LossEvents   uint64  `json:"lossEvents"`
	Timeouts     uint64  `json:"timeouts"`
	SendErrors   uint64  `json:"sendErrors"`
}

// Snapshot returns the path's state.
func (s *Sender) Snapshot() State {
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	st := State{ID: s.cfg.ID, Enabled: s.Enabled, Up: s.Up, CwndMode: s.cfg.CwndMode, CwndBytes: int(s.cwnd),
		InflightB: s.inflight, RTOms: ms(s.RTO()), SentPackets: s.SentPackets, SentBytes: s.SentBytes,
		AckedPackets: s.AckedPackets, LostPackets: s.LostPackets, Probes: s.Probes, LossEvents: s.LossEvents,
		Timeouts: s.Timeouts, SendErrors: s.SendErrors}
	if s.hasRTT {
		st.SRTTms, st.RTTVarms, st.MinRTTms = ms(s.srtt), ms(s.rttvar), ms(s.minRTT)
	}
	return st
}

// Receiver is the receiving side of a path: a replay window over path seqs (64 kpackets
// wide, as paths deliver nearly in order) and the ack to send.
type Receiver struct {
	largest   uint64
	window    [replayWords]uint64 // bit seq%replayBits: seq seen
	largestAt int64
	unacked   int // data datagrams received since the last ack
}

const (
	replayBits  = 1 << 16
	replayWords = replayBits / 64
)

// Accept records seq; false for a replay (seen, or older than the window).
func (r *Receiver) Accept(seq uint64, now int64) bool {
	if seq == 0 || seq+replayBits <= r.largest {
		return false
	}
	if seq > r.largest {
		for s := r.largest + 1; s < seq && s-r.largest <= replayBits; s++ { // clear skipped bits
			r.window[(s%replayBits)/64] &^= 1 << (s % 64)
		}
		r.largest, r.largestAt = seq, now
	} else if r.seen(seq) {
		return false
	}
	r.window[(seq%replayBits)/64] |= 1 << (seq % 64)
	r.unacked++
	return true
}

func (r *Receiver) seen(seq uint64) bool { return r.window[(seq%replayBits)/64]&(1<<(seq%64)) != 0 }

// Reset forgets everything (the peer restarted with a new epoch).
func (r *Receiver) Reset() { *r = Receiver{} }

// Pending is how many received datagrams the next ack covers.
func (r *Receiver) Pending() int { return r.unacked }

// Ack builds the ack of what was received and clears Pending.
func (r *Receiver) Ack(now int64) wire.Ack {
	a := wire.Ack{Largest: r.largest, Delay: now - r.largestAt}
	for i := uint64(0); i < 64 && i+1 < r.largest; i++ {
		if r.seen(r.largest - 1 - i) {
			a.Bitmap |= 1 << i
		}
	}
	r.unacked = 0
	return a
}
