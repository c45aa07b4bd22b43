package ran

import (
	"fmt"
	"sort"
	"sync/atomic"

	"mts.invalid/suite/services/common/go/threegpp"
)

// Cell is one eNB/gNB cell: its bearers, the TBS table for its bandwidth and the MAC
// scheduler that runs once per TTI.
type Cell struct {
	Cfg     CellConfig
	Index   int
	bearers []*Bearer
	ttiNs   int64
	// tbs[mcs][nprb] in bytes, precomputed from the 3GPP tables.
	tbs   [][]int
	rrPtr int
	cands []*Bearer

	TTI         atomic.Int64 // TTIs run so far
	PRBUsedLast atomic.Int64 // PRBs used in the last TTI
	stats       statsConf
	snap        snapPointer

	ul        *Cell // the uplink MAC (uplink.go), nil: the uplink is a rate per bearer
	isUplink  bool  // this Cell is another cell's uplink
	lastGrant Grant // uplink: the cell-wide part of the last TTI's grants
}

func newCell(cfg CellConfig, index int) (*Cell, error) {
	c := &Cell{Cfg: cfg, Index: index, ttiNs: int64(threegpp.TTI(cfg.Numerology) * 1e9)}
	c.tbs = make([][]int, threegpp.MaxLTEMCS+1)
	for mcs := range c.tbs {
		c.tbs[mcs] = make([]int, cfg.PRB+1)
		for n := 1; n <= cfg.PRB; n++ {
			bytes, err := tbsTableBytes(cfg.RAT == "nr", mcs, n)
			if err != nil {
				return nil, fmt.Errorf("cell %d: TBS(mcs %d, %d PRB): %w", cfg.BSID, mcs, n, err)
			}
			c.tbs[mcs][n] = bytes
		}
	}
	return c, nil
}

// tbsTableBytes is the transport block (bytes) of MCS mcs on nprb PRBs: TS 36.213
// Table 7.1.7.2.1-1 (LTE) or the TS 38.214 §5.1.3.2 procedure (NR, threegpp.DefaultNR).
func tbsTableBytes(nr bool, mcs, nprb int) (int, error) {
	if !nr {
		return threegpp.LTETBSBytesForMCS(mcs, nprb)
	}
	bits, err := threegpp.NRTBSBits(nprb, mcs, threegpp.DefaultNR)
	return bits / 8, err
}

// mcsFor maps a CQI to the DL MCS (OpenAirInterface's map; for NR it is applied to MCS
// table 1, whose 29 entries follow the same QPSK/16QAM/64QAM progression).
func mcsFor(cqi int) int { return threegpp.CQIToMCS(cqi) }

// tbsBytes is the transport block size for a UE's radio on nprb PRBs.
func (c *Cell) tbsBytes(r Radio, nprb int) int {
	if nprb <= 0 || r.CQI == 0 {
		return 0
	}
	if r.CapacityMbps > 0 {
		perTTI := r.CapacityMbps * 1e6 / 8 * float64(c.ttiNs) / 1e9
		return int(perTTI * float64(nprb) / float64(c.Cfg.PRB))
	}
	return c.tbs[mcsFor(r.CQI)][nprb]
}

// prbsFor is the fewest PRBs whose TBS carries backlog bytes (all PRBs if none does).
func (c *Cell) prbsFor(r Radio, backlog int) int {
	return sort.Search(c.Cfg.PRB, func(i int) bool { return c.tbsBytes(r, i+1) >= backlog }) + 1
}

// runTTI is one TTI: channel, HARQ retransmissions, scheduling of new data, RLC
// delivery. start is the TTI's start on the emulator clock (ns), t the same in seconds.
func (c *Cell) runTTI(start int64) {
	tti := c.TTI.Add(1) - 1
	proc := int(tti % int64(c.Cfg.HARQ.Processes))
	t := float64(start) / 1e9
	free := c.Cfg.PRB
	c.cands = c.cands[:0]
	for _, b := range c.bearers {
		b.now = start
		b.mac.tbs = 0 // as OAI: tbsDl is this TTI's transport block, 0 when the UE gets none
		b.mac.radio = b.ch.Step(t)
		b.mac.ulLast, b.mac.ulTBS = b.mac.ulTBS, 0
		b.mac.mcs = mcsFor(b.mac.radio.CQI)
		b.drainInbox()
		h := &b.harq[proc]
		if h.busy {
			free -= h.nprb
			b.transmit(h, start, true)
			continue
		}
		if b.mac.radio.CQI > 0 && b.hasData(start) {
			b.need = c.prbsFor(b.mac.radio, b.backlog(start))
			c.cands = append(c.cands, b)
		}
	}
	c.allocate(max(free, 0))
	used := c.Cfg.PRB - free
	for _, b := range c.cands {
		if b.alloc > 0 {
			h := &b.harq[proc]
			h.tbs = c.tbsBytes(b.mac.radio, b.alloc)
			h.nprb = b.alloc
			h.attempts = 0
			b.fill(h, h.tbs, start)
			used += b.alloc
			b.transmit(h, start, false)
		}
	}
	c.PRBUsedLast.Store(int64(used))
	for _, b := range c.bearers {
		b.updateAverage(c.Cfg.PFWindow)
		b.publishHeld(start, tti)
		b.release(start, int64(b.Cfg.DelayMS*1e6), b.mac.radio.Loss)
	}
	if c.isUplink {
		c.grants(tti, start, used) // reported with the downlink cell's snapshot
		return
	}
	c.maybeSnapshot(tti, start)
}

