// Package meas turns FlexRAN snapshots into RNIS measurements: one per UE per poll, with
// the values MELD, RAPID and the path manager need (schema: mec_common.bus.rnis.RnisMeasurement).
package meas

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/identity"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
	"mts.invalid/suite/services/common/go/threegpp"
)

// SchemaVersion is the feed's schema version (AMQP header "schema" and "schema_version").
const SchemaVersion = 1

// BestCQI is the CQI whose TBS bounds what a UE can get (MELD's S_TBm).
const BestCQI = 15

// Int is an optional integer (unset = not reported by the RAN source).
type Int = flexran.Int

// Measurement is the radio state of one UE in one cell at one poll.
type Measurement struct {
	Cell      string // <bs_id>-<phyCellId>
	BSID      int64
	PhyCellID Int
	RNTI      int64
	IMSI      string
	IPv4      netip.Addr
	ECGI      ECGI

	WBCQI, DLMCS, DLTBS, DLPRBs, CellPRBs Int
	NR                                    *flexran.NRCell // an NR cell's TBS and slot (tbsBytes)
	RLCQueue, RLCHOL                      Int
	RLC                                   []flexran.RLCReport
	HARQ, PHR, SFNSF, Frame, Subframe     Int
	SourceTimeNs                          Int   // when the report was measured (ranclock)
	SourceTimeUncNs                       Int   // its uncertainty: the report period
	ObservedNs                            int64 // when the adapter got the poll's answer
	TTINs                                 int64 // measured TTI length (ranclock), > 0

	BestCQITBS, CellBestCQITBS Int
	CellUEs                    int
	CellAllocPRBs              Int
	CellPRBUsage               float64 // valid when CellAllocPRBs and CellPRBs are set
	RapidPRBs, RapidCapacity   Int
	CQICapacity                Int
	RadioTBS                   Int // MELD's D_TBS on a real MAC (radioTBS)
	DLTBSRate                  Int // DLTBS as bit/s: the rate the UE got in its last TTI

	// For the MEC 012 side only (not in the AMQP message).
	ERABs []ERAB
	RRC   flexran.RRCMeas
	// ULTBS: the UE's uplink TB of the last TTI (bytes; 0 when it held no uplink PRBs),
	// ULPRBs its uplink PRBs, CellULPRBs the cell's uplink bandwidth.
	ULTBS, ULPRBs, CellULPRBs Int
}

// ERAB is one radio access bearer of a UE.
type ERAB struct {
	ID  int64
	QCI Int
}

// ECGI is the E-UTRAN cell global id (MEC 012 Ecgi): PLMN and the 28-bit cell identity.
type ECGI struct {
	MCC, MNC string // "" when the cell's PLMN is unknown
	CellID   string // 7 hex digits
}

// HasPRBUsage tells whether CellPRBUsage is meaningful.
func (m *Measurement) HasPRBUsage() bool {
	return m.CellAllocPRBs.Set && m.CellPRBs.Set && m.CellPRBs.V > 0
}

// Resolver maps a UE to its IPv4 address; nil, or a zero result, means unknown.
type Resolver interface {
	Lookup(imsi string, bsID, rnti int64) netip.Addr
}

// Normalize builds the measurements of one snapshot observed (answered) at the given time.
// The clock (one per source) dates each station's report; without one (a single document
// read on its own) the measurement time is unknown and the TTI nominal.
func Normalize(s *flexran.Snapshot, observed time.Time, ips Resolver, clock *ranclock.Clock) []Measurement {
	n := 0
	for i := range s.Stations {
		n += len(s.Stations[i].UEs)
	}
	out := make([]Measurement, 0, n)
	for i := range s.Stations {
		st := &s.Stations[i]
		out = appendStation(out, st, stationTime(st, observed, clock), observed.UnixNano(), ips)
	}
	return out
}

