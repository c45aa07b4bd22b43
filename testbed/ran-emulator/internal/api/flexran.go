// Package api serves the emulator's HTTP APIs: FlexRAN's northbound statistics (the JSON
// of the real controller, flexran-rtc v2.4) and the emulator's own control API.
package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// UEIPField is the extension field (not in FlexRAN) that carries a UE's IPv4 address, in
// eNB_config[].UE.ueConfig[] and in mac_stats[].ue_mac_stats[]: the RNIS adapter maps
// RNTI → IP with it.
const UEIPField = "ueIpv4"

// flexranJSON builds and caches the statistics documents. Documents are rebuilt only
// when a cell has a new snapshot (once per reporting period), never per request.
type flexranJSON struct {
	emu       *ran.Emulator
	listen    string
	enbConfig [][]byte // per cell, static: the eNB_config entry
	enbEarly  [][]byte // the same before the DRBs are configured (drbLagMs)
	mu        sync.Mutex
	snaps     []*ran.CellSnapshot
	cache     map[string][]byte
	sizes     map[string]int // last size per document: build into a buffer that fits
}

func newFlexranJSON(emu *ran.Emulator, listen string) (*flexranJSON, error) {
	f := &flexranJSON{emu: emu, listen: listen, cache: map[string][]byte{}, sizes: map[string]int{}}
	for i, c := range emu.Cells {
		raw, err := json.Marshal(enbConfigEntry(c, i, listen, true))
		if err != nil {
			return nil, err
		}
		early, err := json.Marshal(enbConfigEntry(c, i, listen, false))
		if err != nil {
			return nil, err
		}
		f.enbConfig, f.enbEarly = append(f.enbConfig, raw), append(f.enbEarly, early)
	}
	return f, nil
}

// current returns the cells' snapshots, dropping the cache if any changed.
func (f *flexranJSON) current() []*ran.CellSnapshot {
	changed := f.snaps == nil
	snaps := make([]*ran.CellSnapshot, len(f.emu.Cells))
	for i, c := range f.emu.Cells {
		snaps[i] = c.Snapshot()
		if f.snaps != nil && snaps[i] != f.snaps[i] {
			changed = true
		}
	}
	if changed {
		f.snaps = snaps
		clear(f.cache)
	}
	return snaps
}

// document returns the cached JSON for key, building it with build on a miss.
func (f *flexranJSON) document(key string, build func(snaps []*ran.CellSnapshot, buf []byte) []byte) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	snaps := f.current()
	if doc, ok := f.cache[key]; ok {
		return doc
	}
	doc := build(snaps, make([]byte, 0, f.sizes[key]+f.sizes[key]/8+4096))
	f.cache[key] = doc
	f.sizes[key] = len(doc)
	return doc
}

// OAI's timing of a new UE's bearer, as a live eNB showed it (fixtures/flexran/
// live-oai-rfsim-timeline/reattach-drb-timing.txt): the GTP E-RAB ~45 ms after the UE, the
// DRB (lcUeConfig, with its QCI) ~0.5 s after. The emulator's UEs attach at its start.
const (
	erabLagMs = 45
	drbLagMs  = 500
)

// stats builds GET /stats/:type for the cells in sel (nil = all) and, if ue is set, only
// that UE's bearers (by RNTI or IMSI) on them. typ is all, enb_config or mac_stats. As
// the controller's, date_time is when the request is answered (the statistics in the
// document are those of each cell's last report, usually older).
func (f *flexranJSON) stats(typ string, sel []int, ue *ueSelector) []byte {
	key := fmt.Sprintf("%s|%v|%v", typ, sel, ue)
	body := f.document(key, func(snaps []*ran.CellSnapshot, b []byte) []byte {
		if sel == nil {
			sel = make([]int, len(snaps))
			for i := range sel {
				sel[i] = i
			}
		}
		if typ == "all" || typ == "enb_config" {
			b = append(b, `,"eNB_config":[`...)
			for k, i := range sel {
				if k > 0 {
					b = append(b, ',')
				}
				if s := snaps[i]; s == nil || s.Ms() < drbLagMs {
					b = append(b, f.enbEarly[i]...)
				} else {
					b = append(b, f.enbConfig[i]...)
				}
			}
			b = append(b, ']')
		}
		if typ == "all" || typ == "mac_stats" {
			b = append(b, `,"mac_stats":[`...)
			for k, i := range sel {
				if k > 0 {
					b = append(b, ',')
				}
				b = appendMacStats(b, f.emu.Cells[i], snaps[i], ue)
			}
			b = append(b, ']')
		}
		return append(b, '}')
	})
	doc := make([]byte, 0, len(body)+40)
	doc = append(doc, `{"date_time":"`...)
	doc = time.Now().UTC().AppendFormat(doc, "2006-01-02T15:04:05.000")
	return append(append(doc, '"'), body...)
}