// runCellTTI runs one TTI of a cell: its uplink first, so that the downlink's snapshot
// reports this TTI's uplink grants.
func (c *Cell) runCellTTI(start int64) {
	if c.ul != nil {
		c.ul.runTTI(start)
	}
	c.runTTI(start)
}

// transmit sends (or resends) the TB of process h and settles it on success or when
// the last allowed attempt fails.
func (b *Bearer) transmit(h *harqProc, now int64, retx bool) {
	h.attempts++
	h.used = true
	b.C.TBs.Add(1)
	b.C.TBBytes.Add(uint64(h.tbs))
	b.C.PRBs.Add(uint64(h.nprb))
	m := &b.mac
	m.tbs, m.prb, m.harqRound = h.tbs, h.nprb, h.attempts-1
	m.prbRetx = 0
	if retx {
		b.C.TBRetx.Add(1)
		m.prbRetx = h.nprb
	}
	m.totalTBS += uint64(h.tbs)
	m.totalPRB += uint64(h.nprb)
	m.totalPDU++
	m.lastSDU = 0
	for _, s := range h.segs {
		m.lastSDU += s.n
	}
	b.servedThisTTI += h.tbs
	if b.ch.fail(b.mac.radio.BLER) {
		h.lastACK = false
		if h.attempts > b.Cell.Cfg.HARQ.MaxRetx {
			b.C.TBFailures.Add(1)
			b.resolve(h, false, now)
			return
		}
		h.busy = true
		return
	}
	h.lastACK = true
	b.resolve(h, true, now)
}

// allocate shares free PRBs among the candidates (each wants b.need PRBs).
func (c *Cell) allocate(free int) {
	for _, b := range c.cands {
		b.alloc = 0
	}
	if len(c.cands) == 0 || free == 0 {
		return
	}
	if c.Cfg.Scheduler == "pf" {
		c.allocatePF(free)
		return
	}
	c.allocateRR(free)
}

// allocateRR is round robin by water filling: every backlogged UE gets an equal share,
// shares a UE does not need go to the others; the remainder PRBs rotate between UEs.
func (c *Cell) allocateRR(free int) {
	n := len(c.cands)
	c.rrPtr = (c.rrPtr + 1) % n
	for free > 0 {
		hungry := 0
		for _, b := range c.cands {
			if b.alloc < b.need {
				hungry++
			}
		}
		if hungry == 0 {
			return
		}
		share := max(free/hungry, 1)
		for i := 0; i < n && free > 0; i++ {
			b := c.cands[(c.rrPtr+i)%n]
			give := min(share, b.need-b.alloc, free)
			if give > 0 {
				b.alloc += give
				free -= give
			}
		}
	}
}

// allocatePF is proportional fair: UEs in order of (full-band rate) / (average served
// rate), each taking what it needs of what is left.
func (c *Cell) allocatePF(free int) {
	metric := func(b *Bearer) float64 {
		return float64(c.tbsBytes(b.mac.radio, c.Cfg.PRB)) / max(b.avgRate, 1)
	}
	sort.SliceStable(c.cands, func(i, j int) bool { return metric(c.cands[i]) > metric(c.cands[j]) })
	for _, b := range c.cands {
		if free == 0 {
			return
		}
		b.alloc = min(b.need, free)
		free -= b.alloc
	}
}

// updateAverage is the PF throughput average, an EWMA over window TTIs.
func (b *Bearer) updateAverage(window int) {
	a := 1 / float64(window)
	b.avgRate = (1-a)*b.avgRate + a*float64(b.servedThisTTI)
	b.servedThisTTI = 0
}

// Bearers lists the bearers served by the cell.
func (c *Cell) Bearers() []*Bearer { return c.bearers }
