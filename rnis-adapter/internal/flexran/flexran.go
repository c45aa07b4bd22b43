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
	"time"
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
	Time     time.Time // "date_time": when the controller answered (UTC assumed; zero if absent), not when the RAN measured
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
	ULBandwidth  Int // PRBs
	PLMNs        []PLMN
	NR           *NRCell // set for an NR cell only (an E2 gNB; FlexRAN is LTE)
}

// NRCell is what the pipeline needs of an NR cell beyond LTE's fields.
type NRCell struct {
	PDSCHSymbols     int64 // OFDM symbols of a PDSCH allocation: its TBS (TS 38.214)
	SlotsPerSubframe int64 // 2^µ: a transport block per slot, reports dated in subframes
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
	SFNSF         Int // dlCqiReport.sfnSn as the source writes it (ranclock.SFNFormat)
	PHR           Int
	TBSDL         Int // macStats.tbsDl, bytes in the last TTI
	PRBDL         Int
	MCS1DL        Int
	TBSUL, PRBUL  Int // macStats.tbsUl (bytes, the last uplink TB), prbUl
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

// UEIPField is the extension field of the RAN emulator (testbed/ran-emulator) that carries a
// UE's IPv4 address, in ueConfig[] and beside mac_stats in ue_mac_stats[]. FlexRAN has none.
const UEIPField = "ueIpv4"

// Parser parses documents. It remembers how many UEs a station had, to size the next
// document's slices at once: use one Parser per source, from one goroutine.
type Parser struct {
	ues int // most UEs of one station in the last document
}

// Parse reads one document: an object (one sample) or an array of samples.
func (ps *Parser) Parse(doc []byte) ([]Snapshot, error) {
	s := &scanner{b: doc, ues: ps.ues}
	defer func() {
		if s.maxUEs > 0 { // a configuration document (no mac_stats) keeps the hint
			ps.ues = min(s.maxUEs, 4096)
		}
	}()
	var out []Snapshot
	var err error
	switch s.kind() {
	case 'o':
		var snap Snapshot
		if snap, err = parseSample(s); err == nil {
			out = append(out, snap)
		}
	case 'a':
		err = s.array(func(i int) error {
			snap, err := parseSample(s)
			if err != nil {
				return fmt.Errorf("sample %d: %w", i, err)
			}
			out = append(out, snap)
			return nil
		})
		if err == nil && len(out) == 0 {
			err = fmt.Errorf("%w (empty array)", ErrNotStats)
		}
	case 0:
		if s.next() == 0 {
			return nil, fmt.Errorf("invalid JSON: %w", errEnd)
		}
		return nil, fmt.Errorf("invalid JSON: %w", s.syntax("a value"))
	default:
		return nil, ErrNotStats
	}
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stationStats is one mac_stats entry before it is joined with its configuration.
type stationStats struct {
	bs, agent Int
	ues       []UEStats
	skipped   []Skip
}

func parseSample(s *scanner) (Snapshot, error) {
	var snap Snapshot
	if s.kind() != 'o' {
		return snap, errors.Join(ErrNotStats, s.skip())
	}
	var configs []Station
	var stats []stationStats
	var hasConfig, hasStats bool
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "date_time":
			return snap.readTime(s)
		case "eNB_config":
			hasConfig = true
			return nullOr(s, func() error {
				return s.array(func(i int) error {
					st, err := parseStation(s, i)
					configs = append(configs, st)
					return prefix(fmt.Sprintf("eNB_config[%d]", i), err)
				})
			})
		case "mac_stats":
			hasStats = true
			return nullOr(s, func() error {
				return s.array(func(i int) error {
					st, err := parseStationStats(s)
					stats = append(stats, st)
					return prefix(fmt.Sprintf("mac_stats[%d]", i), err)
				})
			})
		}
		return s.skip()
	})
	if err != nil {
		return snap, err
	}
	if !hasConfig && !hasStats {
		return snap, ErrNotStats
	}
	snap.Stations = configs
	for i, st := range stats {
		snap.join(st, i)
	}
	return snap, nil
}

func prefix(where string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", where, err)
}

