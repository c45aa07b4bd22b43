package engine

import (
	"errors"
	"net/netip"
	"runtime/metrics"
	"time"

	"mts.invalid/suite/tunnel/internal/backlogfeed"
	"mts.invalid/suite/tunnel/internal/path"
	"mts.invalid/suite/tunnel/internal/sched"
)

// PathState is a path as the API shows it.
type PathState struct {
	path.State
	Local  string `json:"local"`
	Remote string `json:"remote"`
	// Radio is the latest RNIS report of the path's UE in its cell (absent: none yet).
	Radio *RadioState `json:"radio,omitempty"`
}

// RadioState is what the RNIS feed last said of a path's radio.
type RadioState struct {
	UE          string  `json:"ue"`
	CapacityBps float64 `json:"capacityBps"`
	QueueBytes  int     `json:"queueBytes"`
	AgeMs       float64 `json:"ageMs"`
}

// ErrNoPath is an unknown path id.
var ErrNoPath = errors.New("no such path")

// Paths returns every path's state, in id order.
func (e *Engine) Paths() []PathState {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]PathState, 0, len(e.paths))
	for _, p := range e.paths {
		out = append(out, e.pathState(p))
	}
	return out
}

// Path returns one path's state.
func (e *Engine) Path(id byte) (PathState, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.byID[id]
	if p == nil {
		return PathState{}, ErrNoPath
	}
	return e.pathState(p), nil
}

func (e *Engine) pathState(p *pathIO) PathState {
	st := PathState{State: p.tx.Snapshot(), Local: p.conn.LocalAddr().String(), Remote: p.cfg.Remote.String()}
	if p.cfg.RnisUE.IsValid() && !p.radio.at.IsZero() {
		st.Radio = &RadioState{UE: p.cfg.RnisUE.String(), CapacityBps: p.radio.capacityBps,
			QueueBytes: p.radio.queueBytes, AgeMs: float64(time.Since(p.radio.at)) / 1e6}
	}
	return st
}

// SetEnabled lets the scheduler use path id, or not (probes continue either way).
func (e *Engine) SetEnabled(id byte, enabled bool) error {
	e.mu.Lock()
	p := e.byID[id]
	if p != nil {
		p.tx.Enabled = enabled
	}
	e.mu.Unlock()
	if p == nil {
		return ErrNoPath
	}
	e.log.Info("path set", "path", id, "enabled", enabled)
	e.pump()
	return nil
}

// Scheduler is the current scheduler's name.
func (e *Engine) Scheduler() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.sched.Name()
}

// SetScheduler switches the scheduler.
func (e *Engine) SetScheduler(name string) error {
	s, err := sched.New(name)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.sched = s
	e.mu.Unlock()
	e.log.Info("scheduler set", "scheduler", name)
	return nil
}

// RadioUEs are the UE addresses whose RNIS reports the paths use.
func (e *Engine) RadioUEs() []netip.Addr {
	var out []netip.Addr
	for _, p := range e.paths {
		if p.cfg.RnisUE.IsValid() {
			out = append(out, p.cfg.RnisUE)
		}
	}
	return out
}

// SetRadio records an RNIS report of UE ue: its radio capacity and its RLC queue.
func (e *Engine) SetRadio(ue netip.Addr, capacityBps float64, queueBytes int, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.paths {
		if p.cfg.RnisUE == ue {
			p.radio = radio{capacityBps: capacityBps, queueBytes: queueBytes, at: at}
		}
	}
}

// FlowState is one flow queue of the ingress FQ-CoDel.
type FlowState struct {
	Index     int     `json:"index"`
	List      string  `json:"list"`
	Packets   int     `json:"packets"`
	Bytes     int     `json:"bytes"`
	Credits   int     `json:"credits"`
	SojournMs float64 `json:"headSojournMs"`
	Dropping  bool    `json:"dropping"`
	Count     int     `json:"codelCount"`
	Drops     uint64  `json:"drops"`
}

// QueueState is the ingress queue.
type QueueState struct {
	Discipline string      `json:"discipline"`
	Packets    int         `json:"packets"`
	Bytes      int         `json:"bytes"`
	LimitBytes int         `json:"limitBytes"`
	SojournMs  float64     `json:"oldestSojournMs"`
	Drops      uint64      `json:"drops"`
	Flows      []FlowState `json:"flows"`
}

