// Package ran is the emulated radio access network: cells with a MAC scheduler per TTI,
// HARQ, RLC UM/AM, per-UE queues and channel models, and the delay stages around them.
package ran

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"time"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
)

// Config is the emulator's configuration file (JSON; `testbed up` writes it from YAML).
type Config struct {
	StatsPeriodMS int          `json:"stats_period_ms"` // initial FlexRAN reporting period (sf)
	SpinUS        int          `json:"spin_us"`         // busy-wait before each tick, for punctuality
	RTPriority    int          `json:"rt_priority"`     // SCHED_FIFO priority of the TTI clock (0: none)
	DLTun         TunRef       `json:"dl_tun"`          // where packets for the UEs arrive (RAN namespace)
	Cells         []CellConfig `json:"cells"`
	UEs           []UEConfig   `json:"ues"`
	WAN           *WANConfig   `json:"wan,omitempty"`
	Seed          uint64       `json:"seed"`
}

// TunRef names a TUN device in a network namespace ("" = the emulator's own).
type TunRef struct {
	Netns string `json:"netns"`
	Name  string `json:"name"`
}

// CellConfig is one eNB/gNB cell; each cell is reported as its own base station.
type CellConfig struct {
	BSID       uint64 `json:"bs_id"`
	PhyCellID  int    `json:"phy_cell_id"`
	RAT        string `json:"rat"`        // "lte" or "nr"
	Numerology int    `json:"numerology"` // NR µ 0..3 (TTI = 1 ms / 2^µ); LTE: 0
	PRB        int    `json:"prb"`
	Scheduler  string `json:"scheduler"` // "rr" or "pf"
	PFWindow   int    `json:"pf_window_ttis"`
	HARQ       struct {
		Processes int `json:"processes"`
		RTTTTIs   int `json:"rtt_ttis"`
		MaxRetx   int `json:"max_retx"`
	} `json:"harq"`
	RLC struct {
		Mode          string  `json:"mode"`             // "um" or "am"
		AMRetxDelayMS float64 `json:"am_retx_delay_ms"` // ARQ: status report + retransmission delay
	} `json:"rlc"`
	Band   int     `json:"band"`
	DLFreq float64 `json:"dl_freq_mhz"`
	ULFreq float64 `json:"ul_freq_mhz"`
	MCC    int     `json:"mcc"`
	MNC    int     `json:"mnc"`
	// Uplink, when set, runs an uplink MAC for the cell (uplink.go); without it the
	// uplink is a rate and a delay per bearer.
	Uplink *UplinkConfig `json:"uplink,omitempty"`
}

// UEConfig is one UE; it has one bearer per cell it is attached to.
type UEConfig struct {
	Name    string         `json:"name"`
	IMSI    string         `json:"imsi"`
	Bearers []BearerConfig `json:"bearers"`
}

// BearerConfig is a UE's default data bearer on one cell: its own RNTI, IP and interface.
type BearerConfig struct {
	BSID       uint64        `json:"bs_id"`
	RNTI       uint16        `json:"rnti"`
	IP         netip.Addr    `json:"ip"`
	Tun        TunRef        `json:"tun"`
	DelayMS    float64       `json:"delay_ms"`    // RAN one-way delay, downlink
	ULDelayMS  float64       `json:"ul_delay_ms"` // uplink one-way delay
	ULRateMbps float64       `json:"ul_rate_mbps"`
	ULLimit    int           `json:"ul_limit_bytes"`
	PHR        int           `json:"phr"`
	Queue      QueueConfig   `json:"queue"`
	Channel    ChannelConfig `json:"channel"`
	// With the cell's uplink MAC (uplink.go): the UE's modem buffer, the uplink channel
	// (default: the downlink's) and where the UE's grant feed is pinned (grantfeed.go).
	ULBufferBytes int            `json:"ul_buffer_bytes"`
	ULChannel     *ChannelConfig `json:"ul_channel,omitempty"`
	GrantFeed     string         `json:"grant_feed"`
}

// QueueConfig is the RLC buffer of a bearer.
type QueueConfig struct {
	Discipline string  `json:"discipline"` // fifo, codel, fq_codel, dualpi2
	LimitBytes int     `json:"limit_bytes"`
	TargetMS   float64 `json:"target_ms"`
	IntervalMS float64 `json:"interval_ms"`
	Flows      int     `json:"flows"`
	Quantum    int     `json:"quantum"`
}

