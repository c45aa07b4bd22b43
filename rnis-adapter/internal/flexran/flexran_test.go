package flexran

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const fixtures = "../../testdata/flexran"

func parseFile(t *testing.T, name string) []Snapshot {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	var p Parser
	snaps, err := p.Parse(doc)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return snaps
}

// Every fixture (real controller output) parses, and every UE in it is read, except the one
// the 2017 file lists twice.
func TestEveryFixtureParses(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*", "*.json"))
	if len(files) < 15 {
		t.Fatalf("found %d fixtures, want the whole set", len(files))
	}
	for _, f := range files {
		name, _ := filepath.Rel(fixtures, f)
		if strings.HasSuffix(name, "stats-conf-enb.json") {
			continue // the reporting configuration, not statistics
		}
		t.Run(name, func(t *testing.T) {
			for _, s := range parseFile(t, name) {
				for _, skip := range s.Skipped {
					if name != "legacy-2017/all_1.json" || !strings.Contains(skip.Reason, "listed twice") {
						t.Errorf("skipped %+v", skip)
					}
				}
			}
		})
	}
}

func TestV2SingleUE(t *testing.T) {
	snaps := parseFile(t, "v2/l2sim-1ue.json")
	s := snaps[0]
	if s.Legacy || s.Time.IsZero() || s.Time.Format("15:04:05.000") != "13:00:22.218" {
		t.Fatalf("legacy=%v time=%v", s.Legacy, s.Time)
	}
	st := s.Stations[0]
	if st.BSID != 10000 || len(st.Cells) != 1 || st.Cells[0].DLBandwidth != Some(25) || st.Cells[0].PhyCellID != Some(0) {
		t.Fatalf("station %+v", st)
	}
	if st.UEConfig[0].RNTI != 23581 || st.UEConfig[0].IMSI != "208950000000001" {
		t.Fatalf("ueConfig %+v", st.UEConfig)
	}
	ue := st.UEs[0]
	want := UEStats{RNTI: 23581, WBCQI: Some(15), PHR: Some(40), TBSDL: Some(0), PRBDL: Some(2),
		MCS1DL: Some(28), HARQProcesses: Some(8), SFNSF: Some(2490)}
	if ue.RNTI != want.RNTI || ue.WBCQI != want.WBCQI || ue.PHR != want.PHR || ue.TBSDL != want.TBSDL ||
		ue.PRBDL != want.PRBDL || ue.MCS1DL != want.MCS1DL || ue.HARQProcesses != want.HARQProcesses || ue.SFNSF != want.SFNSF {
		t.Fatalf("ue %+v", ue)
	}
	if len(ue.RLC) != 3 || ue.RLC[2].LCID != Some(3) {
		t.Fatalf("rlc %+v", ue.RLC)
	}
	if ue.RRC.RSRP != Some(-1) {
		t.Fatalf("rrc %+v", ue.RRC)
	}
}

func TestLiveSaturatedCapture(t *testing.T) {
	ue := parseFile(t, "live-oai-rfsim/saturated.json")[0].Stations[0].UEs[0]
	if ue.TBSDL != Some(2292) || ue.PRBDL != Some(25) || ue.RLC[2].TxQueue != Some(934597) {
		t.Fatalf("ue %+v", ue)
	}
	conf := parseFile(t, "live-oai-rfsim/saturated.json")[0].Stations[0].UEConfig[0]
	if conf.IMSI != "" { // "0": eNB without S1
		t.Fatalf("imsi %q, want unknown", conf.IMSI)
	}
}

func TestTwoStationsWithNeighbours(t *testing.T) {
	s := parseFile(t, "v2/two-bs-x2-2ue.json")[0]
	if len(s.Stations) != 2 || s.Stations[0].BSID != 98765 || s.Stations[1].BSID != 123456 {
		t.Fatalf("stations %+v", s.Stations)
	}
	ue := s.Stations[0].UEs[0]
	if ue.RNTI != 29646 || ue.RRC.RSRP != Some(-90) || len(ue.RRC.Neighbours) != 2 || ue.RRC.Neighbours[0].PhyCellID != Some(10) {
		t.Fatalf("ue %+v", ue)
	}
	if len(ue.ERABs) != 1 || ue.ERABs[0] != 5 {
		t.Fatalf("erabs %v", ue.ERABs)
	}
}

func TestLegacyFormat(t *testing.T) {
	s := parseFile(t, "legacy-2017/all_2.json")[0]
	if !s.Legacy || len(s.Stations) != 1 {
		t.Fatalf("legacy=%v stations=%d", s.Legacy, len(s.Stations))
	}
	st := s.Stations[0]
	if st.BSID != 0 || st.Cells[0].PhyCellID != Some(0) || st.Cells[0].DLBandwidth != Some(25) {
		t.Fatalf("station %+v", st)
	}
	ue := st.UEs[0]
	if ue.RNTI != 36927 || ue.WBCQI != Some(15) || ue.TBSDL.Set || ue.RLC[1].TxQueue != Some(1000) || ue.RLC[1].TxHOL != Some(10) {
		t.Fatalf("ue %+v", ue)
	}
}

func TestLegacyMacStatsOnly(t *testing.T) {
	s := parseFile(t, "legacy-2017/mac_stats_1.json")[0]
	if len(s.Stations) != 1 || len(s.Stations[0].Cells) != 0 || s.Stations[0].UEs[0].WBCQI != Some(7) {
		t.Fatalf("%+v", s.Stations)
	}
}

