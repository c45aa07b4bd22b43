package e2

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
)

// Skip reasons (rnis_parse_errors_total{reason}).
const (
	SkipBadUE     = "bad_ue"      // a UE or bearer entry with a missing or out-of-range value
	SkipUnknownUE = "unknown_ue"  // an RLC bearer of a UE the node's next MAC indication does not list
	SkipBadLine   = "bad_message" // a line that is not an mts-e2 v1 indication
)

// FirstDRBLCID is the logical channel id the pipeline gives RLC bearer 1 (DRB 1): FlexRAN's
// numbering, where the data bearers are lcid ≥ 3 (meas sums their queues).
const FirstDRBLCID = 3

// NodeGone is how long a node's last MAC report stays in the snapshots after its last
// indication: then its UEs are missing and detach (uestate.Tracker).
const NodeGone = time.Second

// Assembler keeps each node's latest RLC and MAC reports and turns each MAC indication into
// a snapshot of every node that reported within NodeGone (one station per node, bs_id = its
// nb_id): the pipeline takes a snapshot as the whole RAN, so one node's report must not
// make the other nodes' UEs look gone. Use it from one goroutine.
type Assembler struct {
	nodes map[string]*nodeState
}

type nodeState struct {
	rlc     map[int64][]flexran.RLCReport // by RNTI, from the latest RLC indication
	macs    map[int64]bool                // RNTIs of the MAC indication being read
	lastDL  map[int64]downlink            // by RNTI, from the previous MAC indication
	station flexran.Station               // from the latest MAC indication
	seen    time.Time                     // when it arrived (zero: none yet)
}

// Dropped is an entry left out of an indication, and why.
type Dropped struct {
	Reason string // SkipBadUE or SkipUnknownUE
	Detail string
}

// Add takes one indication that arrived at now. A MAC indication returns the snapshot, its
// UEs joined with the node's latest RLC indication (a source sends a report's RLC line
// before its MAC line); an RLC one only updates the node's bearers (nil snapshot). Entries
// that cannot be used are returned as dropped: bearers of UEs the next MAC indication does
// not list among them.
func (a *Assembler) Add(ind *Indication, now time.Time) (*flexran.Snapshot, []Dropped) {
	if a.nodes == nil {
		a.nodes = map[string]*nodeState{}
	}
	key := ind.Node.Key()
	ns := a.nodes[key]
	if ns == nil {
		if len(a.nodes) >= 4096 { // a source inventing node ids must not grow this forever
			clear(a.nodes)
		}
		ns = &nodeState{rlc: map[int64][]flexran.RLCReport{}, macs: map[int64]bool{}, lastDL: map[int64]downlink{}}
		a.nodes[key] = ns
	}
	switch ind.Type {
	case KindMAC:
		snap, dropped := ns.mac(ind)
		ns.seen = now
		a.addOthers(snap, key, now)
		return snap, dropped
	case KindRLC:
		return nil, ns.rlcReport(ind)
	}
	return nil, nil
}

