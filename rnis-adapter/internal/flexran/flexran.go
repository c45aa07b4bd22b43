// Package flexran parses the JSON of the FlexRAN controller's northbound statistics
// (GET /stats, or /stats_manager/json/all on 2017 builds) into plain Go values.
//
// Two formats exist. The current one (flexran-rtc v2.x) keys base stations by "bs_id", has a
// "macStats" object per UE and renders protobuf uint64 values as JSON strings. The 2017 one
// keys them by "agent_id", has no "macStats", and its eNB_config entries have no bs_id (they
// line up with mac_stats by position). A document may also be a JSON array of samples.
//
// Protobuf-JSON leaves out unset optional fields, so every field is optional here (type Int).
// A UE entry that cannot be read is skipped and reported in Snapshot.Skipped; only a document
// that is not FlexRAN statistics at all is an error.
package flexran

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/valyala/fastjson"
)

// Int is an optional integer: Set is false when the source did not report it.
type Int struct {
	V   int64
	Set bool
}

// Some returns a set Int.
func Some(v int64) Int { return Int{V: v, Set: true} }

// Snapshot is one sample of the controller's statistics.
type Snapshot struct {
	Time     time.Time // "date_time" (UTC assumed; zero if absent)
	TimeNs   int64     // extension "date_time_ns": the source's time in Unix ns (0 if absent)
	Legacy   bool      // 2017 format (agent_id, no macStats)
	Stations []Station
	Skipped  []Skip // UE entries that could not be read
}

// Skip tells which UE entry was left out and why.
type Skip struct {
	BSID   int64
	Index  int // position in ue_mac_stats
	Reason string
}

// Station is one base station (eNB): its configuration and the statistics of its UEs.
type Station struct {
	BSID     int64
	Cells    []Cell
	UEConfig []UEConfig
	LCConfig []LCConfig
	UEs      []UEStats
}

// Cell is one entry of eNB.cellConfig.
type Cell struct {
	PhyCellID    Int // phyCellId (cellId in the 2017 format)
	CarrierIndex Int
	DLBandwidth  Int // PRBs
	PLMNs        []PLMN
}

// PLMN is a cell's network: MNC with its length (2 or 3 digits).
type PLMN struct {
	MCC, MNC, MNCLength int64
}

// UEConfig is one entry of UE.ueConfig.
type UEConfig struct {
	RNTI         int64
	IMSI         string     // "" when unknown ("0" from an eNB without S1 counts as unknown)
	IPv4         netip.Addr // extension field "ueIpv4" (RAN emulator); invalid if absent
	PCellCarrier Int        // pcellCarrierIndex
}

// LCConfig is one UE's logical channels (LC.lcUeConfig).
type LCConfig struct {
	RNTI     int64
	Channels []LogicalChannel
}

// LogicalChannel is one lcConfig entry.
type LogicalChannel struct {
	LCID, QCI Int
}

// UEStats is one entry of mac_stats[].ue_mac_stats[].
type UEStats struct {
	RNTI          int64
	WBCQI         Int // dlCqiReport.csiReport[servCellIndex 0].p10csi.wbCqi
	SFNSF         Int // dlCqiReport.sfnSn: frame << 4 | subframe
	PHR           Int
	TBSDL         Int // macStats.tbsDl, bytes in the last TTI
	PRBDL         Int
	MCS1DL        Int
	HARQRound     Int
	HARQProcesses Int        // length of the "harq" array
	IPv4          netip.Addr // extension "ueIpv4" beside mac_stats (RAN emulator)
	RLC           []RLCReport
	RRC           RRCMeas
	ERABs         []int64 // gtpStats[].eRabId
}

// RLCReport is one rlcReport entry (flex_rlc_bsr).
type RLCReport struct {
	LCID, TxQueue, TxHOL, RetxQueue Int
}

// RRCMeas is the RRC measurement report (rsrp in dBm, rsrq in dB; -1 means none yet).
type RRCMeas struct {
	MeasID, RSRP, RSRQ Int
	Neighbours         []Neighbour
}