// nullOr runs read unless the value is null.
func nullOr(s *scanner, read func() error) error {
	if s.kind() == 'l' && s.b[s.i] == 'n' {
		return s.skip()
	}
	return read()
}

func (snap *Snapshot) readTime(s *scanner) error {
	b, ok, err := s.text()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("date_time is not a string")
	}
	t, err := time.Parse("2006-01-02T15:04:05.999999999", string(b))
	if err != nil {
		return fmt.Errorf("date_time %q: %w", b, err)
	}
	snap.Time = t
	return nil
}

// parseStation reads one eNB_config entry. Its id is bs_id (v2), else eNB.eNBId, else the
// position (2017 format, where mac_stats[i].agent_id matches eNB_config[i]).
func parseStation(s *scanner, index int) (Station, error) {
	st := Station{BSID: int64(index)}
	var bs, enbID Int
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "bs_id":
			bs, err = s.int(key)
		case "eNB":
			err = s.object(func(key []byte) error {
				switch string(key) {
				case "eNBId":
					var err error
					enbID, err = s.int(key)
					return err
				case "cellConfig":
					return s.array(func(int) error {
						c, err := parseCell(s)
						st.Cells = append(st.Cells, c)
						return prefix("cellConfig", err)
					})
				}
				return s.skip()
			})
		case "UE":
			err = s.object(func(key []byte) error {
				if string(key) != "ueConfig" {
					return s.skip()
				}
				return s.array(func(int) error {
					uc, ok, err := parseUEConfig(s)
					if ok { // an unreadable ueConfig only costs that UE its IMSI and address
						st.UEConfig = append(st.UEConfig, uc)
					}
					return err
				})
			})
		case "LC":
			err = s.object(func(key []byte) error {
				if string(key) != "lcUeConfig" {
					return s.skip()
				}
				return s.array(func(int) error {
					lc, ok, err := parseLCConfig(s)
					if ok {
						st.LCConfig = append(st.LCConfig, lc)
					}
					return err
				})
			})
		default:
			err = s.skip()
		}
		return err
	})
	switch {
	case bs.Set:
		st.BSID = bs.V
	case enbID.Set:
		st.BSID = enbID.V
	}
	return st, err
}

func parseCell(s *scanner) (Cell, error) {
	var c Cell
	var cellID Int
	err := s.object(func(key []byte) error {
		var err error
		switch string(key) {
		case "phyCellId":
			c.PhyCellID, err = s.int(key)
		case "cellId":
			cellID, err = s.int(key)
		case "carrierIndex":
			c.CarrierIndex, err = s.int(key)
		case "dlBandwidth":
			c.DLBandwidth, err = s.int(key)
		case "ulBandwidth":
			c.ULBandwidth, err = s.int(key)
		case "plmnId":
			err = s.array(func(int) error {
				var mcc, mnc, length Int
				err := s.object(func(key []byte) error {
					var err error
					switch string(key) {
					case "mcc":
						mcc, err = s.int(key)
					case "mnc":
						mnc, err = s.int(key)
					case "mncLength":
						length, err = s.int(key)
					default:
						err = s.skip()
					}
					return err
				})
				if mcc.Set && mnc.Set {
					c.PLMNs = append(c.PLMNs, PLMN{MCC: mcc.V, MNC: mnc.V, MNCLength: length.V})
				}
				return err
			})
		default:
			err = s.skip()
		}
		return err
	})
	if !c.PhyCellID.Set {
		c.PhyCellID = cellID
	}
	return c, err
}

// typeErrors collects the first type error of an entry while the scan goes on; syntax
// errors stop the scan.
type typeErrors struct{ first error }

func (t *typeErrors) int(s *scanner, key []byte, dst *Int) error {
	v, err := s.int(key)
	if _, ok := err.(*errType); ok {
		if t.first == nil {
			t.first = err
		}
		return nil
	}
	*dst = v
	return err
}

