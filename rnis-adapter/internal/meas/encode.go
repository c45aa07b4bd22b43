package meas

import (
	"net/netip"
	"strconv"
	"strings"
)

// AppendJSON appends the measurement as the JSON body of an AMQP message
// (mec_common.bus.rnis.RnisMeasurement), without allocating. It is the hot path (64 UEs × 1 kHz);
// meas_test.go checks it against encoding/json.
func (m *Measurement) AppendJSON(b []byte) []byte {
	b = append(b, `{"schema_version":1,`...)
	b = m.appendCellFields(b)
	b = append(b, ',')
	b = m.appendUEFields(b)
	return append(b, '}')
}

// AppendCellJSON appends the measurements of one cell at one poll as one message
// (mec_common.bus.rnis.RnisCellMeasurements): the cell's fields once, taken from ms[0], and the
// UE's own fields of each measurement in "ues". Every measurement must be of the same cell
// and poll.
func AppendCellJSON(b []byte, ms []Measurement) []byte {
	b = append(b, `{"schema_version":1,`...)
	b = ms[0].appendCellFields(b)
	b = append(b, `,"ues":[`...)
	for i := range ms {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = ms[i].appendUEFields(b)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendCellFields writes what every UE of a cell shares at one poll (mec_common.bus.rnis
// CELL_FIELDS), starting with "cell".
func (m *Measurement) appendCellFields(b []byte) []byte {
	b = append(b, `"cell":`...)
	b = appendString(b, m.Cell)
	b = appendKeyInt(b, "bs_id", m.BSID)
	b = appendKeyOpt(b, "phy_cell_id", m.PhyCellID)
	b = appendKeyOpt(b, "cell_prbs", m.CellPRBs)
	b = appendKeyOpt(b, "source_time_ns", m.SourceTimeNs)
	b = appendKeyOpt(b, "source_time_uncertainty_ns", m.SourceTimeUncNs)
	b = appendKeyInt(b, "observed_ns", m.ObservedNs)
	b = appendKeyInt(b, "tti_us", m.TTIMicros())
	b = appendKeyOpt(b, "cell_best_cqi_tbs_bytes", m.CellBestCQITBS)
	b = appendKeyInt(b, "cell_ues", int64(m.CellUEs))
	b = appendKeyOpt(b, "cell_allocated_prbs", m.CellAllocPRBs)
	b = append(b, `,"cell_prb_usage":`...)
	if m.HasPRBUsage() {
		return strconv.AppendFloat(b, m.CellPRBUsage, 'g', 6, 64)
	}
	return append(b, "null"...)
}

// appendUEFields writes the UE's own fields, starting with "rnti".
func (m *Measurement) appendUEFields(b []byte) []byte {
	b = append(b, `"rnti":`...)
	b = strconv.AppendInt(b, m.RNTI, 10)
	b = append(b, `,"imsi":`...)
	b = appendStringOrNull(b, m.IMSI)
	b = append(b, `,"ue_ipv4":`...)
	b = appendAddr(b, m.IPv4)
	b = appendKeyOpt(b, "wb_cqi", m.WBCQI)
	b = appendKeyOpt(b, "dl_mcs", m.DLMCS)
	b = appendKeyOpt(b, "dl_tbs_bytes", m.DLTBS)
	b = appendKeyOpt(b, "dl_prbs", m.DLPRBs)
	b = appendKeyOpt(b, "rlc_queue_bytes", m.RLCQueue)
	b = appendKeyOpt(b, "rlc_hol_delay_ms", m.RLCHOL)
	b = append(b, `,"rlc":[`...)
	n := 0
	for _, q := range m.RLC {
		if !q.LCID.Set || !q.TxQueue.Set {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"lcid":`...)
		b = strconv.AppendInt(b, q.LCID.V, 10)
		b = appendKeyInt(b, "tx_queue_bytes", q.TxQueue.V)
		b = appendKeyOpt(b, "hol_delay_ms", q.TxHOL)
		b = appendKeyOpt(b, "retx_queue_bytes", q.RetxQueue)
		b = append(b, '}')
	}
	b = append(b, ']')
	b = appendKeyOpt(b, "harq_processes", m.HARQ)
	b = appendKeyOpt(b, "phr", m.PHR)
	b = appendKeyOpt(b, "sfn_sf", m.SFNSF)
	b = appendKeyOpt(b, "frame", m.Frame)
	b = appendKeyOpt(b, "subframe", m.Subframe)
	b = appendKeyOpt(b, "best_cqi_tbs_bytes", m.BestCQITBS)
	b = appendKeyOpt(b, "rapid_prbs", m.RapidPRBs)
	b = appendKeyOpt(b, "rapid_capacity_bps", m.RapidCapacity)
	b = appendKeyOpt(b, "cqi_capacity_bps", m.CQICapacity)
	b = appendKeyOpt(b, "radio_tbs_bytes", m.RadioTBS)
	return appendKeyOpt(b, "dl_tbs_bps", m.DLTBSRate)
}

func appendKeyInt(b []byte, key string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

func appendKeyOpt(b []byte, key string, v Int) []byte {
	if !v.Set {
		b = append(b, ',', '"')
		b = append(b, key...)
		return append(b, `":null`...)
	}
	return appendKeyInt(b, key, v.V)
}

func appendStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = a.AppendTo(b)
	return append(b, '"')
}

// appendString writes a JSON string. Our strings are digits, cell keys and addresses; anything
// needing escapes goes through strconv, which escapes a superset of what JSON requires.
func appendString(b []byte, s string) []byte {
	if !needsEscape(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	return strconv.AppendQuoteToASCII(b, s)
}

func needsEscape(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == '"' || r == '\\' || r > 0x7e })
}

// RoutingKey is rnis.v1.meas.<cell>.<imsi>.<ipv4> (docs/development.md).
func (m *Measurement) RoutingKey() string {
	return "rnis.v1.meas." + KeyWord(m.Cell) + "." + KeyWord(m.IMSI) + "." + AddrWord(m.IPv4)
}

// CellRoutingKey is rnis.v1.cell.<cell>: the key of a cell message (AppendCellJSON).
func CellRoutingKey(cell string) string {
	return "rnis.v1.cell." + KeyWord(cell)
}

// EventRoutingKey is rnis.v1.event.<kind>.<cell>.<imsi>.<ipv4>.
func EventRoutingKey(kind, cell, imsi string, ip netip.Addr) string {
	return "rnis.v1.event." + kind + "." + KeyWord(cell) + "." + KeyWord(imsi) + "." + AddrWord(ip)
}

// KeyWord makes a routing-key word: "-" when unknown, and no '.', '*' or '#' inside.
func KeyWord(s string) string {
	if s == "" {
		return "-"
	}
	if strings.ContainsAny(s, ".*#") {
		return strings.NewReplacer(".", "_", "*", "_", "#", "_").Replace(s)
	}
	return s
}

// AddrWord is an IPv4 address with '_' for '.', or "-".
func AddrWord(a netip.Addr) string {
	if !a.IsValid() {
		return "-"
	}
	return strings.ReplaceAll(a.String(), ".", "_")
}
