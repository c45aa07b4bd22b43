package mec012

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
	"mts.invalid/suite/services/common/go/svc"
)

type oneAddress netip.Addr

func (a oneAddress) Lookup(string, int64, int64) netip.Addr { return netip.Addr(a) }

// layer2Of serves L2Meas from one capture of a live OAI eNB (FlexRAN, rfsim).
func layer2Of(t *testing.T, capture string) map[string]any {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("../../testdata/flexran/live-oai-rfsim", capture))
	if err != nil {
		t.Fatal(err)
	}
	var p flexran.Parser
	snaps, err := p.Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	tracker := uestate.New(time.Second)
	tracker.Update(meas.Normalize(&snaps[0], time.Unix(0, 42), oneAddress(netip.MustParseAddr("10.30.1.1")), nil), time.Now())
	api, err := New(Config{PublicURL: "http://rnis", Tokens: []string{"t"}}, tracker, obs.NewMetrics(svc.NewHealth()),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	api.Routes(mux)
	req := httptest.NewRequest(http.MethodGet, Base+"/queries/layer2_meas", nil)
	req.Header.Set("Authorization", "Bearer t")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	var body map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	return body
}

// TestLayer2FromALiveCapture: every L2Meas field is the capture's value through the
// documented formula (nominal 1 ms TTI: no clock here); a field the source does not
// measure (OAI's head-of-line delay, always 0) is absent, not 0.
func TestLayer2FromALiveCapture(t *testing.T) {
	for _, tc := range []struct {
		capture  string
		cell, ue map[string]float64
	}{
		{ // prbDl 25 of 25, tbsDl 2292 B, prbUl 0 of 25 (tbsUl 63 is an earlier grant's), 934597 B queued
			capture: "saturated.json",
			cell: map[string]float64{"dl_total_prb_usage_cell": 100, "dl_nongbr_prb_usage_cell": 100,
				"ul_total_prb_usage_cell": 0, "ul_nongbr_prb_usage_cell": 0, "number_of_active_ue_dl_nongbr_cell": 1},
			ue: map[string]float64{"dl_nongbr_throughput_ue": 2292 * 8, "ul_nongbr_throughput_ue": 0},
		},
		{ // prbDl 18 of 25, tbsDl 1692 B, nothing queued
			capture: "light-load-6mbps.json",
			cell: map[string]float64{"dl_total_prb_usage_cell": 72, "dl_nongbr_prb_usage_cell": 72,
				"ul_total_prb_usage_cell": 0, "number_of_active_ue_dl_nongbr_cell": 0},
			ue: map[string]float64{"dl_nongbr_throughput_ue": 1692 * 8, "ul_nongbr_throughput_ue": 0},
		},
	} {
		body := layer2Of(t, tc.capture)
		cells, ues := body["cellInfo"].([]any), body["cellUEInfo"].([]any)
		if len(cells) != 1 || len(ues) != 1 {
			t.Fatalf("%s: %v", tc.capture, body)
		}
		cell, ue := cells[0].(map[string]any), ues[0].(map[string]any)
		for name, want := range tc.cell {
			if cell[name] != want {
				t.Errorf("%s: cell %s = %v, want %v", tc.capture, name, cell[name], want)
			}
		}
		for name, want := range tc.ue {
			if ue[name] != want {
				t.Errorf("%s: UE %s = %v, want %v", tc.capture, name, ue[name], want)
			}
		}
		for _, name := range []string{"dl_nongbr_delay_ue", "dl_gbr_throughput_ue", "dl_nongbr_data_volume_ue"} {
			if _, present := ue[name]; present {
				t.Errorf("%s: %s is served, but the source does not measure it", tc.capture, name)
			}
		}
	}
}
