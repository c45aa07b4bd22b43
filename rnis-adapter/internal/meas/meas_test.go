package meas

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	gojson "github.com/goccy/go-json"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
)

const fixtures = "../../testdata/flexran"

func normalizeFile(t testing.TB, name string, ips Resolver) []Measurement {
	t.Helper()
	s := parseFile(t, name)
	return Normalize(&s, time.Unix(0, 42), ips, nil)
}

// parseFile reads the first sample of a fixture.
func parseFile(t testing.TB, name string) flexran.Snapshot {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	var p flexran.Parser
	snaps, err := p.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return snaps[0]
}

func some(v int64) Int { return flexran.Some(v) }

// The saturated live capture: one UE alone in a 25-PRB cell at CQI 15 gets the whole cell,
// TBS 2292 bytes (TS 36.213: I_TBS 26, 25 PRB = 18336 bits), the numbers of the MELD paper.
func TestSaturatedSingleUE(t *testing.T) {
	m := normalizeFile(t, "live-oai-rfsim/saturated.json", nil)[0]
	checks := map[string][2]Int{
		"cell_prbs":          {m.CellPRBs, some(25)},
		"dl_tbs":             {m.DLTBS, some(2292)},
		"rlc_queue":          {m.RLCQueue, some(934597)},
		"rlc_hol":            {m.RLCHOL, Int{}}, // OAI writes 0 without measuring it
		"best_cqi_tbs":       {m.BestCQITBS, some(2292)},
		"cell_best_cqi_tbs":  {m.CellBestCQITBS, some(2292)},
		"cell_alloc":         {m.CellAllocPRBs, some(25)},
		"rapid_prbs":         {m.RapidPRBs, some(25)},
		"rapid_capacity_bps": {m.RapidCapacity, some(18_336_000)},
		"cqi_capacity_bps":   {m.CQICapacity, some(18_336_000)},
		"dl_tbs_bps":         {m.DLTBSRate, some(18_336_000)},
		"frame":              {m.Frame, some(116)}, // sfnSn 1161 = frame*10 + subframe (OAI)
		"subframe":           {m.Subframe, some(1)},
		"harq":               {m.HARQ, some(8)},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("%s = %+v, want %+v", name, c[0], c[1])
		}
	}
	if m.Cell != "10000-0" || m.IMSI != "" || m.CellUEs != 1 || m.CellPRBUsage != 1 || m.ObservedNs != 42 {
		t.Errorf("%+v", m)
	}
	if m.SourceTimeNs.Set { // date_time is when the controller answered, not a measurement time
		t.Errorf("source time %d from one document", m.SourceTimeNs.V)
	}
}

// Two UEs share a cell: RAPID gives each its PRBs plus the unused ones (Eq. 5.1-5.3).
func TestRapidCapacityTwoUEs(t *testing.T) {
	ms := normalizeFile(t, "v2/monolithic-s1flex-2ue.json", nil)
	if len(ms) != 2 {
		t.Fatalf("%d measurements", len(ms))
	}
	for _, m := range ms {
		if m.CellUEs != 2 || m.CellAllocPRBs != some(4) || m.RapidPRBs != some(2+25-4) {
			t.Errorf("rnti %d: ues=%d alloc=%+v pe=%+v", m.RNTI, m.CellUEs, m.CellAllocPRBs, m.RapidPRBs)
		}
		if m.RapidCapacity != some(16992*1000) { // I_TBS 26 on 23 PRB = 16992 bits per 1 ms
			t.Errorf("C_i %+v", m.RapidCapacity)
		}
		if m.BestCQITBS != some(1480/8) {
			t.Errorf("best-CQI TBS on 2 PRB %+v", m.BestCQITBS)
		}
		if m.ECGI.MCC != "208" || m.ECGI.MNC != "95" || m.ECGI.CellID != "1E24000" {
			t.Errorf("ecgi %+v", m.ECGI)
		}
	}
	if ms[0].IMSI != "208950000000011" || ms[1].IMSI != "" {
		t.Errorf("imsi join: %q %q", ms[0].IMSI, ms[1].IMSI)
	}
}