// WANConfig is the delay stage between the content server and the MEC host.
type WANConfig struct {
	ServerTun TunRef  `json:"server_tun"`
	MECTun    TunRef  `json:"mec_tun"`
	DelayMS   float64 `json:"delay_ms"` // one way, each direction
	RateMbps  float64 `json:"rate_mbps"`
	Limit     int     `json:"limit_bytes"`
	// Queue is the bottleneck's discipline: "fifo" (tail drop at limit_bytes, default) or
	// "dualpi2" (RFC 9332, Linux defaults; CE marks; wan_aqm.go).
	Queue string `json:"queue,omitempty"`
	// ReorderPct is the share of each direction's packets (in %) sent on without the
	// delay, so that they overtake what is in it, as netem's `delay d reorder p` does
	// (research 001's Tables 7.2/7.3). 0: in order.
	ReorderPct float64 `json:"reorder_pct,omitempty"`
	// JitterMS adds a uniform draw in [-jitter, +jitter] to each packet's delay, kept in
	// order (a packet is never due before the one ahead of it), as netem's `rate ...
	// delay d J` (research 001's Table 8.4). 0: none. At most delay_ms.
	JitterMS float64 `json:"jitter_ms,omitempty"`
	// DualPI2Coupling (k) and DualPI2StepUS (the L queue's step threshold, µs) replace
	// the Linux defaults (2 and 1000) of queue "dualpi2", for experiments (k = 0: no
	// coupled marking of L packets).
	DualPI2Coupling *float64 `json:"dualpi2_coupling,omitempty"`
	DualPI2StepUS   *float64 `json:"dualpi2_step_us,omitempty"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(raw)
}

// ParseConfig decodes JSON (unknown fields are errors), fills defaults and validates.
func ParseConfig(raw []byte) (*Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.fillDefaults()
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return &c, nil
}

func (c *Config) fillDefaults() {
	if c.StatsPeriodMS == 0 {
		c.StatsPeriodMS = 100 // flexran-rtc asks its agents for a report every 100 ms
	}
	if c.SpinUS == 0 {
		c.SpinUS = 30
	}
	if c.RTPriority == 0 {
		c.RTPriority = 10
	} else if c.RTPriority < 0 {
		c.RTPriority = 0 // -1 in the file: a normal thread
	}
	for i := range c.Cells {
		cell := &c.Cells[i]
		defaultStr(&cell.RAT, "lte")
		defaultStr(&cell.Scheduler, "rr")
		defaultStr(&cell.RLC.Mode, "um")
		defaultInt(&cell.PRB, 25)
		defaultInt(&cell.PFWindow, 100)
		defaultInt(&cell.HARQ.Processes, 8)
		defaultInt(&cell.HARQ.RTTTTIs, 8)
		if cell.HARQ.MaxRetx == 0 {
			cell.HARQ.MaxRetx = 4
		} else if cell.HARQ.MaxRetx < 0 {
			cell.HARQ.MaxRetx = 0 // -1 in the file means "no retransmission"
		}
		if cell.RLC.AMRetxDelayMS == 0 {
			cell.RLC.AMRetxDelayMS = 20
		}
		defaultInt(&cell.Band, 7)
		if cell.DLFreq == 0 {
			cell.DLFreq, cell.ULFreq = 2680, 2560
		}
		defaultInt(&cell.MCC, 208)
		defaultInt(&cell.MNC, 93)
		cell.fillUplinkDefaults()
	}
	for i := range c.UEs {
		for j := range c.UEs[i].Bearers {
			b := &c.UEs[i].Bearers[j]
			defaultStr(&b.Queue.Discipline, "fifo")
			defaultInt(&b.Queue.LimitBytes, 1<<20)
			defaultInt(&b.ULLimit, 1<<20)
			defaultInt(&b.PHR, 40)
			if b.Channel.Model == "" {
				b.Channel.Model = "fixed"
			}
			b.fillUplinkDefaults()
		}
	}
	if c.WAN != nil {
		defaultInt(&c.WAN.Limit, 4<<20)
	}
}

func (c *Config) validate() error {
	if c.DLTun.Name == "" {
		return fmt.Errorf("dl_tun.name is required")
	}
	if len(c.Cells) == 0 {
		return fmt.Errorf("at least one cell is required")
	}
	cells := map[uint64]*CellConfig{}
	for i := range c.Cells {
		cell := &c.Cells[i]
		if err := cell.validate(); err != nil {
			return fmt.Errorf("cell %d: %w", cell.BSID, err)
		}
		if cells[cell.BSID] != nil {
			return fmt.Errorf("cell bs_id %d is used twice", cell.BSID)
		}
		cells[cell.BSID] = cell
	}
	ips := map[netip.Addr]bool{}
	for _, ue := range c.UEs {
		if len(ue.Bearers) == 0 {
			return fmt.Errorf("ue %q has no bearer", ue.Name)
		}
		for _, b := range ue.Bearers {
			if err := b.validate(cells); err != nil {
				return fmt.Errorf("ue %q cell %d: %w", ue.Name, b.BSID, err)
			}
			if ips[b.IP] {
				return fmt.Errorf("ue %q: ip %s is used twice", ue.Name, b.IP)
			}
			ips[b.IP] = true
		}
	}
	if c.StatsPeriodMS < 1 {
		return fmt.Errorf("stats_period_ms must be >= 1")
	}
	if c.WAN != nil && !(c.WAN.ReorderPct >= 0 && c.WAN.ReorderPct <= 100) {
		return fmt.Errorf("wan.reorder_pct %v: want 0..100", c.WAN.ReorderPct)
	}
	if c.WAN != nil && !(c.WAN.JitterMS >= 0 && c.WAN.JitterMS <= c.WAN.DelayMS) {
		return fmt.Errorf("wan.jitter_ms %v: want 0..delay_ms", c.WAN.JitterMS)
	}
	if c.WAN != nil && c.WAN.DualPI2Coupling != nil && !(*c.WAN.DualPI2Coupling >= 0) {
		return fmt.Errorf("wan.dualpi2_coupling %v: want >= 0", *c.WAN.DualPI2Coupling)
	}
	if c.WAN != nil && c.WAN.DualPI2StepUS != nil && !(*c.WAN.DualPI2StepUS > 0) {
		return fmt.Errorf("wan.dualpi2_step_us %v: want > 0", *c.WAN.DualPI2StepUS)
	}
	return nil
}

func (cell *CellConfig) validate() error {
	switch {
	case cell.RAT != "lte" && cell.RAT != "nr":
		return fmt.Errorf("rat %q: want lte or nr", cell.RAT)
	case cell.RAT == "lte" && cell.Numerology != 0:
		return fmt.Errorf("LTE has numerology 0 only")
	case cell.Numerology < 0 || cell.Numerology > 3:
		return fmt.Errorf("numerology %d outside 0..3", cell.Numerology)
	case cell.RAT == "lte" && (cell.PRB < 1 || cell.PRB > 110):
		return fmt.Errorf("prb %d outside 1..110", cell.PRB)
	case cell.PRB < 1 || cell.PRB > 275:
		return fmt.Errorf("prb %d outside 1..275", cell.PRB)
	case cell.Scheduler != "rr" && cell.Scheduler != "pf":
		return fmt.Errorf("scheduler %q: want rr or pf", cell.Scheduler)
	case cell.HARQ.Processes < 1 || cell.HARQ.Processes > 16:
		return fmt.Errorf("harq.processes %d outside 1..16", cell.HARQ.Processes)
	case cell.HARQ.RTTTTIs < cell.HARQ.Processes:
		return fmt.Errorf("harq.rtt_ttis %d must be >= processes", cell.HARQ.RTTTTIs)
	case cell.RLC.Mode != "um" && cell.RLC.Mode != "am":
		return fmt.Errorf("rlc.mode %q: want um or am", cell.RLC.Mode)
	}
	return cell.validateUplink()
}

func (b *BearerConfig) validate(cells map[uint64]*CellConfig) error {
	switch {
	case cells[b.BSID] == nil:
		return fmt.Errorf("no such cell")
	case !b.IP.Is4():
		return fmt.Errorf("ip %q: an IPv4 address is required", b.IP)
	case b.Tun.Name == "":
		return fmt.Errorf("tun.name is required")
	case b.DelayMS < 0 || b.ULDelayMS < 0 || b.ULRateMbps < 0:
		return fmt.Errorf("delays and rates must not be negative")
	case b.RNTI == 0:
		return fmt.Errorf("rnti must be 1..65535")
	}
	if _, err := aqm.New(b.Queue.params(), func(*pkt.Packet, bool) {}); err != nil {
		return err
	}
	if err := b.Channel.validate(); err != nil {
		return err
	}
	return b.validateUplink(cells[b.BSID])
}

func (q QueueConfig) params() aqm.Params {
	p := aqm.Defaults()
	p.Discipline, p.LimitBytes = q.Discipline, q.LimitBytes
	if q.TargetMS > 0 {
		p.Target = msDuration(q.TargetMS)
	}
	if q.IntervalMS > 0 {
		p.Interval = msDuration(q.IntervalMS)
	}
	if q.Flows > 0 {
		p.Flows = q.Flows
	}
	if q.Quantum > 0 {
		p.Quantum = q.Quantum
	}
	return p
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func defaultStr(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

func defaultInt(i *int, v int) {
	if *i == 0 {
		*i = v
	}
}
