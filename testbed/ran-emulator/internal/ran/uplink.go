package ran

import (
	"fmt"
	"math"
)

// The uplink MAC (issue 15). A cell with `uplink` set gets a second Cell that runs
// every TTI before the downlink one, with its own PRBs, scheduler, HARQ and TBS tables;
// each of its UEs gets a second Bearer whose queue is the UE's modem buffer (where
// uplink bufferbloat forms) and whose transport blocks carry the UE's packets to the
// RAN namespace. Everything per TTI (scheduling, TBS by MCS, HARQ, segmentation,
// in-order delivery) is the downlink's code run on the uplink's state: one owner per
// rule. What is uplink-only lives here: configuration, the grants a UE's DCI decoder
// sees (Grant, for the grant feed), PHR, and the wiring.
//
// Simplifications (docs/ran-emulator.md): the scheduler sees the UE's buffer exactly
// every TTI (an ideal BSR with no SR delay); PUSCH power is not modelled beyond the
// PHR a larger allocation costs; LTE uplink uses the downlink's MCS→I_TBS table.

// UplinkConfig is a cell's uplink MAC. HARQ and RLC mode are the cell's.
type UplinkConfig struct {
	PRB       int    `json:"prb"`       // uplink PRBs (default: the cell's)
	Scheduler string `json:"scheduler"` // rr or pf (default: the cell's)
}

// DefaultULBufferBytes is the UE's modem buffer: the research's 10 MB RLC buffer.
const DefaultULBufferBytes = 10 << 20

func (cell *CellConfig) fillUplinkDefaults() {
	if cell.Uplink == nil {
		return
	}
	defaultInt(&cell.Uplink.PRB, cell.PRB)
	defaultStr(&cell.Uplink.Scheduler, cell.Scheduler)
}

func (cell *CellConfig) validateUplink() error {
	if cell.Uplink == nil {
		return nil
	}
	ul := cell.uplinkCell()
	if err := ul.validate(); err != nil {
		return fmt.Errorf("uplink: %w", err)
	}
	return nil
}

// uplinkCell is the configuration the uplink's Cell runs with.
func (cell *CellConfig) uplinkCell() CellConfig {
	ul := *cell
	ul.PRB, ul.Scheduler, ul.Uplink = cell.Uplink.PRB, cell.Uplink.Scheduler, nil
	return ul
}

func (b *BearerConfig) fillUplinkDefaults() {
	defaultInt(&b.ULBufferBytes, DefaultULBufferBytes)
	if b.ULChannel != nil && b.ULChannel.Model == "" {
		b.ULChannel.Model = "fixed"
	}
}

func (b *BearerConfig) validateUplink(cell *CellConfig) error {
	if cell.Uplink == nil {
		if b.ULChannel != nil || b.GrantFeed != "" {
			return fmt.Errorf("ul_channel and grant_feed need the cell's uplink MAC (cell \"uplink\")")
		}
		return nil
	}
	if b.ULBufferBytes < 1500 {
		return fmt.Errorf("ul_buffer_bytes %d: at least one packet (1500)", b.ULBufferBytes)
	}
	if b.ULChannel != nil {
		if err := b.ULChannel.validate(); err != nil {
			return fmt.Errorf("ul_channel: %w", err)
		}
	}
	return nil
}

// uplinkBearer is the configuration of the UE's uplink bearer: its buffer is a tail-drop
// FIFO of ul_buffer_bytes, its channel the uplink one, its delay the uplink delay.
func (b *BearerConfig) uplinkBearer() BearerConfig {
	ul := *b
	ul.DelayMS = b.ULDelayMS
	ul.Queue = QueueConfig{Discipline: "fifo", LimitBytes: b.ULBufferBytes}
	if b.ULChannel != nil {
		ul.Channel = *b.ULChannel
	}
	return ul
}

// attachUplink builds the uplink MAC of cell c and the uplink bearers of its UEs (New).
func (c *Cell) attachUplink(seed uint64) error {
	if c.Cfg.Uplink == nil {
		return nil
	}
	ul, err := newCell(c.Cfg.uplinkCell(), c.Index)
	if err != nil {
		return fmt.Errorf("uplink: %w", err)
	}
	ul.isUplink = true
	c.ul = ul
	for i, b := range c.bearers {
		up, err := newBearer(b.UE, ul, b.Cfg.uplinkBearer(), seed+1<<32+uint64(1000*b.UE.Index+i))
		if err != nil {
			return fmt.Errorf("ue %q uplink: %w", b.UE.Cfg.Name, err)
		}
		b.up = up
		ul.bearers = append(ul.bearers, up)
	}
	return nil
}

// Uplink is the cell's uplink MAC (nil: the uplink is a rate per bearer).
func (c *Cell) Uplink() *Cell { return c.ul }

// Uplink is the UE's uplink bearer on this cell (nil without the cell's uplink MAC).
func (b *Bearer) Uplink() *Bearer { return b.up }

// Grant is what a UE's DCI decoder reads from one TTI of its cell's uplink: the
// research's P_cell, N, P_unused, P_current and MCS (SIGMA's inputs, §2.1).
type Grant struct {
	TTI        int64 // TTI index of the uplink cell
	StartNs    int64 // TTI start, CLOCK_MONOTONIC ns
	TTINs      int64 // TTI length, ns
	PCell      int   // P_cell: uplink PRBs of the cell
	NUsers     int   // N: UEs granted PRBs in this TTI (new data or HARQ retransmission)
	PUnused    int   // P_unused: PRBs granted to nobody
	PCurrent   int   // P_current: PRBs granted to this UE
	MCS        int   // this UE's uplink MCS
	NR         bool  // which TBS table the MCS indexes (false: LTE)
	BufferByte int   // the UE's modem buffer after the TTI (bytes; the modem knows it)
}

// grants runs at the end of an uplink TTI: the cell-wide part of every UE's grant.
func (c *Cell) grants(tti, start int64, used int) {
	n := 0
	for _, b := range c.bearers {
		if b.mac.tbs > 0 {
			n++
		}
	}
	c.lastGrant = Grant{TTI: tti, StartNs: start, TTINs: c.ttiNs, PCell: c.Cfg.PRB, NUsers: n,
		PUnused: max(c.Cfg.PRB-used, 0), NR: c.Cfg.RAT == "nr"}
	for _, b := range c.bearers {
		if f := b.feed.Load(); f != nil {
			f.write(b.grant(start))
		}
	}
}

// grant is this UE's view of the last uplink TTI (TTI thread).
func (b *Bearer) grant(now int64) Grant {
	g := b.Cell.lastGrant
	if b.mac.tbs > 0 {
		g.PCurrent = b.mac.prb
	}
	g.MCS = b.mac.mcs
	g.BufferByte = b.backlog(now) + b.inbox.Bytes()
	return g
}

// LastGrant is the grant of UE bearer b's last uplink TTI (offline use and tests: call
// it from the goroutine that runs Step).
func (b *Bearer) LastGrant() Grant { return b.grant(b.now) }

// phrFor is the power headroom report with nprb PRBs granted: the configured headroom
// (dB, at one PRB) less the 10·log10(M) dB that M PRBs cost at the same power density
// (TS 36.213 §5.1.1.1), clipped to the report's 0..63 range (TS 36.133 Table 9.1.8.4-1
// levels, reported as the level index).
func phrFor(configured, nprb int) int {
	if nprb <= 1 {
		return configured
	}
	return max(0, min(63, configured-int(math.Round(10*math.Log10(float64(nprb))))))
}