// Queue returns the ingress queue's state (flows: the active ones, FQ-CoDel only).
func (e *Engine) Queue() QueueState {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	sojourn := func(born int64) float64 {
		if born == 0 {
			return 0
		}
		return float64(now-born) / 1e6
	}
	q := QueueState{Discipline: e.cfg.Queue.Discipline, Packets: e.queue.Len(), Bytes: e.queue.Bytes(),
		LimitBytes: e.cfg.Queue.LimitBytes, SojournMs: sojourn(e.queue.OldestBorn()),
		Drops: e.drops[DropQueueLimit].Load() + e.drops[DropAQM].Load(), Flows: []FlowState{}}
	if e.fq != nil {
		for _, f := range e.fq.Flows() {
			q.Flows = append(q.Flows, FlowState{Index: f.Index, List: f.List, Packets: f.Packets, Bytes: f.Bytes,
				Credits: f.Credits, SojournMs: sojourn(f.HeadBorn), Dropping: f.Dropping, Count: f.Count,
				Drops: e.flowDrops[f.Index]})
		}
	}
	return q
}

// Stats are the engine's counters.
type Stats struct {
	Drops       map[string]uint64 `json:"drops"`
	RxPackets   uint64            `json:"rxPackets"`
	RxBytes     uint64            `json:"rxBytes"`
	TxPackets   uint64            `json:"txDatagrams"`
	TUNFailures uint64            `json:"tunWriteFailures"`
	TUNReads    uint64            `json:"tunReads"`  // frames read: with offloads a super-packet is one
	TUNWrites   uint64            `json:"tunWrites"` // frames written: merged packets are one
	TUNOffload  string            `json:"tunOffload"`
	TUNReader   string            `json:"tunReader"` // read or io_uring (see tun.Device.Reader)
	Reorder     ReorderStats      `json:"reorder"`
	PeerUp      bool              `json:"peerAuthenticated"`
	GoSched     GoSchedStats      `json:"goSchedLatency"`
}

// GoSchedStats counts the times the process's goroutines waited runnable before they ran
// (Go's /sched/latencies histogram, since the start): the Go scheduler's share of a delay.
type GoSchedStats struct {
	Count     uint64 `json:"count"`
	Over100us uint64 `json:"over100us"`
	Over1ms   uint64 `json:"over1ms"`
	Over5ms   uint64 `json:"over5ms"`
}

func goSchedStats() GoSchedStats {
	m := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(m)
	var s GoSchedStats
	if m[0].Value.Kind() != metrics.KindFloat64Histogram {
		return s
	}
	h := m[0].Value.Float64Histogram()
	for i, n := range h.Counts { // bucket i is [Buckets[i], Buckets[i+1])
		s.Count += n
		lo := h.Buckets[i]
		for _, c := range []struct {
			min float64
			to  *uint64
		}{{100e-6, &s.Over100us}, {1e-3, &s.Over1ms}, {5e-3, &s.Over5ms}} {
			if lo >= c.min {
				*c.to += n
			}
		}
	}
	return s
}

// ReorderStats are the egress reorder buffer's counters.
type ReorderStats struct {
	Held       int    `json:"held"`
	InOrder    uint64 `json:"inOrder"`
	Reordered  uint64 `json:"reordered"`
	Late       uint64 `json:"late"`
	Skipped    uint64 `json:"skipped"`
	Lost       uint64 `json:"lost"` // skipped gaps every path had passed (lost, not late)
	Duplicates uint64 `json:"duplicates"`
	Unordered  uint64 `json:"unordered"` // delivered as they came: ordering off (timeout 0)
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	s := Stats{Drops: map[string]uint64{}, RxPackets: e.rxPackets.Load(), RxBytes: e.rxBytes.Load(),
		TxPackets: e.txPackets.Load(), PeerUp: e.peer.Load() != nil, TUNReads: e.dev.Reads(), TUNOffload: "none",
		GoSched: goSchedStats()}
	s.TUNReader, _ = e.dev.Reader()
	if e.dev.UDPOffload() {
		s.TUNOffload = "tcp+udp"
	} else if e.dev.Offload() {
		s.TUNOffload = "tcp"
	}
	for r, n := range e.drops {
		s.Drops[r] = n.Load()
	}
	e.rxMu.Lock()
	s.TUNFailures, s.TUNWrites = e.toTUN.Failed, e.toTUN.Writes
	b := e.reorder
	s.Reorder = ReorderStats{Held: b.Held(), InOrder: b.InOrder, Reordered: b.Reordered, Late: b.Late,
		Skipped: b.Skipped, Lost: b.Lost, Duplicates: b.Duplicates, Unordered: b.Unordered}
	e.rxMu.Unlock()
	return s
}

// Backlog is what this end holds toward its peer: the ingress queue (unsent) plus the
// datagrams in flight on the paths, and the bytes read from the TUN so far.
func (e *Engine) Backlog() backlogfeed.Sample {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := backlogfeed.Sample{Unsent: e.queue.Bytes(), Received: e.tunBytes.Load()}
	s.Backlog = s.Unsent
	for _, p := range e.paths {
		s.Backlog += p.tx.Inflight()
	}
	switch {
	case e.fq != nil:
		s.Flows = len(e.fq.Flows())
	case s.Unsent > 0:
		s.Flows = 1
	}
	return s
}