// stationTime dates a station's report from the sfnSn of its first UE that has one (the
// agent reports all its UEs at once).
func stationTime(st *flexran.Station, observed time.Time, clock *ranclock.Clock) timing {
	t := timing{format: ranclock.SFNDecimal, tti: ranclock.NominalTTI, holMeasured: reportsHOL(st)}
	if clock == nil {
		return t
	}
	var sfn flexran.Int
	for j := range st.UEs {
		if st.UEs[j].SFNSF.Set {
			sfn = st.UEs[j].SFNSF
			break
		}
	}
	r := clock.Observe(st.BSID, sfn.V, sfn.Set, observed)
	t.format, t.tti = clock.Format(), r.TTI
	t.measured = flexran.Some(r.MeasuredNs)
	if r.UncertaintyNs > 0 {
		t.uncertainty = flexran.Some(r.UncertaintyNs)
	}
	t.holMeasured = clock.HOLMeasured(st.BSID, reportsHOL(st))
	return t
}

// timing is what the clock says about one station's report.
type timing struct {
	measured, uncertainty Int
	tti                   time.Duration
	format                ranclock.SFNFormat
	holMeasured           bool
}

// reportsHOL tells whether a station reported a head-of-line delay other than 0 (OAI's
// agent always writes 0: it does not measure it).
func reportsHOL(st *flexran.Station) bool {
	for j := range st.UEs {
		for _, q := range st.UEs[j].RLC {
			if q.TxHOL.Set && q.TxHOL.V > 0 {
				return true
			}
		}
	}
	return false
}

func appendStation(out []Measurement, st *flexran.Station, t timing, observedNs int64, ips Resolver) []Measurement {
	first := len(out)
	type cellNames struct {
		key  string
		ecgi ECGI
	}
	names := map[*flexran.Cell]cellNames{} // formatted once per cell, not per UE
	arena := make([]ERAB, 0, len(st.UEs))
	for j := range st.UEs {
		ue := &st.UEs[j]
		conf := ueConfig(st, ue.RNTI)
		cell, cellIndex := servingCell(st, conf)
		m := Measurement{
			BSID: st.BSID, RNTI: ue.RNTI, IMSI: conf.IMSI, IPv4: conf.IPv4,
			WBCQI: ue.WBCQI, DLMCS: ue.MCS1DL, DLTBS: ue.TBSDL, DLPRBs: ue.PRBDL,
			PHR: ue.PHR, HARQ: ue.HARQProcesses, SFNSF: ue.SFNSF, RLC: ue.RLC, RRC: ue.RRC,
			SourceTimeNs: t.measured, SourceTimeUncNs: t.uncertainty, ObservedNs: observedNs,
			TTINs: int64(t.tti),
		}
		if m.DLTBS.Set && m.DLTBS.V == 0 && m.DLPRBs.Set {
			// no transport block in the last TTI: the UE held no PRBs then (OAI keeps the
			// prbDl of an earlier TTI: an idle UE reads 2 PRBs)
			m.DLPRBs = flexran.Some(0)
		}
		m.ULTBS, m.ULPRBs = ue.TBSUL, ue.PRBUL
		if m.ULTBS.Set && m.ULPRBs.Set && m.ULPRBs.V == 0 {
			// no uplink PRBs in the last TTI: no uplink TB then (OAI keeps the tbsUl of an
			// earlier grant: an idle UE reads 63 bytes with prbUl 0)
			m.ULTBS = flexran.Some(0)
		}
		if cell != nil {
			m.PhyCellID, m.CellPRBs, m.CellULPRBs = cell.PhyCellID, cell.DLBandwidth, cell.ULBandwidth
			m.NR = cell.NR
			if m.NR != nil && m.NR.SlotsPerSubframe > 1 { // a TB per slot: TTI = slot
				m.TTINs /= m.NR.SlotsPerSubframe
			}
		}
		n, ok := names[cell]
		if !ok {
			n = cellNames{CellKey(st.BSID, m.PhyCellID), makeECGI(st.BSID, cell, cellIndex)}
			names[cell] = n
		}
		m.Cell, m.ECGI = n.key, n.ecgi
		if !m.IPv4.IsValid() {
			m.IPv4 = ue.IPv4
		}
		if !m.IPv4.IsValid() && ips != nil {
			m.IPv4 = ips.Lookup(m.IMSI, st.BSID, m.RNTI)
		}
		if frame, sub, ok := t.format.Split(m.SFNSF.V); m.SFNSF.Set && ok {
			m.Frame, m.Subframe = flexran.Some(frame), flexran.Some(sub)
		}
		m.RLCQueue, m.RLCHOL = drbQueue(ue.RLC)
		if !t.holMeasured {
			m.RLCHOL = Int{} // the source writes 0 without measuring it: unknown
		}
		m.ERABs, arena = erabs(arena, st, ue)
		out = append(out, m)
	}
	deriveCell(out[first:])
	return out
}