func TestLegacyHasNoMacStats(t *testing.T) {
	m := normalizeFile(t, "legacy-2017/all_2.json", nil)[0]
	if m.DLTBS.Set || m.RapidCapacity.Set || m.WBCQI != some(15) || m.CQICapacity != some(18_336_000) {
		t.Errorf("%+v", m)
	}
	if m.RLCQueue != some(0) || len(m.ERABs) != 1 || m.ERABs[0].ID != 5 {
		t.Errorf("rlc=%+v erabs=%+v", m.RLCQueue, m.ERABs)
	}
}

type fixedIPs map[string]netip.Addr

func (f fixedIPs) Lookup(imsi string, _, _ int64) netip.Addr { return f[imsi] }

func TestIPFromResolverAndRoutingKey(t *testing.T) {
	ips := fixedIPs{"208950000000001": netip.MustParseAddr("10.30.1.1")}
	m := normalizeFile(t, "v2/l2sim-1ue.json", ips)[0]
	if got := m.RoutingKey(); got != "rnis.v1.meas.10000-0.208950000000001.10_30_1_1" {
		t.Errorf("routing key %s", got)
	}
	m.IMSI, m.IPv4 = "", netip.Addr{}
	if got := m.RoutingKey(); got != "rnis.v1.meas.10000-0.-.-" {
		t.Errorf("routing key %s", got)
	}
}

// jsonView mirrors mec_common.bus.rnis.RnisMeasurement with encoding/json, to check AppendJSON.
type jsonView struct {
	SchemaVersion  int       `json:"schema_version"`
	Cell           string    `json:"cell"`
	BSID           int64     `json:"bs_id"`
	PhyCellID      *int64    `json:"phy_cell_id"`
	RNTI           int64     `json:"rnti"`
	IMSI           *string   `json:"imsi"`
	UEIPv4         *string   `json:"ue_ipv4"`
	WBCQI          *int64    `json:"wb_cqi"`
	DLMCS          *int64    `json:"dl_mcs"`
	DLTBS          *int64    `json:"dl_tbs_bytes"`
	DLPRBs         *int64    `json:"dl_prbs"`
	CellPRBs       *int64    `json:"cell_prbs"`
	RLCQueue       *int64    `json:"rlc_queue_bytes"`
	RLCHOL         *int64    `json:"rlc_hol_delay_ms"`
	RLC            []rlcView `json:"rlc"`
	HARQ           *int64    `json:"harq_processes"`
	PHR            *int64    `json:"phr"`
	SFNSF          *int64    `json:"sfn_sf"`
	Frame          *int64    `json:"frame"`
	Subframe       *int64    `json:"subframe"`
	SourceTimeNs   *int64    `json:"source_time_ns"`
	SourceTimeUnc  *int64    `json:"source_time_uncertainty_ns"`
	ObservedNs     int64     `json:"observed_ns"`
	TTIus          int64     `json:"tti_us"`
	BestCQITBS     *int64    `json:"best_cqi_tbs_bytes"`
	CellBestCQITBS *int64    `json:"cell_best_cqi_tbs_bytes"`
	CellUEs        int       `json:"cell_ues"`
	CellAlloc      *int64    `json:"cell_allocated_prbs"`
	CellPRBUsage   *float64  `json:"cell_prb_usage"`
	RapidPRBs      *int64    `json:"rapid_prbs"`
	RapidCapacity  *int64    `json:"rapid_capacity_bps"`
	CQICapacity    *int64    `json:"cqi_capacity_bps"`
	RadioTBS       *int64    `json:"radio_tbs_bytes"`
	DLTBSRate      *int64    `json:"dl_tbs_bps"`
}

type rlcView struct {
	LCID      int64  `json:"lcid"`
	TxQueue   int64  `json:"tx_queue_bytes"`
	HOL       *int64 `json:"hol_delay_ms"`
	RetxQueue *int64 `json:"retx_queue_bytes"`
}

