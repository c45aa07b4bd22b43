package ran

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// StatsConf is FlexRAN's periodic statistics request for one base station
// (`POST /stats/conf/enb/:id`, protobuf flex_complete_stats_request in JSON).
type StatsConf struct {
	ReportFrequency string   `json:"reportFrequency"`
	SF              int      `json:"sf"`
	CellReports     []string `json:"cellReports"`
	UEReports       []string `json:"ueReports"`
}

// StatsConfRequest is the body of POST /stats/conf/enb/:id.
type StatsConfRequest struct {
	Reports []StatsConf `json:"reports"`
}

var (
	ueReportTypes = map[string]bool{"FLUST_BSR": true, "FLUST_PHR": true, "FLUST_RLC_BS": true,
		"FLUST_MAC_CE_BS": true, "FLUST_DL_CQI": true, "FLUST_PBS": true, "FLUST_UL_CQI": true,
		"FLUST_MAC_STATS": true, "FLUST_PDCP_STATS": true, "FLUST_GTP_STATS": true,
		"FLUST_S1AP_STATS": true, "FLUST_RRC_MEASUREMENTS": true}
	cellReportTypes = map[string]bool{"FLCST_NOISE_INTERFERENCE": true}
	frequencies     = map[string]bool{"FLSRF_ONCE": true, "FLSRF_PERIODICAL": true,
		"FLSRF_CONTINUOUS": true, "FLSRF_OFF": true}
)

// Validate checks a reporting configuration as the controller's protobuf parser would.
func (r *StatsConfRequest) Validate() error {
	if len(r.Reports) != 1 {
		return fmt.Errorf("want exactly one entry in reports, got %d", len(r.Reports))
	}
	s := r.Reports[0]
	if !frequencies[s.ReportFrequency] {
		return fmt.Errorf("reportFrequency %q: want FLSRF_ONCE, FLSRF_PERIODICAL, FLSRF_CONTINUOUS or FLSRF_OFF", s.ReportFrequency)
	}
	if s.ReportFrequency == "FLSRF_PERIODICAL" && (s.SF < 1 || s.SF > 60000) {
		return fmt.Errorf("sf %d: a periodical report needs 1..60000 ms", s.SF)
	}
	for _, t := range s.UEReports {
		if !ueReportTypes[t] {
			return fmt.Errorf("unknown ueReports entry %q", t)
		}
	}
	for _, t := range s.CellReports {
		if !cellReportTypes[t] {
			return fmt.Errorf("unknown cellReports entry %q", t)
		}
	}
	return nil
}

func statsConfDefault(periodMS int) StatsConf {
	// what the controller's stats manager asks every agent for (fixtures/flexran/v2/stats-conf-enb.json)
	ue := []string{"FLUST_PHR", "FLUST_DL_CQI", "FLUST_BSR", "FLUST_RLC_BS", "FLUST_MAC_CE_BS",
		"FLUST_UL_CQI", "FLUST_RRC_MEASUREMENTS", "FLUST_PDCP_STATS", "FLUST_MAC_STATS", "FLUST_GTP_STATS"}
	return StatsConf{ReportFrequency: "FLSRF_PERIODICAL", SF: periodMS,
		CellReports: []string{"FLCST_NOISE_INTERFERENCE"}, UEReports: ue}
}

// statsConf is a cell's reporting configuration and the schedule of its next snapshot.
type statsConf struct {
	mu      sync.Mutex
	conf    StatsConf
	pending bool // a new configuration asks for a snapshot at the next TTI
}

func (s *statsConf) set(c StatsConf) {
	s.mu.Lock()
	s.conf, s.pending = c, true
	s.mu.Unlock()
}

func (s *statsConf) get() StatsConf {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conf
}

// StatsConf returns the cell's reporting configuration.
func (c *Cell) StatsConf() StatsConf { return c.stats.get() }

// SetStatsConf replaces the reporting configuration (validated by the caller).
func (c *Cell) SetStatsConf(sc StatsConf) { c.stats.set(sc) }

// due tells whether a snapshot is due at TTI tti (sf is in ms; an NR slot is shorter).
func (s *statsConf) due(tti int64, ttisPerMs int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := s.pending
	s.pending = false
	switch s.conf.ReportFrequency {
	case "FLSRF_CONTINUOUS":
		return true
	case "FLSRF_PERIODICAL":
		return pending || tti%(int64(s.conf.SF)*ttisPerMs) == 0
	case "FLSRF_ONCE":
		return pending
	}
	return false // FLSRF_OFF: the last report stays
}

// BearerSnapshot is a bearer's MAC/RLC/PDCP state at one TTI.
type BearerSnapshot struct {
	B                       *Bearer
	CQI, MCS, TBS, PRB      int
	PRBRetx, HARQRound      int
	HARQACK                 [16]bool // last outcome per HARQ process (the first HARQProcs)
	HARQProcs               int
	QueueBytes, HOLms       int
	ULQueueBytes, TBSUl     int
	TotalTBS, TotalPRB      uint64
	TotalPDU                uint64
	LastSDU                 int
	DLPkts, DLBytes         uint64
	DLPktsW, DLBytesW       uint64 // since the previous snapshot
	DLLastArrival           int64
	ULPkts, ULBytes         uint64
	ULPktsW, ULBytesW       uint64
	DeliveredBytes, ULDeliv uint64
	LoS                     bool
	// uplink MAC (zero without one): this TTI's grant, running sums, power headroom
	ULPRB, ULPRBRetx, ULMCS int
	ULCQI, PHR              int
	ULTotalPRB, ULTotalTBS  uint64
}