// Sightings lists the UEs of a snapshot with what the source says about their identity
// (identity.Book learns addresses from them).
func Sightings(s *flexran.Snapshot) []identity.Sighting {
	var out []identity.Sighting
	for i := range s.Stations {
		st := &s.Stations[i]
		for j := range st.UEs {
			ue := &st.UEs[j]
			conf := ueConfig(st, ue.RNTI)
			addr := conf.IPv4
			if !addr.IsValid() {
				addr = ue.IPv4
			}
			out = append(out, identity.Sighting{Key: identity.Key{Station: st.BSID, UE: ue.RNTI}, IMSI: conf.IMSI, Addr: addr})
		}
	}
	return out
}

// CellKey is the cell's routing-key word: <bs_id>-<phyCellId>, "-" for an unknown part.
func CellKey(bsID int64, phy Int) string {
	if !phy.Set {
		return fmt.Sprintf("%d--", bsID)
	}
	return fmt.Sprintf("%d-%d", bsID, phy.V)
}

func ueConfig(st *flexran.Station, rnti int64) flexran.UEConfig {
	for _, c := range st.UEConfig {
		if c.RNTI == rnti {
			return c
		}
	}
	return flexran.UEConfig{RNTI: rnti}
}

// servingCell picks the cell whose carrierIndex is the UE's primary carrier (the first cell
// when either is unknown: OAI eNBs run one cell).
func servingCell(st *flexran.Station, conf flexran.UEConfig) (*flexran.Cell, int) {
	if len(st.Cells) == 0 {
		return nil, 0
	}
	if conf.PCellCarrier.Set {
		for i := range st.Cells {
			if c := &st.Cells[i]; c.CarrierIndex.Set && c.CarrierIndex.V == conf.PCellCarrier.V {
				return c, i
			}
		}
	}
	return &st.Cells[0], 0
}

// makeECGI builds the cell identity from the eNB id: a macro eNB id (20 bits) followed by an
// 8-bit cell index, or the eNB id itself when it is wider (a 28-bit home eNB id).
func makeECGI(bsID int64, cell *flexran.Cell, index int) ECGI {
	eci := bsID & 0xFFFFFFF
	if bsID < 1<<20 {
		eci = bsID<<8 | int64(index&0xFF)
	}
	e := ECGI{CellID: fmt.Sprintf("%07X", eci)}
	if cell != nil && len(cell.PLMNs) > 0 {
		p := cell.PLMNs[0]
		width := max(2, min(3, p.MNCLength))
		e.MCC = fmt.Sprintf("%03d", p.MCC)
		e.MNC = fmt.Sprintf("%0*d", width, p.MNC)
	}
	return e
}

// drbQueue sums the RLC queues of the data bearers (lcid >= 3) and takes their largest
// head-of-line delay.
func drbQueue(rlc []flexran.RLCReport) (queue, hol Int) {
	for _, q := range rlc {
		if !q.LCID.Set || q.LCID.V < 3 {
			continue
		}
		if q.TxQueue.Set {
			queue = flexran.Some(queue.V + q.TxQueue.V)
		}
		if q.TxHOL.Set && (!hol.Set || q.TxHOL.V > hol.V) {
			hol = q.TxHOL
		}
	}
	return queue, hol
}