// appendMacStats writes {"bs_id":N,"ue_mac_stats":[...]} for one cell.
func appendMacStats(b []byte, c *ran.Cell, s *ran.CellSnapshot, ue *ueSelector) []byte {
	b = append(b, `{"bs_id":`...)
	b = strconv.AppendUint(b, c.Cfg.BSID, 10)
	b = append(b, `,"ue_mac_stats":[`...)
	if s != nil {
		first := true
		for i := range s.Bearers {
			if !ue.match(s.Bearers[i].B) {
				continue
			}
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendUE(b, s, &s.Bearers[i])
		}
	}
	return append(b, "]}"...)
}

// ueSelector picks a UE by RNTI (fewer than 6 digits) or IMSI, as the controller does.
type ueSelector struct {
	rnti int
	imsi string
}

func (u *ueSelector) match(b *ran.Bearer) bool {
	if u == nil {
		return true
	}
	if u.imsi != "" {
		return b.UE.Cfg.IMSI == u.imsi
	}
	return int(b.Cfg.RNTI) == u.rnti
}

func (u *ueSelector) String() string {
	if u == nil {
		return "*"
	}
	return fmt.Sprintf("%d/%s", u.rnti, u.imsi)
}

// w appends "key":value for a uint32 protobuf field (values wrap like the real uint32).
func w(b []byte, key string, v uint64) []byte {
	b = append(b, '"')
	b = append(b, key...)
	b = append(b, `":`...)
	return strconv.AppendUint(b, uint64(uint32(v)), 10)
}