func parseUEConfig(s *scanner) (UEConfig, bool, error) {
	var uc UEConfig
	var rnti Int
	var bad typeErrors
	if s.kind() != 'o' {
		return uc, false, s.skip()
	}
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "rnti":
			return bad.int(s, key, &rnti)
		case "imsi":
			uc.IMSI = digits(s)
			return nil
		case UEIPField:
			uc.IPv4 = readIPv4(s)
			return nil
		case "pcellCarrierIndex":
			return bad.int(s, key, &uc.PCellCarrier)
		}
		return s.skip()
	})
	uc.RNTI = rnti.V
	return uc, err == nil && rnti.Set && bad.first == nil, err
}

// digits reads an IMSI written as a string or a number; "0" or garbage is unknown ("").
func digits(s *scanner) string {
	var raw []byte
	switch s.kind() {
	case 's':
		raw, _ = s.str()
	case 'n':
		raw, _ = s.number()
	default:
		_ = s.skip()
	}
	if len(raw) == 0 || len(raw) > 15 || string(raw) == "0" {
		return ""
	}
	for _, c := range raw {
		if c < '0' || c > '9' {
			return ""
		}
	}
	return string(raw)
}

func readIPv4(s *scanner) netip.Addr {
	b, ok, _ := s.text()
	if !ok {
		return netip.Addr{}
	}
	a, _ := parseIPv4(b)
	return a
}

// parseIPv4 reads a dotted quad as netip.ParseAddr does (no leading zeros), without the
// allocation of converting the bytes to a string for it (once per UE per poll).
func parseIPv4(b []byte) (netip.Addr, bool) {
	var ip [4]byte
	field, digits, value := 0, 0, 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			if digits == 0 || field == 4 {
				return netip.Addr{}, false
			}
			ip[field] = byte(value)
			field, digits, value = field+1, 0, 0
			continue
		}
		c := b[i]
		if c < '0' || c > '9' || (digits == 1 && value == 0) {
			return netip.Addr{}, false
		}
		value, digits = value*10+int(c-'0'), digits+1
		if value > 255 {
			return netip.Addr{}, false
		}
	}
	if field != 4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

func parseLCConfig(s *scanner) (LCConfig, bool, error) {
	var lc LCConfig
	var rnti Int
	var bad typeErrors
	if s.kind() != 'o' {
		return lc, false, s.skip()
	}
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "rnti":
			return bad.int(s, key, &rnti)
		case "lcConfig":
			return s.array(func(int) error {
				var ch LogicalChannel
				var chBad typeErrors
				err := s.object(func(key []byte) error {
					switch string(key) {
					case "lcid":
						return chBad.int(s, key, &ch.LCID)
					case "qci":
						return chBad.int(s, key, &ch.QCI)
					}
					return s.skip()
				})
				if chBad.first == nil && ch.LCID.Set {
					lc.Channels = append(lc.Channels, ch)
				}
				return err
			})
		}
		return s.skip()
	})
	lc.RNTI = rnti.V
	return lc, err == nil && rnti.Set && bad.first == nil, err
}

func parseStationStats(s *scanner) (stationStats, error) {
	st := stationStats{ues: make([]UEStats, 0, s.ues)}
	defer func() { s.maxUEs = max(s.maxUEs, len(st.ues)) }()
	seen := make(map[int64]bool)
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "bs_id":
			v, err := s.int(key)
			st.bs = v
			return err
		case "agent_id":
			v, err := s.int(key)
			st.agent = v
			return err
		case "ue_mac_stats":
			return s.array(func(j int) error {
				ue, reason, err := parseUEStats(s)
				switch {
				case err != nil:
					return err
				case reason != "":
					st.skipped = append(st.skipped, Skip{Index: j, Reason: reason})
				case seen[ue.RNTI]:
					st.skipped = append(st.skipped, Skip{Index: j, Reason: fmt.Sprintf("rnti %d listed twice", ue.RNTI)})
				default:
					seen[ue.RNTI] = true
					st.ues = append(st.ues, ue)
				}
				return nil
			})
		}
		return s.skip()
	})
	return st, err
}