func TestArrayOfSamples(t *testing.T) {
	snaps := parseFile(t, "store-develop/multiple_data_samples_file.json")
	if len(snaps) != 5 {
		t.Fatalf("%d samples, want 5", len(snaps))
	}
	if snaps[1].Stations[0].UEs[0].TBSDL != Some(11287) {
		t.Fatalf("sample 1: %+v", snaps[1].Stations[0].UEs[0])
	}
}

func TestDuplicateRNTIIsSkipped(t *testing.T) {
	s := parseFile(t, "legacy-2017/all_1.json")[0]
	if len(s.Stations[0].UEs) != 1 || len(s.Skipped) != 1 {
		t.Fatalf("ues=%d skipped=%+v", len(s.Stations[0].UEs), s.Skipped)
	}
}

func TestUint64AsString(t *testing.T) {
	var p Parser
	snaps, err := p.Parse([]byte(`{"mac_stats":[{"bs_id":"7","ue_mac_stats":[{"rnti":"12","mac_stats":{"macStats":{"tbsDl":"1500"}}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	st := snaps[0].Stations[0]
	if st.BSID != 7 || st.UEs[0].RNTI != 12 || st.UEs[0].TBSDL != Some(1500) {
		t.Fatalf("%+v", st)
	}
}

func TestBadUEIsSkippedOthersKept(t *testing.T) {
	doc := `{"mac_stats":[{"bs_id":1,"ue_mac_stats":[
		{"rnti":1,"mac_stats":{"phr":"x"}},
		{"rnti":2,"mac_stats":{"dlCqiReport":{"csiReport":[{"p10csi":{"wbCqi":99}}]}}},
		{"mac_stats":{}},
		"nonsense",
		{"rnti":70000,"mac_stats":{}},
		{"rnti":5,"mac_stats":{"phr":30}}]}]}`
	var p Parser
	snaps, err := p.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := snaps[0]
	if len(s.Stations[0].UEs) != 1 || s.Stations[0].UEs[0].RNTI != 5 || len(s.Skipped) != 5 {
		t.Fatalf("ues=%+v skipped=%+v", s.Stations[0].UEs, s.Skipped)
	}
}

func TestUnusableDocuments(t *testing.T) {
	for _, doc := range []string{``, `{`, `[]`, `42`, `{"reports":[]}`, `{"mac_stats":{}}`, `[{"mac_stats":[]}, 3]`,
		`{"mac_stats":[], "date_time":"yesterday"}`} {
		var p Parser
		if _, err := p.Parse([]byte(doc)); err == nil {
			t.Errorf("%q: no error", doc)
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(fixtures, "*", "*.json"))
	for _, name := range files {
		if doc, err := os.ReadFile(name); err == nil {
			f.Add(doc)
		}
	}
	f.Add([]byte(`{"mac_stats":[{"bs_id":"1","ue_mac_stats":[{"rnti":"2","mac_stats":{"rlcReport":[{"lcId":3}]}}]}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		var p Parser
		snaps, err := p.Parse(doc)
		if err != nil {
			return
		}
		for _, s := range snaps {
			for _, st := range s.Stations {
				for _, ue := range st.UEs {
					if ue.RNTI < 0 || ue.RNTI > 65535 || (ue.WBCQI.Set && (ue.WBCQI.V < 0 || ue.WBCQI.V > 15)) {
						t.Fatalf("out-of-range UE accepted: %+v", ue)
					}
				}
			}
		}
	})
}

// BenchmarkParse parses the live OAI capture (one UE, the whole document) and a 64-UE
// mac_stats poll of the synthetic source.
func BenchmarkParse(b *testing.B) {
	b.Run("live-1ue", func(b *testing.B) { benchParse(b, filepath.Join(fixtures, "live-oai-rfsim", "saturated.json")) })
	b.Run("mac_stats-64ue", func(b *testing.B) { benchParse(b, "../../testdata/synthetic/mac_stats-64ue.json") })
}

func benchParse(b *testing.B, path string) {
	doc, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var p Parser
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	defer func() {
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		used := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
		b.ReportMetric(float64(used)/1e3/float64(b.N), "cpu-µs/op")
	}()
	for range b.N {
		if _, err := p.Parse(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// parseIPv4 accepts exactly the IPv4 addresses netip.ParseAddr accepts.
func TestParseIPv4MatchesNetip(t *testing.T) {
	for _, text := range []string{"10.30.1.1", "0.0.0.0", "255.255.255.255", "1.2.3", "1.2.3.4.5", "256.1.1.1",
		"01.2.3.4", "1..2.3", "", ".1.2.3", "1.2.3.", "::1", "::ffff:1.2.3.4", "1.2.3.4 ", "a.b.c.d", "1.2.3.04", "0.10.100.200"} {
		want, err := netip.ParseAddr(text)
		wantOK := err == nil && want.Is4()
		got, ok := parseIPv4([]byte(text))
		if ok != wantOK || (ok && got != want) {
			t.Errorf("%q: got %v %v, want %v %v", text, got, ok, want, wantOK)
		}
	}
}

func FuzzIPv4(f *testing.F) {
	f.Add("10.30.1.1")
	f.Fuzz(func(t *testing.T, text string) {
		want, err := netip.ParseAddr(text)
		wantOK := err == nil && want.Is4()
		if got, ok := parseIPv4([]byte(text)); ok != wantOK || (ok && got != want) {
			t.Errorf("%q: got %v %v, want %v %v", text, got, ok, want, wantOK)
		}
	})
}
