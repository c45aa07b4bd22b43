package main

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
)

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// rebuild makes the documents of the current state, with fresh radio values. The
// configuration part is rebuilt only when the population changed.
func (s *source) rebuild() {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.config == nil || s.changed {
		s.config = s.appendConfigs(nil)
		s.changed = false
	}
	sfnSF := int(now.UnixMilli() % 10240) // frame*10 + subframe, as OAI's agent writes it
	mac := append(make([]byte, 0, 1600*len(s.ues)+256), `{"date_time":"`...)
	mac = now.UTC().AppendFormat(mac, "2006-01-02T15:04:05.000")
	mac = append(mac, `","mac_stats":[`...)
	for c := range s.cells {
		if c > 0 {
			mac = append(mac, ',')
		}
		mac = append(mac, `{"bs_id":`...)
		mac = strconv.AppendInt(mac, int64(10000+c), 10)
		mac = append(mac, `,"ue_mac_stats":[`...)
		n := 0
		for _, u := range s.ues {
			if u.attached && u.cell == c {
				n++
			}
		}
		share, first := s.prbs/max(1, n), true
		for _, u := range s.ues {
			if !u.attached || u.cell != c {
				continue
			}
			if !first {
				mac = append(mac, ',')
			}
			first = false
			mac = s.appendUE(mac, u, sfnSF, share)
		}
		mac = append(mac, "]}"...)
	}
	mac = append(mac, "]}"...)
	s.docs.Store(&docs{mac: mac, config: s.config})
	if s.e2 != nil {
		var lines []byte
		for c := range s.cells {
			lines = s.appendE2(lines, c, now)
		}
		s.e2.publish(lines)
	}
}

// all joins the statistics and the configuration into one GET /stats document.
func (d *docs) all() []byte {
	head, _, _ := strings.Cut(string(d.mac), `"mac_stats":`)
	out := append([]byte(head), d.config...)
	out = append(out, ',')
	return append(out, d.mac[len(head):]...)
}

// appendConfigs writes "eNB_config":[...] (without braces around it).
func (s *source) appendConfigs(b []byte) []byte {
	b = append(b, `"eNB_config":[`...)
	for c := range s.cells {
		if c > 0 {
			b = append(b, ',')
		}
		b = s.appendConfig(b, c)
	}
	return append(b, ']')
}