// erabs lists the UE's E-RABs: gtpStats when the eNB reports them, else one per data bearer
// (E-RAB id = DRB id + 4 = lcid + 2, as OAI assigns them). They are appended to arena (one
// allocation for all UEs of a poll); it returns the UE's part and the grown arena.
func erabs(arena []ERAB, st *flexran.Station, ue *flexran.UEStats) (list, grown []ERAB) {
	drbs := make([]flexran.LogicalChannel, 0, 8)
	for _, lc := range st.LCConfig {
		if lc.RNTI != ue.RNTI {
			continue
		}
		for _, ch := range lc.Channels {
			if ch.LCID.V >= 3 {
				drbs = append(drbs, ch)
			}
		}
	}
	slices.SortFunc(drbs, func(a, b flexran.LogicalChannel) int { return cmp.Compare(a.LCID.V, b.LCID.V) })
	first := len(arena)
	if len(ue.ERABs) > 0 {
		for i, id := range ue.ERABs {
			e := ERAB{ID: id}
			if i < len(drbs) {
				e.QCI = drbs[i].QCI
			}
			arena = append(arena, e)
		}
	} else {
		for _, d := range drbs {
			arena = append(arena, ERAB{ID: d.LCID.V + 2, QCI: d.QCI})
		}
	}
	if len(arena) == first {
		return nil, arena
	}
	return arena[first:len(arena):len(arena)], arena
}

// deriveCell fills the per-cell and derived values of the UEs of one station.
func deriveCell(ues []Measurement) {
	type cellSum struct {
		ues   int
		alloc Int
	}
	sums := make(map[string]*cellSum, 1)
	for i := range ues {
		c := sums[ues[i].Cell]
		if c == nil {
			c = &cellSum{}
			sums[ues[i].Cell] = c
		}
		c.ues++
		if ues[i].DLPRBs.Set {
			c.alloc = flexran.Some(c.alloc.V + ues[i].DLPRBs.V)
		}
	}
	for i := range ues {
		m := &ues[i]
		c := sums[m.Cell]
		m.CellUEs, m.CellAllocPRBs = c.ues, c.alloc
		derive(m)
	}
}

func derive(m *Measurement) {
	m.CellBestCQITBS = m.tbsBytesForCQI(BestCQI, m.CellPRBs)
	if m.DLTBS.Set {
		m.DLTBSRate = m.BitsPerSecond(m.DLTBS.V)
	}
	if m.HasPRBUsage() {
		m.CellPRBUsage = float64(m.CellAllocPRBs.V) / float64(m.CellPRBs.V)
	}
	if m.WBCQI.Set {
		if m.WBCQI.V == 0 { // CQI 0: out of range, nothing gets through
			m.CQICapacity = flexran.Some(0)
		} else if tbs := m.tbsBytesForCQI(int(m.WBCQI.V), m.CellPRBs); tbs.Set {
			m.CQICapacity = m.BitsPerSecond(tbs.V)
		}
	}
	if m.DLPRBs.Set && m.CellPRBs.Set && m.CellAllocPRBs.Set {
		unused := max(0, m.CellPRBs.V-m.CellAllocPRBs.V)
		m.RapidPRBs = flexran.Some(min(m.DLPRBs.V+unused, m.CellPRBs.V))
		if tbs := m.tbsBytes(m.rapidMCS(), m.RapidPRBs); tbs.Set {
			m.RapidCapacity = m.BitsPerSecond(tbs.V)
		}
	}
	m.BestCQITBS = m.tbsBytesForCQI(BestCQI, m.schedulablePRBs())
	m.RadioTBS = m.radioTBS()
}