func ptr(v Int) *int64 {
	if !v.Set {
		return nil
	}
	return &v.V
}

func view(m *Measurement) jsonView {
	v := jsonView{SchemaVersion: 1, Cell: m.Cell, BSID: m.BSID, PhyCellID: ptr(m.PhyCellID), RNTI: m.RNTI,
		WBCQI: ptr(m.WBCQI), DLMCS: ptr(m.DLMCS), DLTBS: ptr(m.DLTBS), DLPRBs: ptr(m.DLPRBs), CellPRBs: ptr(m.CellPRBs),
		RLCQueue: ptr(m.RLCQueue), RLCHOL: ptr(m.RLCHOL), RLC: []rlcView{}, HARQ: ptr(m.HARQ), PHR: ptr(m.PHR),
		SFNSF: ptr(m.SFNSF), Frame: ptr(m.Frame), Subframe: ptr(m.Subframe), SourceTimeNs: ptr(m.SourceTimeNs),
		SourceTimeUnc: ptr(m.SourceTimeUncNs), ObservedNs: m.ObservedNs, TTIus: m.TTIMicros(), BestCQITBS: ptr(m.BestCQITBS), CellBestCQITBS: ptr(m.CellBestCQITBS),
		CellUEs: m.CellUEs, CellAlloc: ptr(m.CellAllocPRBs), RapidPRBs: ptr(m.RapidPRBs),
		RapidCapacity: ptr(m.RapidCapacity), CQICapacity: ptr(m.CQICapacity), RadioTBS: ptr(m.RadioTBS),
		DLTBSRate: ptr(m.DLTBSRate)}
	if m.IMSI != "" {
		v.IMSI = &m.IMSI
	}
	if m.IPv4.IsValid() {
		s := m.IPv4.String()
		v.UEIPv4 = &s
	}
	if m.HasPRBUsage() {
		v.CellPRBUsage = &m.CellPRBUsage
	}
	for _, q := range m.RLC {
		if q.LCID.Set && q.TxQueue.Set {
			v.RLC = append(v.RLC, rlcView{q.LCID.V, q.TxQueue.V, ptr(q.TxHOL), ptr(q.RetxQueue)})
		}
	}
	return v
}

// AppendJSON writes the same document encoding/json writes from the mirror struct, for every
// UE of every fixture.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*", "*.json"))
	ips := fixedIPs{"208950000000001": netip.MustParseAddr("10.30.1.1")}
	n := 0
	for _, f := range files {
		doc, _ := os.ReadFile(f)
		var p flexran.Parser
		snaps, err := p.Parse(doc)
		if err != nil {
			continue
		}
		for _, s := range snaps {
			for _, m := range Normalize(&s, time.Unix(0, 7), ips, ranclock.New(ranclock.SFNDecimal)) {
				n++
				fast := m.AppendJSON(nil)
				want, _ := json.Marshal(view(&m))
				var a, b any
				if err := json.Unmarshal(fast, &a); err != nil {
					t.Fatalf("%s: invalid JSON %s: %v", f, fast, err)
				}
				_ = json.Unmarshal(want, &b)
				if !reflect.DeepEqual(a, b) {
					t.Errorf("%s rnti %d:\n got %s\nwant %s", f, m.RNTI, fast, want)
				}
				if !bytes.HasPrefix(fast, []byte(`{"schema_version":1,`)) {
					t.Errorf("schema_version first: %s", fast)
				}
			}
		}
	}
	if n < 15 {
		t.Fatalf("only %d measurements checked", n)
	}
}