// Neighbour is one eutraMeas entry.
type Neighbour struct {
	PhyCellID, RSRP, RSRQ Int
}

// ErrNotStats means the document is not FlexRAN statistics.
var ErrNotStats = errors.New("not FlexRAN statistics: expected an object with eNB_config and/or mac_stats, or an array of such objects")

// Parser parses documents; reuse one per goroutine to avoid allocations.
type Parser struct {
	p fastjson.Parser
}

// Parse reads one document: an object (one sample) or an array of samples.
func (ps *Parser) Parse(doc []byte) ([]Snapshot, error) {
	root, err := ps.p.ParseBytes(doc)
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	switch root.Type() {
	case fastjson.TypeObject:
		s, err := parseSample(root)
		if err != nil {
			return nil, err
		}
		return []Snapshot{s}, nil
	case fastjson.TypeArray:
		items := root.GetArray()
		if len(items) == 0 {
			return nil, fmt.Errorf("%w (empty array)", ErrNotStats)
		}
		out := make([]Snapshot, 0, len(items))
		for i, item := range items {
			s, err := parseSample(item)
			if err != nil {
				return nil, fmt.Errorf("sample %d: %w", i, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, ErrNotStats
}

func parseSample(v *fastjson.Value) (Snapshot, error) {
	var s Snapshot
	if v.Type() != fastjson.TypeObject {
		return s, ErrNotStats
	}
	configs, stats := v.Get("eNB_config"), v.Get("mac_stats")
	if configs == nil && stats == nil {
		return s, ErrNotStats
	}
	if err := s.parseTime(v); err != nil {
		return s, err
	}
	if err := s.parseConfigs(configs); err != nil {
		return s, err
	}
	if err := s.parseStats(stats); err != nil {
		return s, err
	}
	return s, nil
}

func (s *Snapshot) parseTime(v *fastjson.Value) error {
	if dt := v.Get("date_time"); dt != nil {
		b, err := dt.StringBytes()
		if err != nil {
			return fmt.Errorf("date_time: %w", err)
		}
		t, err := time.Parse("2006-01-02T15:04:05.999999999", string(b))
		if err != nil {
			return fmt.Errorf("date_time %q: %w", b, err)
		}
		s.Time = t
	}
	ns, err := intOf(v, "date_time_ns")
	if err != nil {
		return err
	}
	s.TimeNs = ns.V
	return nil
}

func (s *Snapshot) parseConfigs(configs *fastjson.Value) error {
	if configs == nil || configs.Type() == fastjson.TypeNull {
		return nil
	}
	items, err := configs.Array()
	if err != nil {
		return fmt.Errorf("eNB_config: %w", err)
	}
	for i, item := range items {
		st, err := parseStation(item, i)
		if err != nil {
			return fmt.Errorf("eNB_config[%d]: %w", i, err)
		}
		s.Stations = append(s.Stations, st)
	}
	return nil
}

// parseStation reads one eNB_config entry. Its id is bs_id (v2), else eNB.eNBId, else the
// position (2017 format, where mac_stats[i].agent_id matches eNB_config[i]).
func parseStation(v *fastjson.Value, index int) (Station, error) {
	var st Station
	id, err := firstInt(v, []string{"bs_id"}, []string{"eNB", "eNBId"})
	if err != nil {
		return st, err
	}
	st.BSID = int64(index)
	if id.Set {
		st.BSID = id.V
	}
	for _, c := range v.GetArray("eNB", "cellConfig") {
		cell, err := parseCell(c)
		if err != nil {
			return st, fmt.Errorf("cellConfig: %w", err)
		}
		st.Cells = append(st.Cells, cell)
	}
	for _, u := range v.GetArray("UE", "ueConfig") {
		if uc, err := parseUEConfig(u); err == nil {
			st.UEConfig = append(st.UEConfig, uc)
		} // an unreadable ueConfig only costs that UE its IMSI and address
	}
	for _, l := range v.GetArray("LC", "lcUeConfig") {
		if lc, err := parseLCConfig(l); err == nil {
			st.LCConfig = append(st.LCConfig, lc)
		}
	}
	return st, nil
}

func parseCell(v *fastjson.Value) (Cell, error) {
	var c Cell
	var err error
	if c.PhyCellID, err = firstInt(v, []string{"phyCellId"}, []string{"cellId"}); err != nil {
		return c, err
	}
	if c.CarrierIndex, err = intOf(v, "carrierIndex"); err != nil {
		return c, err
	}
	if c.DLBandwidth, err = intOf(v, "dlBandwidth"); err != nil {
		return c, err
	}
	for _, p := range v.GetArray("plmnId") {
		mcc, err1 := intOf(p, "mcc")
		mnc, err2 := intOf(p, "mnc")
		length, err3 := intOf(p, "mncLength")
		if err := errors.Join(err1, err2, err3); err != nil {
			return c, fmt.Errorf("plmnId: %w", err)
		}
		if mcc.Set && mnc.Set {
			c.PLMNs = append(c.PLMNs, PLMN{MCC: mcc.V, MNC: mnc.V, MNCLength: length.V})
		}
	}
	return c, nil
}

func parseUEConfig(v *fastjson.Value) (UEConfig, error) {
	var uc UEConfig
	rnti, err := intOf(v, "rnti")
	if err != nil || !rnti.Set {
		return uc, fmt.Errorf("ueConfig without a readable rnti")
	}
	uc.RNTI = rnti.V
	if imsi := v.Get("imsi"); imsi != nil {
		uc.IMSI = digits(imsi)
	}
	uc.IPv4 = ueIPv4(v)
	uc.PCellCarrier, _ = intOf(v, "pcellCarrierIndex")
	return uc, nil
}

// UEIPField is the extension field of the RAN emulator (testbed/ran-emulator) that carries a
// UE's IPv4 address, in ueConfig[] and beside mac_stats in ue_mac_stats[]. FlexRAN has none.
const UEIPField = "ueIpv4"

func ueIPv4(v *fastjson.Value) netip.Addr {
	if ip := v.GetStringBytes(UEIPField); ip != nil {
		if a, err := netip.ParseAddr(string(ip)); err == nil && a.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

// digits returns an IMSI written as a string or a number; "0" or garbage is unknown ("").
func digits(v *fastjson.Value) string {
	var s string
	switch v.Type() {
	case fastjson.TypeString:
		s = string(v.GetStringBytes())
	case fastjson.TypeNumber:
		s = v.String()
	}
	if s == "" || s == "0" || len(s) > 15 {
		return ""
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return ""
		}
	}
	return s
}

func parseLCConfig(v *fastjson.Value) (LCConfig, error) {
	var lc LCConfig
	rnti, err := intOf(v, "rnti")
	if err != nil || !rnti.Set {
		return lc, fmt.Errorf("lcUeConfig without a readable rnti")
	}
	lc.RNTI = rnti.V
	for _, c := range v.GetArray("lcConfig") {
		lcid, err1 := intOf(c, "lcid")
		qci, err2 := intOf(c, "qci")
		if err1 == nil && err2 == nil && lcid.Set {
			lc.Channels = append(lc.Channels, LogicalChannel{LCID: lcid, QCI: qci})
		}
	}
	return lc, nil
}

func (s *Snapshot) parseStats(stats *fastjson.Value) error {
	if stats == nil || stats.Type() == fastjson.TypeNull {
		return nil
	}
	items, err := stats.Array()
	if err != nil {
		return fmt.Errorf("mac_stats: %w", err)
	}
	for i, item := range items {
		if err := s.parseStationStats(item, i); err != nil {
			return fmt.Errorf("mac_stats[%d]: %w", i, err)
		}
	}
	return nil
}

func (s *Snapshot) parseStationStats(v *fastjson.Value, index int) error {
	bs, err := intOf(v, "bs_id")
	if err != nil {
		return err
	}
	st := s.station(bs, index, v)
	seen := make(map[int64]bool)
	for j, u := range v.GetArray("ue_mac_stats") {
		ue, err := parseUEStats(u)
		switch {
		case err != nil:
			s.Skipped = append(s.Skipped, Skip{BSID: st.BSID, Index: j, Reason: err.Error()})
		case seen[ue.RNTI]:
			s.Skipped = append(s.Skipped, Skip{BSID: st.BSID, Index: j, Reason: fmt.Sprintf("rnti %d listed twice", ue.RNTI)})
		default:
			seen[ue.RNTI] = true
			st.UEs = append(st.UEs, ue)
		}
	}
	return nil
}

// station finds the eNB_config entry of a mac_stats entry (by bs_id, or by position in the
// 2017 format) or adds one without configuration.
func (s *Snapshot) station(bs Int, index int, v *fastjson.Value) *Station {
	if !bs.Set { // 2017 format: agent_id, and eNB_config[i] belongs to mac_stats[i]
		s.Legacy = true
		agent, _ := intOf(v, "agent_id")
		if index < len(s.Stations) {
			st := &s.Stations[index]
			if agent.Set {
				st.BSID = agent.V
			}
			return st
		}
		bs = Some(int64(index))
		if agent.Set {
			bs = agent
		}
	}
	for i := range s.Stations {
		if s.Stations[i].BSID == bs.V {
			return &s.Stations[i]
		}
	}
	s.Stations = append(s.Stations, Station{BSID: bs.V})
	return &s.Stations[len(s.Stations)-1]
}

func parseUEStats(v *fastjson.Value) (UEStats, error) {
	var ue UEStats
	if v.Type() != fastjson.TypeObject {
		return ue, errors.New("entry is not an object")
	}
	rnti, err := intOf(v, "rnti")
	if err != nil {
		return ue, err
	}
	m := v.Get("mac_stats")
	if m == nil || m.Type() != fastjson.TypeObject {
		return ue, errors.New("no mac_stats object")
	}
	if !rnti.Set { // the 2017 format has rnti only beside mac_stats; v2 has it in both
		if rnti, err = intOf(m, "rnti"); err != nil || !rnti.Set {
			return ue, errors.New("no rnti")
		}
	}
	if rnti.V < 0 || rnti.V > 65535 {
		return ue, fmt.Errorf("rnti %d outside 0..65535", rnti.V)
	}
	ue.RNTI = rnti.V
	ue.IPv4 = ueIPv4(v)
	r := reader{}
	ue.PHR = r.int(m, "phr")
	ue.SFNSF = r.int(m, "dlCqiReport", "sfnSn")
	ue.WBCQI = r.wbCQI(m)
	if ms := m.Get("macStats"); ms != nil {
		ue.TBSDL = r.int(ms, "tbsDl")
		ue.PRBDL = r.int(ms, "prbDl")
		ue.MCS1DL = r.int(ms, "mcs1Dl")
		ue.HARQRound = r.int(ms, "harqRound")
	}
	if h := v.Get("harq"); h != nil {
		if arr, err := h.Array(); err == nil {
			ue.HARQProcesses = Some(int64(len(arr)))
		} else {
			r.fail(fmt.Errorf("harq: %w", err))
		}
	}
	for _, rep := range m.GetArray("rlcReport") {
		ue.RLC = append(ue.RLC, RLCReport{
			LCID:      r.int(rep, "lcId"),
			TxQueue:   r.int(rep, "txQueueSize"),
			TxHOL:     r.int(rep, "txQueueHolDelay"),
			RetxQueue: r.int(rep, "retransmissionQueueSize"),
		})
	}
	ue.RRC = r.rrc(m.Get("rrcMeasurements"))
	for _, g := range m.GetArray("gtpStats") {
		if id := r.int(g, "eRabId"); id.Set {
			ue.ERABs = append(ue.ERABs, id.V)
		}
	}
	if r.err != nil {
		return ue, fmt.Errorf("rnti %d: %w", ue.RNTI, r.err)
	}
	return ue, r.checkRanges(&ue)
}

// reader keeps the first error so that a UE's fields read in a straight line.
type reader struct{ err error }

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) int(v *fastjson.Value, keys ...string) Int {
	n, err := intOf(v, keys...)
	if err != nil {
		r.fail(err)
	}
	return n
}

// wbCQI takes the wideband CQI of the primary cell's P10 report (servCellIndex 0 or absent).
func (r *reader) wbCQI(m *fastjson.Value) Int {
	for _, csi := range m.GetArray("dlCqiReport", "csiReport") {
		if idx := r.int(csi, "servCellIndex"); idx.Set && idx.V != 0 {
			continue
		}
		if cqi := r.int(csi, "p10csi", "wbCqi"); cqi.Set {
			return cqi
		}
	}
	return Int{}
}

func (r *reader) rrc(v *fastjson.Value) RRCMeas {
	var m RRCMeas
	if v == nil {
		return m
	}
	m.MeasID, m.RSRP, m.RSRQ = r.int(v, "measid"), r.int(v, "pcellRsrp"), r.int(v, "pcellRsrq")
	for _, n := range v.GetArray("neighMeas", "eutraMeas") {
		m.Neighbours = append(m.Neighbours, Neighbour{
			PhyCellID: r.int(n, "physCellId"),
			RSRP:      r.int(n, "measResult", "rsrp"),
			RSRQ:      r.int(n, "measResult", "rsrq"),
		})
	}
	return m
}

// checkRanges rejects values no eNB can report (a corrupted or hostile source).
func (r *reader) checkRanges(ue *UEStats) error {
	check := func(name string, v Int, lo, hi int64) error {
		if v.Set && (v.V < lo || v.V > hi) {
			return fmt.Errorf("rnti %d: %s %d outside %d..%d", ue.RNTI, name, v.V, lo, hi)
		}
		return nil
	}
	errs := []error{
		check("wbCqi", ue.WBCQI, 0, 15),
		check("mcs1Dl", ue.MCS1DL, 0, 31),
		check("prbDl", ue.PRBDL, 0, 275),
		check("tbsDl", ue.TBSDL, 0, 1<<24),
		check("sfnSn", ue.SFNSF, 0, 0xffff),
	}
	for _, q := range ue.RLC {
		errs = append(errs, check("lcId", q.LCID, 0, 32), check("txQueueSize", q.TxQueue, 0, 1<<40),
			check("txQueueHolDelay", q.TxHOL, 0, 1<<32))
	}
	return errors.Join(errs...)
}

// intOf reads an integer at a key path: a JSON number, or a string of digits (protobuf-JSON
// renders 64-bit values as strings). Absent or null gives an unset Int; anything else is an error.
func intOf(v *fastjson.Value, keys ...string) (Int, error) {
	f := v.Get(keys...)
	if f == nil {
		return Int{}, nil
	}
	switch f.Type() {
	case fastjson.TypeNull:
		return Int{}, nil
	case fastjson.TypeNumber:
		n, err := f.Int64()
		if err != nil {
			return Int{}, fmt.Errorf("%v: %w", keys, err)
		}
		return Some(n), nil
	case fastjson.TypeString:
		n, err := strconv.ParseInt(string(f.GetStringBytes()), 10, 64)
		if err != nil {
			return Int{}, fmt.Errorf("%v: %q is not an integer", keys, f.GetStringBytes())
		}
		return Some(n), nil
	}
	return Int{}, fmt.Errorf("%v: %s is not an integer", keys, f.Type())
}

// firstInt returns the first key path that is present.
func firstInt(v *fastjson.Value, paths ...[]string) (Int, error) {
	for _, p := range paths {
		n, err := intOf(v, p...)
		if err != nil || n.Set {
			return n, err
		}
	}
	return Int{}, nil
}