// radioTBS is MELD's D_TBS as a real MAC can give it: the transport block the UE gets per
// TTI when it has data, TBS(MCS(wb_cqi), Pe_i) bytes — its current CQI on the PRBs it holds
// plus the cell's unused ones (RAPID's Pe_i). FlexRAN's tbsDl is the TB of the last TTI only:
// 0 when nothing was queued, and sized to the queue when little was, so at light load
// (where a loss cannot be RAN congestion) it read as a radio too weak to carry a segment
// and MELD-DE kept the cwnd for only 11-16 % of losses on a live OAI eNB (issue 22).
// Measured on the live timelines and the emulator: docs/meld-rapid.md. Without a CQI (an
// OAI gNB before the UE's first CSI report, docs/e2.md) it is TBS(MCS, Pe_i) on the MCS the
// scheduler's link adaptation chose.
func (m *Measurement) radioTBS() Int {
	switch {
	case !m.RapidPRBs.Set:
		return Int{}
	case !m.WBCQI.Set:
		return m.tbsBytes(m.DLMCS, m.RapidPRBs)
	case m.WBCQI.V == 0: // out of range: nothing gets through
		return flexran.Some(0)
	}
	return m.tbsBytesForCQI(int(m.WBCQI.V), m.RapidPRBs)
}

// schedulablePRBs are the PRBs MELD's Q_th is taken on: those the UE held in the last TTI,
// or, when it held none (nothing queued), those it would get now (RAPID's Pe_i).
func (m *Measurement) schedulablePRBs() Int {
	if m.DLPRBs.Set && m.DLPRBs.V > 0 {
		return m.DLPRBs
	}
	if m.RapidPRBs.Set {
		return m.RapidPRBs
	}
	return m.DLPRBs
}

// rapidMCS is MCS_i: the UE's last DL MCS, or the MCS of its CQI when it has none yet.
func (m *Measurement) rapidMCS() Int {
	if m.DLMCS.Set && m.tbsBytes(m.DLMCS, flexran.Some(1)).Set {
		return m.DLMCS
	}
	if m.WBCQI.Set {
		return flexran.Some(int64(threegpp.CQIToMCS(int(m.WBCQI.V))))
	}
	return Int{}
}

// The transport-block arithmetic of the UE's cell, one owner for both RATs: LTE's TBS table
// (TS 36.213), or on an NR cell TS 38.214 §5.1.3.2 on the cell's PDSCH symbols with MCS
// table 1, one DMRS symbol and one layer: what OAI's gNB schedules (checked against its
// dl_curr_tbs on the live recording, internal/e2 TestOAIRecordings). A CQI maps to an MCS
// by OAI's map for both, as the RAN emulator's NR cells do (threegpp.CQIToMCS).

func (m *Measurement) nrPDSCH() threegpp.NRParams {
	return threegpp.NRParams{MCSTable: 1, Symbols: int(m.NR.PDSCHSymbols), DMRSPerPRB: 12, Layers: 1}
}

// tbsBytes is the transport block of mcs on prbs PRBs (unset when either is unset or out of
// the tables' range).
func (m *Measurement) tbsBytes(mcs, prbs Int) Int {
	if !mcs.Set || !prbs.Set {
		return Int{}
	}
	var bytes int
	var err error
	if m.NR != nil {
		var bits int
		bits, err = threegpp.NRTBSBits(int(prbs.V), int(mcs.V), m.nrPDSCH())
		bytes = bits / 8
	} else {
		bytes, err = threegpp.LTETBSBytesForMCS(int(mcs.V), int(prbs.V))
	}
	if err != nil {
		return Int{}
	}
	return flexran.Some(int64(bytes))
}

func (m *Measurement) tbsBytesForCQI(cqi int, prbs Int) Int {
	return m.tbsBytes(flexran.Some(int64(threegpp.CQIToMCS(cqi))), prbs)
}

// BitsPerSecond converts bytes per TTI into bit/s at the measured TTI rate (the one
// conversion: the feed's capacities and MEC 012 throughput).
func (m *Measurement) BitsPerSecond(bytesPerTTI int64) Int {
	tti := m.TTINs
	if tti <= 0 {
		tti = int64(ranclock.NominalTTI)
	}
	return flexran.Some(bytesPerTTI * 8 * int64(time.Second) / tti)
}

// TTIMicros is the measured TTI in µs (the feed's tti_us).
func (m *Measurement) TTIMicros() int64 { return max(1, (m.TTINs+500)/1000) }