// CellSnapshot is what the northbound serves for one cell until the next one.
type CellSnapshot struct {
	Cell    *Cell
	Wall    time.Time
	TTI     int64
	Bearers []BearerSnapshot
}

// SfnSf is the LTE system frame/subframe number as FlexRAN reports it (frame*10+sf).
func (s *CellSnapshot) SfnSf() int64 { return (s.TTI / s.Cell.ttisPerMs()) % 10240 }

// Ms is the snapshot's time since the emulator started, in ms (1 ms per LTE TTI).
func (s *CellSnapshot) Ms() int64 { return s.TTI / s.Cell.ttisPerMs() }

func (c *Cell) ttisPerMs() int64 { return max(1, 1_000_000/c.ttiNs) }

// Snapshot is the cell's current report (nil before the first one).
func (c *Cell) Snapshot() *CellSnapshot { return c.snap.Load() }

type snapPointer = atomic.Pointer[CellSnapshot]

func (c *Cell) maybeSnapshot(tti int64, start int64) {
	if !c.stats.due(tti, c.ttisPerMs()) {
		return
	}
	prev := c.snap.Load()
	s := &CellSnapshot{Cell: c, Wall: time.Now(), TTI: tti, Bearers: make([]BearerSnapshot, len(c.bearers))}
	for i, b := range c.bearers {
		bs := &s.Bearers[i]
		b.snapshot(bs, start)
		if prev != nil {
			p := prev.Bearers[i]
			bs.DLPktsW, bs.DLBytesW = bs.DLPkts-p.DLPkts, bs.DLBytes-p.DLBytes
			bs.ULPktsW, bs.ULBytesW = bs.ULPkts-p.ULPkts, bs.ULBytes-p.ULBytes
		}
	}
	c.snap.Store(s)
}

func (b *Bearer) snapshot(s *BearerSnapshot, now int64) {
	m := &b.mac
	s.QueueBytes = b.backlog(now) + b.inbox.Bytes() // FlexRAN's txQueueSize
	if born := b.oldestBorn(); born != 0 {
		s.HOLms = int((now - born) / 1e6)
	}
	s.ULQueueBytes = b.ul.Bytes() + b.ulInbox.Bytes()
	s.PHR = b.Cfg.PHR
	s.DLLastArrival = b.lastArrivalTTI.Load()
	s.B = b
	s.CQI, s.MCS, s.TBS, s.PRB = m.radio.CQI, m.mcs, m.tbs, m.prb
	s.PRBRetx, s.HARQRound, s.LoS = m.prbRetx, m.harqRound, m.radio.LoS
	s.TBSUl = m.ulLast
	s.HARQProcs = len(b.harq)
	for i := range b.harq {
		s.HARQACK[i] = !b.harq[i].used || b.harq[i].lastACK
	}
	s.TotalTBS, s.TotalPRB, s.TotalPDU, s.LastSDU = m.totalTBS, m.totalPRB, m.totalPDU, m.lastSDU
	s.DLPkts, s.DLBytes = b.C.DLArrivedPkts.Load(), b.C.DLArrivedBytes.Load()
	s.ULPkts, s.ULBytes = b.C.ULArrivedPkts.Load(), b.C.ULArrivedBytes.Load()
	s.DeliveredBytes, s.ULDeliv = b.C.DLDeliveredBytes.Load(), b.C.ULDeliveredBytes.Load()
	s.ULTotalTBS = s.ULDeliv // a rate uplink: its bytes are its transport blocks
	if b.up != nil {
		b.up.snapshotUplink(s, now)
	}
}

// snapshotUplink reports the uplink MAC's TTI: the UE's buffer for the BSR, the grant
// (tbsUl is this TTI's transport block, 0 without a grant, as tbsDl), its PHR.
func (up *Bearer) snapshotUplink(s *BearerSnapshot, now int64) {
	m := &up.mac
	s.ULQueueBytes = up.backlog(now) + up.inbox.Bytes()
	s.TBSUl, s.ULPRB, s.ULPRBRetx, s.ULMCS, s.ULCQI = m.tbs, 0, m.prbRetx, m.mcs, m.radio.CQI
	if m.tbs > 0 {
		s.ULPRB = m.prb
	}
	s.PHR = phrFor(up.Cfg.PHR, s.ULPRB)
	s.ULTotalPRB, s.ULTotalTBS = m.totalPRB, m.totalTBS
}

// SlotsPerFrame is the number of TTIs in a 10 ms radio frame (10 in LTE, 10·2^µ in NR).
func (c *Cell) SlotsPerFrame() int64 { return 10 * c.ttisPerMs() }

// FrameSlot is the snapshot's radio frame (0..1023) and slot within it, as an E2 MAC
// service model reports them.
func (s *CellSnapshot) FrameSlot() (frame, slot int64) {
	per := s.Cell.SlotsPerFrame()
	return (s.TTI / per) % 1024, s.TTI % per
}