// join attaches a mac_stats entry to its eNB_config entry (by bs_id, or by position in the
// 2017 format) or to a new station without configuration.
func (snap *Snapshot) join(st stationStats, index int) {
	bs := st.bs
	var target *Station
	if !bs.Set { // 2017 format: agent_id, and eNB_config[i] belongs to mac_stats[i]
		snap.Legacy = true
		bs = Some(int64(index))
		if st.agent.Set {
			bs = st.agent
		}
		if index < len(snap.Stations) {
			target = &snap.Stations[index]
			target.BSID = bs.V
		}
	}
	for i := range snap.Stations {
		if target == nil && snap.Stations[i].BSID == bs.V {
			target = &snap.Stations[i]
		}
	}
	if target == nil {
		snap.Stations = append(snap.Stations, Station{BSID: bs.V})
		target = &snap.Stations[len(snap.Stations)-1]
	}
	if target.UEs == nil {
		target.UEs = st.ues
	} else {
		target.UEs = append(target.UEs, st.ues...)
	}
	for _, sk := range st.skipped {
		sk.BSID = target.BSID
		snap.Skipped = append(snap.Skipped, sk)
	}
}

// parseUEStats reads one ue_mac_stats entry. A non-empty reason means the entry is unusable
// (skipped); err is a syntax error of the document.
func parseUEStats(s *scanner) (ue UEStats, reason string, err error) {
	if s.kind() != 'o' {
		return ue, "entry is not an object", s.skip()
	}
	var rnti, innerRNTI Int
	var bad typeErrors
	hasStats := false
	err = s.object(func(key []byte) error {
		switch string(key) {
		case "rnti":
			return bad.int(s, key, &rnti)
		case "mac_stats":
			if s.kind() != 'o' {
				return s.skip()
			}
			hasStats = true
			return ue.readMacStats(s, &bad, &innerRNTI)
		case "harq":
			if s.kind() != 'a' {
				bad.first = errors.Join(bad.first, errors.New("harq is not an array"))
				return s.skip()
			}
			n := 0
			err := s.array(func(int) error { n++; return s.skip() })
			ue.HARQProcesses = Some(int64(n))
			return err
		case UEIPField:
			ue.IPv4 = readIPv4(s)
			return nil
		}
		return s.skip()
	})
	switch {
	case err != nil:
		return ue, "", err
	case !hasStats:
		return ue, "no mac_stats object", nil
	case !rnti.Set: // the 2017 format has rnti only beside mac_stats; v2 has it in both
		rnti = innerRNTI
	}
	switch {
	case !rnti.Set:
		return ue, "no rnti", nil
	case rnti.V < 0 || rnti.V > 65535:
		return ue, fmt.Sprintf("rnti %d outside 0..65535", rnti.V), nil
	}
	ue.RNTI = rnti.V
	if bad.first != nil {
		return ue, fmt.Sprintf("rnti %d: %v", ue.RNTI, bad.first), nil
	}
	if msg := ue.outOfRange(); msg != "" {
		return ue, msg, nil
	}
	return ue, "", nil
}

func (ue *UEStats) readMacStats(s *scanner, bad *typeErrors, rnti *Int) error {
	return s.object(func(key []byte) error {
		switch string(key) {
		case "rnti":
			return bad.int(s, key, rnti)
		case "phr":
			return bad.int(s, key, &ue.PHR)
		case "dlCqiReport":
			return ue.readCQI(s, bad)
		case "macStats":
			return s.object(func(key []byte) error {
				switch string(key) {
				case "tbsDl":
					return bad.int(s, key, &ue.TBSDL)
				case "prbDl":
					return bad.int(s, key, &ue.PRBDL)
				case "mcs1Dl":
					return bad.int(s, key, &ue.MCS1DL)
				case "tbsUl":
					return bad.int(s, key, &ue.TBSUL)
				case "prbUl":
					return bad.int(s, key, &ue.PRBUL)
				case "harqRound":
					return bad.int(s, key, &ue.HARQRound)
				}
				return s.skip()
			})
		case "rlcReport":
			first := len(s.rlc)
			err := s.array(func(int) error {
				var q RLCReport
				err := s.object(func(key []byte) error {
					switch string(key) {
					case "lcId":
						return bad.int(s, key, &q.LCID)
					case "txQueueSize":
						return bad.int(s, key, &q.TxQueue)
					case "txQueueHolDelay":
						return bad.int(s, key, &q.TxHOL)
					case "retransmissionQueueSize":
						return bad.int(s, key, &q.RetxQueue)
					}
					return s.skip()
				})
				s.rlc = append(s.rlc, q)
				return err
			})
			if len(s.rlc) > first { // the UE's entries, out of the parse's shared slice
				ue.RLC = s.rlc[first:len(s.rlc):len(s.rlc)]
			}
			return err
		case "rrcMeasurements":
			return ue.readRRC(s, bad)
		case "gtpStats":
			first := len(s.erabs)
			err := s.array(func(int) error {
				var id Int
				err := s.object(func(key []byte) error {
					if string(key) == "eRabId" {
						return bad.int(s, key, &id)
					}
					return s.skip()
				})
				if id.Set {
					s.erabs = append(s.erabs, id.V)
				}
				return err
			})
			if len(s.erabs) > first {
				ue.ERABs = s.erabs[first:len(s.erabs):len(s.erabs)]
			}
			return err
		}
		return s.skip()
	})
}