// appendUE writes one ue_mac_stats entry with the key order and types of the live
// OAI + flexran-rtc capture (fixtures/flexran/live-oai-rfsim/saturated.json).
func appendUE(b []byte, s *ran.CellSnapshot, u *ran.BearerSnapshot) []byte {
	rnti := uint64(u.B.Cfg.RNTI)
	sfn := uint64(s.SfnSf())
	b = append(b, `{"rnti":`...)
	b = strconv.AppendUint(b, rnti, 10)
	b = append(b, `,"mac_stats":{`...)
	b = w(b, "rnti", rnti)
	b = append(b, `,"bsr":[0,`...)
	b = strconv.AppendInt(b, int64(bsrIndex(u.ULQueueBytes)), 10)
	b = append(b, `,0,0],`...)
	b = w(b, "phr", uint64(u.PHR))
	b = append(b, `,"rlcReport":[{"lcId":1,"txQueueSize":0,"txQueueHolDelay":0,"statusPduSize":0},`+
		`{"lcId":2,"txQueueSize":0,"txQueueHolDelay":0,"statusPduSize":0},{"lcId":3,`...)
	b = w(b, "txQueueSize", uint64(u.QueueBytes))
	b = append(b, ',')
	b = w(b, "txQueueHolDelay", uint64(u.HOLms))
	b = append(b, `,"statusPduSize":0}],"pendingMacCes":0,"dlCqiReport":{`...)
	b = w(b, "sfnSn", sfn)
	b = append(b, `,"csiReport":[{"servCellIndex":0,"ri":0,"type":"FLCSIT_P10","p10csi":{`...)
	b = w(b, "wbCqi", uint64(u.CQI))
	b = append(b, `}}]},"ulCqiReport":{`...)
	b = w(b, "sfnSn", sfn)
	b = append(b, `,"cqiMeas":[{"type":"FLUCT_SRS","servCellIndex":0}],"pucchDbm":[{"p0PucchDbm":0,"servCellIndex":0}]},`+
		`"rrcMeasurements":{"measid":-1,"pcellRsrp":-1,"pcellRsrq":-1},"pdcpStats":{`...)
	b = w(b, "pktTx", u.DLPkts)
	b = append(b, ',')
	b = w(b, "pktTxBytes", u.DLBytes)
	b = append(b, ',')
	b = w(b, "pktTxSn", u.DLPkts%4096)
	b = append(b, ',')
	b = w(b, "pktTxW", u.DLPktsW)
	b = append(b, ',')
	b = w(b, "pktTxBytesW", u.DLBytesW)
	b = append(b, ',')
	b = w(b, "pktTxAiat", uint64(u.DLLastArrival))
	b = append(b, `,"pktTxAiatW":0,`...)
	b = w(b, "pktRx", u.ULPkts)
	b = append(b, ',')
	b = w(b, "pktRxBytes", u.ULBytes)
	b = append(b, ',')
	b = w(b, "pktRxSn", u.ULPkts%4096)
	b = append(b, ',')
	b = w(b, "pktRxW", u.ULPktsW)
	b = append(b, ',')
	b = w(b, "pktRxBytesW", u.ULBytesW)
	b = append(b, `,"pktRxAiat":0,"pktRxAiatW":0,"pktRxOo":0,"sfn":"`...)
	b = strconv.AppendInt(b, s.TTI, 10) // uint64 in protobuf JSON: a string
	b = append(b, `"},"macStats":{`...)
	b = w(b, "tbsDl", uint64(u.TBS))
	b = append(b, ',')
	b = w(b, "tbsUl", uint64(u.TBSUl))
	b = append(b, ',')
	b = w(b, "prbRetxDl", uint64(u.PRBRetx))
	b = append(b, ',')
	b = w(b, "prbRetxUl", uint64(u.ULPRBRetx))
	b = append(b, ',')
	b = w(b, "prbDl", uint64(u.PRB))
	b = append(b, ',')
	b = w(b, "prbUl", uint64(u.ULPRB))
	b = append(b, ',')
	b = w(b, "mcs1Dl", uint64(u.MCS))
	b = append(b, ',')
	b = w(b, "mcs2Dl", uint64(u.MCS))
	b = append(b, ',')
	b = w(b, "mcs1Ul", uint64(u.ULMCS))
	b = append(b, ',')
	b = w(b, "mcs2Ul", uint64(u.ULMCS))
	b = append(b, ',')
	b = w(b, "totalBytesSdusUl", u.ULDeliv)
	b = append(b, ',')
	b = w(b, "totalBytesSdusDl", u.DeliveredBytes)
	b = append(b, ',')
	b = w(b, "totalPrbDl", u.TotalPRB)
	b = append(b, ',')
	b = w(b, "totalPrbUl", u.ULTotalPRB)
	b = append(b, ',')
	b = w(b, "totalPduDl", u.TotalPDU)
	b = append(b, ',')
	b = w(b, "totalPduUl", u.ULPkts)
	b = append(b, ',')
	b = w(b, "totalTbsDl", u.TotalTBS)
	b = append(b, ',')
	b = w(b, "totalTbsUl", u.ULTotalTBS)
	b = append(b, `,"macSdusDl":[{`...)
	b = w(b, "sduLength", uint64(u.LastSDU))
	b = append(b, `,"lcid":3}],`...)
	b = w(b, "harqRound", uint64(u.HARQRound))
	if s.Ms() < erabLagMs {
		b = append(b, `},"gtpStats":[]},"harq":[`...)
	} else {
		b = append(b, `},"gtpStats":[{"eRabId":1,"teidEnb":0,"teidSgw":0}]},"harq":[`...)
	}
	for i, ack := range u.HARQACK[:u.HARQProcs] {
		if i > 0 {
			b = append(b, ',')
		}
		if ack {
			b = append(b, `"ACK"`...)
		} else {
			b = append(b, `"NACK"`...)
		}
	}
	b = append(b, `],"`+UEIPField+`":"`...)
	b = u.B.Cfg.IP.AppendTo(b)
	return append(b, `"}`...)
}

// bsrLimits are the upper bounds (bytes) of the buffer size levels of TS 36.321
// Table 6.1.3.1-1; level 63 is "more than 150000".
var bsrLimits = [...]int{0, 10, 12, 14, 17, 19, 22, 26, 31, 36, 42, 49, 57, 67, 78, 91, 107, 125, 146,
	171, 200, 234, 274, 321, 376, 440, 515, 603, 706, 826, 967, 1132, 1326, 1552, 1817, 2127, 2490,
	2915, 3413, 3995, 4677, 5476, 6411, 7505, 8787, 10287, 12043, 14099, 16507, 19325, 22624, 26487,
	31009, 36304, 42502, 49759, 58255, 68201, 79846, 93479, 109439, 128125, 150000}

// bsrIndex is the BSR level reporting an uplink buffer of n bytes.
func bsrIndex(n int) int {
	for i, limit := range bsrLimits {
		if n <= limit {
			return i
		}
	}
	return len(bsrLimits)
}