func (s *source) appendConfig(b []byte, c int) []byte {
	bs := strconv.Itoa(10000 + c)
	b = append(b, `{"bs_id":`+bs+`,"agent_info":[{"agent_id":`+strconv.Itoa(c)+`,"ip_port":"127.0.0.1:4000`+strconv.Itoa(c)+
		`","bs_id":`+bs+`,"capabilities":["LOPHY","HIPHY","LOMAC","HIMAC","RLC","PDCP","SDAP","RRC","S1AP"],"splits":[]}],`+
		`"eNB":{"header":{"version":0,"type":8,"xid":0},"cellConfig":[{"phyCellId":`+strconv.Itoa(c)+
		`,"dlBandwidth":`+strconv.Itoa(s.prbs)+`,"ulBandwidth":`+strconv.Itoa(s.prbs)+
		`,"carrierIndex":0,"dlFreq":2680,"ulFreq":2560,"eutraBand":7,"plmnId":[{"mcc":208,"mnc":93,"mncLength":2}]}]},`+
		`"UE":{"ueConfig":[`...)
	n := 0
	for _, u := range s.ues {
		if !u.attached || u.cell != c {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"rnti":`...)
		b = strconv.AppendInt(b, int64(u.rnti), 10)
		b = append(b, `,"imsi":"`+imsi(u)+`","ueIpv4":"`+ip(u)+`","dlSliceId":0}`...)
	}
	b = append(b, `]},"LC":{"header":{"version":0,"type":12,"xid":0},"lcUeConfig":[`...)
	n = 0
	for _, u := range s.ues {
		if !u.attached || u.cell != c {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = append(b, `{"rnti":`...)
		b = strconv.AppendInt(b, int64(u.rnti), 10)
		b = append(b, `,"lcConfig":[{"lcid":1,"lcg":0,"direction":2,"qosBearerType":0,"qci":9},`+
			`{"lcid":2,"lcg":0,"direction":2,"qosBearerType":0,"qci":9},{"lcid":3,"lcg":1,"direction":1,"qosBearerType":0,"qci":`...)
		b = strconv.AppendInt(b, int64(u.qci), 10)
		b = append(b, `}]}`...)
	}
	return append(b, "]}}"...)
}

func imsi(u *ue) string { return "20893" + leftPad(strconv.Itoa(u.id+1), 10) }

// ip is the UE's address in its cell's subnet (cached: it changes only with the cell).
func ip(u *ue) string {
	if u.ipCell != u.cell || u.ip == "" {
		u.ip, u.ipCell = "10.30."+strconv.Itoa(u.cell+1)+"."+strconv.Itoa(u.id%250+1), u.cell
	}
	return u.ip
}

func leftPad(s string, n int) string {
	for len(s) < n {
		s = "0" + s
	}
	return s
}

// appendUE writes one ue_mac_stats entry with the fields and types of the live OAI capture.
// mcsOfCQI is OAI's CQI → MCS map.
var mcsOfCQI = [16]int{0, 0, 1, 2, 4, 6, 8, 11, 13, 16, 18, 20, 23, 25, 27, 28}

func (s *source) appendUE(b []byte, u *ue, sfnSF, prbs int) []byte {
	cqi := 7 + s.rng.IntN(9)
	mcs := mcsOfCQI[cqi]
	tbs := 100 + s.rng.IntN(2192)
	u.queue = max(0, u.queue+s.rng.IntN(20000)-10000)
	w := func(key string, v int) {
		b = append(b, `"`+key+`":`...)
		b = strconv.AppendInt(b, int64(v), 10)
	}
	b = append(b, `{"rnti":`...)
	b = strconv.AppendInt(b, int64(u.rnti), 10)
	b = append(b, `,"mac_stats":{`...)
	w("rnti", u.rnti)
	b = append(b, `,"bsr":[0,0,0,0],`...)
	w("phr", 40)
	b = append(b, `,"rlcReport":[{"lcId":1,"txQueueSize":0,"txQueueHolDelay":0,"statusPduSize":0},`+
		`{"lcId":2,"txQueueSize":0,"txQueueHolDelay":0,"statusPduSize":0},{"lcId":3,`...)
	w("txQueueSize", u.queue)
	b = append(b, ',')
	w("txQueueHolDelay", u.queue/2000)
	b = append(b, `,"statusPduSize":0}],"pendingMacCes":0,"dlCqiReport":{`...)
	w("sfnSn", sfnSF)
	b = append(b, `,"csiReport":[{"servCellIndex":0,"ri":0,"type":"FLCSIT_P10","p10csi":{`...)
	w("wbCqi", cqi)
	b = append(b, `}}]},"ulCqiReport":{`...)
	w("sfnSn", sfnSF)
	b = append(b, `,"cqiMeas":[{"type":"FLUCT_SRS","servCellIndex":0}],"pucchDbm":[{"p0PucchDbm":0,"servCellIndex":0}]},`+
		`"rrcMeasurements":{`...)
	w("measid", u.measID)
	b = append(b, ',')
	w("pcellRsrp", u.rsrp)
	b = append(b, `,"pcellRsrq":`...)
	if u.rsrp == -1 {
		b = append(b, "-1"...)
	} else {
		b = append(b, "-10"...)
	}
	b = append(b, `},"pdcpStats":{"pktTx":41282,"pktTxBytes":60891726,"pktTxSn":321,"pktTxW":516,"pktTxBytesW":761616,`+
		`"pktTxAiat":113798,"pktTxAiatW":0,"pktRx":36,"pktRxBytes":2310,"pktRxSn":35,"pktRxW":0,"pktRxBytesW":0,`+
		`"pktRxAiat":109486,"pktRxAiatW":0,"pktRxOo":0,"sfn":"`...)
	b = strconv.AppendInt(b, int64(sfnSF), 10)
	b = append(b, `"},"macStats":{`...)
	w("tbsDl", tbs)
	b = append(b, `,"tbsUl":63,"prbRetxDl":0,"prbRetxUl":0,`...)
	w("prbDl", prbs)
	b = append(b, `,"prbUl":0,`...)
	w("mcs1Dl", mcs)
	b = append(b, ',')
	w("mcs2Dl", mcs)
	b = append(b, `,"mcs1Ul":10,"mcs2Ul":10,"totalBytesSdusUl":5523,"totalBytesSdusDl":43880892,"totalPrbDl":512903,`+
		`"totalPrbUl":12994,"totalPduDl":26715,"totalPduUl":4328,"totalTbsDl":47779327,"totalTbsUl":272816,`+
		`"macSdusDl":[{"sduLength":2289,"lcid":3}],"harqRound":8},"gtpStats":[{"eRabId":5,"teidEnb":0,"teidSgw":0}]},`+
		`"harq":["ACK","ACK","ACK","ACK","ACK","ACK","ACK","ACK"],"ueIpv4":"`+ip(u)+`"}`...)
	return b
}