// readCQI takes the wideband CQI of the primary cell's P10 report (servCellIndex 0 or absent).
func (ue *UEStats) readCQI(s *scanner, bad *typeErrors) error {
	return s.object(func(key []byte) error {
		switch string(key) {
		case "sfnSn":
			return bad.int(s, key, &ue.SFNSF)
		case "csiReport":
			return s.array(func(int) error {
				var cell, cqi Int
				err := s.object(func(key []byte) error {
					switch string(key) {
					case "servCellIndex":
						return bad.int(s, key, &cell)
					case "p10csi":
						return s.object(func(key []byte) error {
							if string(key) == "wbCqi" {
								return bad.int(s, key, &cqi)
							}
							return s.skip()
						})
					}
					return s.skip()
				})
				if cqi.Set && (!cell.Set || cell.V == 0) && !ue.WBCQI.Set {
					ue.WBCQI = cqi
				}
				return err
			})
		}
		return s.skip()
	})
}

func (ue *UEStats) readRRC(s *scanner, bad *typeErrors) error {
	m := &ue.RRC
	return s.object(func(key []byte) error {
		switch string(key) {
		case "measid":
			return bad.int(s, key, &m.MeasID)
		case "pcellRsrp":
			return bad.int(s, key, &m.RSRP)
		case "pcellRsrq":
			return bad.int(s, key, &m.RSRQ)
		case "neighMeas":
			return s.object(func(key []byte) error {
				if string(key) != "eutraMeas" {
					return s.skip()
				}
				return s.array(func(int) error {
					var n Neighbour
					err := s.object(func(key []byte) error {
						switch string(key) {
						case "physCellId":
							return bad.int(s, key, &n.PhyCellID)
						case "measResult":
							return s.object(func(key []byte) error {
								switch string(key) {
								case "rsrp":
									return bad.int(s, key, &n.RSRP)
								case "rsrq":
									return bad.int(s, key, &n.RSRQ)
								}
								return s.skip()
							})
						}
						return s.skip()
					})
					m.Neighbours = append(m.Neighbours, n)
					return err
				})
			})
		}
		return s.skip()
	})
}

// outOfRange rejects values no eNB can report (a corrupted or hostile source).
func (ue *UEStats) outOfRange() string {
	check := func(name string, v Int, lo, hi int64) string {
		if v.Set && (v.V < lo || v.V > hi) {
			return fmt.Sprintf("rnti %d: %s %d outside %d..%d", ue.RNTI, name, v.V, lo, hi)
		}
		return ""
	}
	for _, msg := range []string{
		check("wbCqi", ue.WBCQI, 0, 15),
		check("mcs1Dl", ue.MCS1DL, 0, 31),
		check("prbDl", ue.PRBDL, 0, 275),
		check("tbsDl", ue.TBSDL, 0, 1<<24),
		check("sfnSn", ue.SFNSF, 0, 0xffff),
	} {
		if msg != "" {
			return msg
		}
	}
	for _, q := range ue.RLC {
		for _, msg := range []string{check("lcId", q.LCID, 0, 32), check("txQueueSize", q.TxQueue, 0, 1<<40),
			check("txQueueHolDelay", q.TxHOL, 0, 1<<32)} {
			if msg != "" {
				return msg
			}
		}
	}
	return ""
}