// addOthers adds the latest station of every other node that reported within NodeGone, in
// a fixed order (by node key).
func (a *Assembler) addOthers(snap *flexran.Snapshot, self string, now time.Time) {
	if len(a.nodes) == 1 {
		return
	}
	keys := make([]string, 0, len(a.nodes))
	for k, ns := range a.nodes {
		if k != self && !ns.seen.IsZero() && now.Sub(ns.seen) < NodeGone {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		snap.Stations = append(snap.Stations, a.nodes[k].station)
	}
}

func (ns *nodeState) rlcReport(ind *Indication) []Dropped {
	var dropped []Dropped
	clear(ns.rlc)
	for i := range ind.Bearers {
		b := &ind.Bearers[i]
		if why := checkBearer(b); why != "" {
			dropped = append(dropped, Dropped{SkipBadUE, fmt.Sprintf("rb %d: %s", i, why)})
			continue
		}
		r := flexran.RLCReport{LCID: flexran.Some(b.RBID.V + FirstDRBLCID - 1), TxQueue: b.TxBufOccBytes}
		if b.TxSDUWaitUs.Set {
			r.TxHOL = flexran.Some(b.TxSDUWaitUs.V / 1000) // the pipeline's unit is ms
		}
		ns.rlc[b.RNTI.V] = append(ns.rlc[b.RNTI.V], r)
	}
	return dropped
}

func (ns *nodeState) mac(ind *Indication) (*flexran.Snapshot, []Dropped) {
	n := ind.Node
	st := flexran.Station{BSID: n.NBID, Cells: []flexran.Cell{cellOf(n, ind.Cell)}}
	slots := slotsPerFrame(ind.Cell)
	var harq flexran.Int
	if ind.Cell != nil {
		harq = ind.Cell.HARQProcesses
	}
	snap := &flexran.Snapshot{}
	var dropped []Dropped
	clear(ns.macs)
	for i := range ind.UEs {
		u := &ind.UEs[i]
		if why := checkUE(u); why != "" {
			snap.Skipped = append(snap.Skipped, flexran.Skip{BSID: st.BSID, Index: i, Reason: why})
			dropped = append(dropped, Dropped{SkipBadUE, fmt.Sprintf("ue %d: %s", i, why)})
			continue
		}
		rnti := u.RNTI.V
		if ns.macs[rnti] {
			snap.Skipped = append(snap.Skipped, flexran.Skip{BSID: st.BSID, Index: i, Reason: "rnti listed twice"})
			dropped = append(dropped, Dropped{SkipBadUE, fmt.Sprintf("ue %d: rnti %d listed twice", i, rnti)})
			continue
		}
		ns.macs[rnti] = true
		ns.readServed(u)
		ue := flexran.UEStats{RNTI: rnti, WBCQI: u.WBCQI, PHR: u.PHR, TBSDL: u.DLCurrTBS,
			PRBDL: u.DLSchedRB, MCS1DL: u.DLMCS1, HARQProcesses: harq, RLC: ns.rlc[rnti]}
		if u.Frame.Set && u.Slot.Set {
			// the pipeline dates reports by frame·10 + subframe (ranclock, decimal)
			ue.SFNSF = flexran.Some(u.Frame.V*10 + min(u.Slot.V, slots-1)*10/slots)
		}
		conf := flexran.UEConfig{RNTI: rnti, IMSI: u.IMSI}
		if u.UEIPv4 != "" {
			conf.IPv4 = netip.MustParseAddr(u.UEIPv4) // checked by checkUE
		}
		var channels []flexran.LogicalChannel
		for _, r := range ue.RLC {
			channels = append(channels, flexran.LogicalChannel{LCID: r.LCID})
		}
		st.UEs = append(st.UEs, ue)
		st.UEConfig = append(st.UEConfig, conf)
		st.LCConfig = append(st.LCConfig, flexran.LCConfig{RNTI: rnti, Channels: channels})
	}
	ns.station = st
	for rnti := range ns.lastDL {
		if !ns.macs[rnti] {
			delete(ns.lastDL, rnti)
		}
	}
	for rnti := range ns.rlc {
		if !ns.macs[rnti] { // counted once: its entry goes
			dropped = append(dropped, Dropped{SkipUnknownUE, fmt.Sprintf("rlc of rnti %d, which the node's MAC report does not list", rnti)})
			delete(ns.rlc, rnti)
		}
	}
	snap.Stations = []flexran.Station{st}
	return snap, dropped
}

// downlink is what a UE's MAC reports said of its downlink: dl_aggr_tbs of the previous
// report, and the last transport block (with its PRBs) any report showed.
type downlink struct{ aggr, tbs, prbs Int }

// readServed corrects two readings of OAI's MAC service model that a live gNB showed
// (docs/e2.md, testdata/e2/oai-*). Its dl_curr_tbs and dl_sched_rb are the TB of the
// report's own slot: 0 in every slot the UE was not scheduled in (uplink slots, and the
// downlink slots of other UEs) although it is being served. Its wb_cqi stays 0 until the
// UE's first CSI report (a UE without CSI reporting never sends one). dl_aggr_tbs tells
// them apart: when it grew since the UE's previous report the UE was served, so zeros are
// its last TB and PRBs, not "nothing scheduled", and a CQI of 0 is "not reported", not
// "out of range". A source without dl_aggr_tbs is read as it is.
func (ns *nodeState) readServed(u *MACUE) {
	last, known := ns.lastDL[u.RNTI.V]
	served := known && u.DLAggrTBS.Set && last.aggr.Set && u.DLAggrTBS.V > last.aggr.V
	if u.DLCurrTBS.Set && u.DLCurrTBS.V > 0 {
		last.tbs, last.prbs = u.DLCurrTBS, u.DLSchedRB
	} else if served && u.DLCurrTBS.Set && last.tbs.Set {
		u.DLCurrTBS, u.DLSchedRB = last.tbs, last.prbs
	}
	if served && u.WBCQI.Set && u.WBCQI.V == 0 {
		u.WBCQI = Int{}
	}
	last.aggr = u.DLAggrTBS
	ns.lastDL[u.RNTI.V] = last
}

// slotsPerFrame is the cell's 10·2^µ, 10 (LTE, NR µ = 0) when the source does not say.
func slotsPerFrame(c *Cell) int64 {
	if c != nil && c.SlotsPerFrame.Set && c.SlotsPerFrame.V >= 10 {
		return c.SlotsPerFrame.V
	}
	return 10
}

// cellOf is the node's one cell: the PLMN of its E2 id, PCI and bandwidth as the source
// knows them (unset when it does not).
func cellOf(n *Node, c *Cell) flexran.Cell {
	cell := flexran.Cell{PLMNs: []flexran.PLMN{{MCC: n.MCC, MNC: n.MNC, MNCLength: n.MNCDigits}}}
	if c != nil {
		cell.PhyCellID, cell.DLBandwidth = c.PCI, c.DLPRBs
	}
	if strings.HasPrefix(n.RAN, "gNB") {
		cell.NR = &flexran.NRCell{PDSCHSymbols: OAIPDSCHSymbols, SlotsPerSubframe: slotsPerFrame(c) / 10}
		if c != nil && c.PDSCHSymbols.Set {
			cell.NR.PDSCHSymbols = c.PDSCHSymbols.V
		}
	}
	return cell
}