// A cell message carries the same values as the per-UE messages: the cell's fields once, the
// UE's own in "ues"; merged back they give each UE's document.
func TestAppendCellJSONMatchesPerUE(t *testing.T) {
	ms := normalizeFile(t, "v2/monolithic-s1flex-2ue.json", nil)
	var cell map[string]any
	doc := AppendCellJSON(nil, ms)
	if err := json.Unmarshal(doc, &cell); err != nil {
		t.Fatalf("invalid JSON %s: %v", doc, err)
	}
	ues, _ := cell["ues"].([]any)
	if len(ues) != len(ms) || len(ms) < 2 {
		t.Fatalf("%d UEs in %s", len(ues), doc)
	}
	delete(cell, "ues")
	for i, entry := range ues {
		merged := entry.(map[string]any)
		for k, v := range cell {
			if _, dup := merged[k]; dup {
				t.Errorf("%s is both a cell and a UE field", k)
			}
			merged[k] = v
		}
		var want map[string]any
		_ = json.Unmarshal(ms[i].AppendJSON(nil), &want)
		if !reflect.DeepEqual(merged, want) {
			t.Errorf("UE %d:\n got %v\nwant %v", i, merged, want)
		}
	}
	if !bytes.HasPrefix(doc, []byte(`{"schema_version":1,"cell":"123456-0",`)) || CellRoutingKey(ms[0].Cell) != "rnis.v1.cell.123456-0" {
		t.Errorf("%s", doc)
	}
}

func TestStringsAreEscaped(t *testing.T) {
	m := Measurement{Cell: "a\"b\\c\n", IMSI: "é"}
	var v map[string]any
	if err := json.Unmarshal(m.AppendJSON(nil), &v); err != nil || v["cell"] != "a\"b\\c\n" || v["imsi"] != "é" {
		t.Fatalf("%v %v", v, err)
	}
}

// Encoding cost per message: the hand-written appender vs encoding/json vs goccy/go-json
// (docs/rnis-adapter.md has the figures).
func BenchmarkEncode(b *testing.B) {
	m := normalizeFile(b, "live-oai-rfsim/saturated.json", nil)[0]
	b.Run("append", func(b *testing.B) {
		buf := make([]byte, 0, 2048)
		b.ReportAllocs()
		for range b.N {
			buf = m.AppendJSON(buf[:0])
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = json.Marshal(view(&m))
		}
	})
	b.Run("goccy-go-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = gojson.Marshal(view(&m))
		}
	})
}

// On an NR cell (an E2 gNB) transport blocks follow TS 38.214 §5.1.3.2, not LTE's table:
// CQI 15 → MCS 28 (OAI's map) of table 1 (948/1024, 64QAM); 25 PRBs × 144 REs (13
// symbols less one DMRS symbol) → N_info 19,997 → 19,968 bits (3 code blocks) = 2,496
// bytes per slot, where LTE's table gives 2,292 per subframe; at µ = 1 a slot is half a
// subframe. Without a CQI, MELD's D_TBS comes from the MCS.
func TestNRCellUsesTS38214(t *testing.T) {
	s := parseFile(t, "live-oai-rfsim/saturated.json")
	s.Stations[0].Cells[0].NR = &flexran.NRCell{PDSCHSymbols: 13, SlotsPerSubframe: 2}
	m := Normalize(&s, time.Unix(0, 42), nil, nil)[0]
	if m.BestCQITBS != some(2496) || m.CellBestCQITBS != some(2496) || m.RadioTBS != some(2496) {
		t.Errorf("NR best-CQI TBS %+v, cell %+v, D_TBS %+v; want 2496", m.BestCQITBS, m.CellBestCQITBS, m.RadioTBS)
	}
	if m.CQICapacity != some(2496*8*2000) { // µ = 1: 2,000 slots a second
		t.Errorf("NR CQI capacity %+v bit/s", m.CQICapacity)
	}
	s.Stations[0].UEs[0].WBCQI = Int{}
	s.Stations[0].UEs[0].MCS1DL = some(9) // 679/1024 QPSK: N_info 4,774 → 4,736 bits
	m = Normalize(&s, time.Unix(0, 42), nil, nil)[0]
	if m.RadioTBS != some(4736/8) || m.CQICapacity.Set {
		t.Errorf("without CQI: D_TBS %+v, CQI capacity %+v", m.RadioTBS, m.CQICapacity)
	}
}
