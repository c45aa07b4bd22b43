package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

const token = "test-token"

const cfg = `{"dl_tun":{"name":"x"},"stats_period_ms":1,"cells":[{"bs_id":10000,"prb":25},{"bs_id":10001,"phy_cell_id":1,"prb":50,"scheduler":"pf"}],
 "ues":[{"name":"ue1","imsi":"208930000000001","bearers":[
   {"bs_id":10000,"rnti":17921,"ip":"10.30.0.1","tun":{"name":"rf0"},"channel":{"cqi":12}},
   {"bs_id":10001,"rnti":18177,"ip":"10.30.1.1","tun":{"name":"rf1"},"channel":{"cqi":15}}]}]}`

func setup(t *testing.T) (*ran.Emulator, *httptest.Server) {
	t.Helper()
	c, err := ran.ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	emu, err := ran.New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// fill a queue so that the report shows live values
	for i := 0; i < 100; i++ {
		emu.Inject(packet(1500), 0)
	}
	for tti := int64(0); tti < 50; tti++ { // past the E-RAB's set-up (erabLagMs)
		emu.Step(tti * 1e6)
	}
	return emu, serve(t, emu)
}

// serve runs the emulator's API on a test server (closed at the test's end).
func serve(t *testing.T, emu *ran.Emulator) *httptest.Server {
	t.Helper()
	srv, err := NewServer(emu, []string{token}, "10.20.0.2:9999", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

func get(t *testing.T, ts *httptest.Server, method, path, body string, auth bool) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
	if auth {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// shape maps every JSON path to its value type; list elements share the path "[]".
func shape(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		out[path] = "object"
		for k, e := range x {
			shape(e, path+"."+k, out)
		}
	case []any:
		out[path] = "array"
		for _, e := range x {
			shape(e, path+"[]", out)
		}
	case string:
		out[path] = "string"
	case float64:
		out[path] = "number"
	case bool:
		out[path] = "bool"
	default:
		out[path] = fmt.Sprintf("%T", v)
	}
}

func shapeOf(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, raw)
	}
	out := map[string]string{}
	shape(v, "", out)
	return out
}

// fixtures are the FlexRAN captures the repository keeps (the RNIS adapter's test data).
var fixtures = filepath.Join("..", "..", "..", "..", "rnis-adapter", "testdata", "flexran")

func fixture(t *testing.T, rel string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures, rel))
	if err != nil {
		t.Fatalf("fixture %s: %v", rel, err)
	}
	return raw
}

// GET /stats has exactly the keys and value types of the live OAI + flexran-rtc capture,
// plus the documented extension ueIpv4.
func TestStatsShapeMatchesLiveController(t *testing.T) {
	_, ts := setup(t)
	code, raw := get(t, ts, "GET", "/stats", "", true)
	if code != 200 {
		t.Fatalf("status %d: %s", code, raw)
	}
	ours, live := shapeOf(t, raw), shapeOf(t, fixture(t, "live-oai-rfsim/saturated.json"))
	for p, typ := range live {
		if ours[p] != typ {
			t.Errorf("%s: ours %q, live controller %q", p, ours[p], typ)
		}
	}
	for p, typ := range ours {
		if live[p] == "" && !strings.HasSuffix(p, "."+UEIPField) {
			t.Errorf("%s (%s): not in the live controller's output", p, typ)
		}
	}
}

// Every per-UE mac_stats key we emit exists with the same type in each flexran-rtc v2
// apidoc example (those also carry s1apStats and neighbour measurements we do not model).
func TestMacStatsKeysInEveryV2Fixture(t *testing.T) {
	_, ts := setup(t)
	_, raw := get(t, ts, "GET", "/stats/mac_stats", "", true)
	ours := shapeOf(t, raw)
	files, _ := filepath.Glob(filepath.Join(fixtures, "v2", "*.json"))
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "stats-conf-enb.json") {
			continue
		}
		raw, _ := os.ReadFile(f)
		theirs := shapeOf(t, raw)
		for p, typ := range ours {
			if strings.HasPrefix(p, ".mac_stats[].ue_mac_stats[].mac_stats") && theirs[p] != typ {
				t.Errorf("%s: %s has %q, ours %q", filepath.Base(f), p, theirs[p], typ)
			}
		}
		checked++
	}
	if checked < 5 {
		t.Fatalf("only %d v2 fixtures found", checked)
	}
}

// The report carries the live MAC state and the UE's IP.
func TestStatsValues(t *testing.T) {
	emu, ts := setup(t)
	before := time.Now().UTC().Truncate(time.Millisecond)
	_, raw := get(t, ts, "GET", "/stats/enb/10000", "", true)
	after := time.Now().UTC()
	var doc struct {
		DateTime  string `json:"date_time"`
		ENBConfig []struct {
			BSID int `json:"bs_id"`
			UE   struct {
				UEConfig []map[string]any `json:"ueConfig"`
			} `json:"UE"`
		} `json:"eNB_config"`
		MacStats []struct {
			BSID int `json:"bs_id"`
			UEs  []struct {
				RNTI  int            `json:"rnti"`
				IP    string         `json:"ueIpv4"`
				Stats map[string]any `json:"mac_stats"`
				HARQ  []string       `json:"harq"`
			} `json:"ue_mac_stats"`
		} `json:"mac_stats"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.MacStats) != 1 || doc.MacStats[0].BSID != 10000 || len(doc.MacStats[0].UEs) != 1 {
		t.Fatalf("want one BS with one UE: %s", raw)
	}
	ue := doc.MacStats[0].UEs[0]
	mac := ue.Stats["macStats"].(map[string]any)
	cqi := ue.Stats["dlCqiReport"].(map[string]any)["csiReport"].([]any)[0].(map[string]any)["p10csi"].(map[string]any)["wbCqi"]
	rlc := ue.Stats["rlcReport"].([]any)[2].(map[string]any)
	b := emu.Cells[0].Bearers()[0]
	switch {
	case ue.RNTI != 17921 || ue.IP != "10.30.0.1" || doc.ENBConfig[0].UE.UEConfig[0]["ueIpv4"] != "10.30.0.1":
		t.Errorf("identity: rnti %d ip %q", ue.RNTI, ue.IP)
	case cqi != 12.0 || mac["mcs1Dl"] != 23.0 || mac["prbDl"] != 25.0 || mac["tbsDl"] != 1572.0:
		// OAI maps CQI 12 to MCS 23 (I_TBS 21): 12576 bits on 25 PRB
		t.Errorf("CQI 12 on 25 PRB is MCS 23, TBS 1572 B: got cqi %v %v", cqi, mac)
	case rlc["txQueueSize"] != float64(b.QueueBytes()) || rlc["lcId"] != 3.0:
		t.Errorf("queue %v, ground truth %d", rlc["txQueueSize"], b.QueueBytes())
	case len(ue.HARQ) != 8:
		t.Errorf("harq %v", ue.HARQ)
	}
	// date_time is when the request was answered, as the controller writes it (UTC, ms)
	answered, err := time.Parse("2006-01-02T15:04:05.000", doc.DateTime)
	if err != nil || answered.Before(before) || answered.After(after) {
		t.Errorf("date_time %q, want the answer time (%v..%v)", doc.DateTime, before, after)
	}
	if strings.Contains(string(raw), "date_time_ns") {
		t.Error("date_time_ns extension is gone: the controller has none")
	}
}

func TestStatsErrorsAndAuth(t *testing.T) {
	_, ts := setup(t)
	cases := []struct {
		method, path, body string
		auth               bool
		code               int
		msg                string
	}{
		{"GET", "/stats", "", false, 401, "bearer token"},
		{"GET", "/stats/bogus", "", true, 400, "invalid statistics type"},
		{"GET", "/stats/enb/4242", "", true, 400, "can not find agent"},
		{"GET", "/stats/ue/999", "", true, 400, "invalid UE ID"},
		{"GET", "/stats/ue/abc", "", true, 400, "invalid UE ID"},
		{"POST", "/stats/conf/enb/10000", `{"reports":[{"reportFrequency":"FLSRF_PERIODICAL","sf":0}]}`, true, 400, "sf"},
		{"POST", "/stats/conf/enb/10000", `{"reports":[]}`, true, 400, "exactly one"},
		{"PATCH", "/emulator/v1/ues/ue1/cells/10000/channel", `{"cqi":99}`, true, 422, "cqi"},
		{"PATCH", "/emulator/v1/ues/ue1/cells/10000/channel", `{"cqi":"x"}`, true, 400, "invalid"},
		{"PATCH", "/emulator/v1/ues/ue9/cells/10000/channel", `{"cqi":3}`, true, 404, "no UE"},
		{"GET", "/emulator/v1/nothing", "", true, 404, "no such"},
	}
	for _, c := range cases {
		code, raw := get(t, ts, c.method, c.path, c.body, c.auth)
		var pd map[string]any
		json.Unmarshal(raw, &pd)
		if code != c.code || !strings.Contains(fmt.Sprint(pd["detail"]), c.msg) || pd["status"] != float64(c.code) {
			t.Errorf("%s %s: %d %s; want %d with %q", c.method, c.path, code, raw, c.code, c.msg)
		}
	}
	for _, open := range []string{"/healthz", "/metrics", "/openapi.json"} {
		if code, _ := get(t, ts, "GET", open, "", false); code != 200 {
			t.Errorf("%s: %d without a token", open, code)
		}
	}
}

func TestUEQueriesAndStatsConf(t *testing.T) {
	emu, ts := setup(t)
	for _, path := range []string{"/stats/ue/17921", "/stats/ue/208930000000001", "/stats/enb/0/ue/17921"} {
		code, raw := get(t, ts, "GET", path, "", true)
		if code != 200 || !strings.Contains(string(raw), `"rnti":17921`) {
			t.Errorf("%s: %d %s", path, code, raw)
		}
	}
	// the IMSI finds the UE on both cells
	_, raw := get(t, ts, "GET", "/stats/ue/208930000000001/", "", true)
	_ = raw
	body := `{"reports":[{"reportFrequency":"FLSRF_PERIODICAL","sf":50,"cellReports":["FLCST_NOISE_INTERFERENCE"],"ueReports":["FLUST_MAC_STATS"]}]}`
	if code, raw := get(t, ts, "POST", "/stats/conf/enb/10000", body, true); code != 200 {
		t.Fatalf("conf: %d %s", code, raw)
	}
	if sc := emu.Cells[0].StatsConf(); sc.SF != 50 {
		t.Fatalf("sf %d, want 50", sc.SF)
	}
	// with sf = 50 the report is refreshed at TTIs that are multiples of 50 only; date_time
	// (the answer's time) is left out of the comparison
	report := func() string {
		_, raw := get(t, ts, "GET", "/stats/enb/10000/mac_stats", "", true)
		return string(raw[bytes.IndexByte(raw, ','):])
	}
	start := emu.Cells[0].TTI.Load()
	emu.Step(start * 1e6) // the new configuration triggers one report now
	first := report()
	next := (start/50 + 1) * 50
	for emu.Cells[0].TTI.Load() < next {
		emu.Step(emu.Cells[0].TTI.Load() * 1e6)
	}
	if report() != first {
		t.Error("report changed before the period was over")
	}
	emu.Step(next * 1e6) // a multiple of sf
	if report() == first {
		t.Error("report not refreshed after one period")
	}
}

func TestControlAPIChangesChannel(t *testing.T) {
	emu, ts := setup(t)
	code, raw := get(t, ts, "PATCH", "/emulator/v1/ues/208930000000001/cells/10001/channel", `{"cqi":4,"blocked":false}`, true)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	emu.Step(10e6)
	b := emu.Cells[1].Bearers()[0]
	if b.Channel().Last().CQI != 4 {
		t.Errorf("CQI %d after the change, want 4", b.Channel().Last().CQI)
	}
	_, raw = get(t, ts, "GET", "/emulator/v1/bearers", "", true)
	var states []BearerState
	json.Unmarshal(raw, &states)
	keys := make([]string, 0)
	for k := range states[0].Counters {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(states) != 2 || states[0].Counters["dl_arrived_pkts"] != 100.0 {
		t.Errorf("bearers: %s", raw)
	}
}

// The drop log and counters: labelled radio drops read with a cursor; bad cursors are
// refused with ProblemDetails; no token, no truth.
func TestDropLogAndCounters(t *testing.T) {
	emu, ts := setup(t)
	if code, raw := get(t, ts, "PATCH", "/emulator/v1/ues/ue1/cells/10000/channel", `{"loss":0.999}`, true); code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	for tti := int64(50); tti < 150; tti++ {
		if tti < 60 {
			emu.Inject(packet(1500), tti*1e6)
		}
		emu.Step(tti * 1e6)
	}
	total := emu.Truth.Counts().Total[ran.CauseRadio]
	if total == 0 {
		t.Fatal("no radio drop")
	}
	var page struct {
		Drops []DropEvent
		Next  uint64
		Lost  uint64
	}
	_, raw := get(t, ts, "GET", "/emulator/v1/drops?limit=1", "", true)
	if err := json.Unmarshal(raw, &page); err != nil || len(page.Drops) != 1 || page.Next != 1 ||
		page.Drops[0].Cause != "radio" || page.Drops[0].UE != "ue1" || page.Drops[0].Dst != "10.30.0.1" {
		t.Fatalf("first page: %s", raw)
	}
	_, raw = get(t, ts, "GET", fmt.Sprintf("/emulator/v1/drops?after=%d&limit=10000", page.Next), "", true)
	json.Unmarshal(raw, &page)
	if uint64(len(page.Drops))+1 != total || page.Next != total || page.Lost != 0 {
		t.Errorf("second page: %d drops, next %d, total %d", len(page.Drops), page.Next, total)
	}
	var counters struct {
		Total map[string]uint64
		UEs   map[string]map[string]uint64
		Flows []struct {
			Drops map[string]uint64
		}
	}
	_, raw = get(t, ts, "GET", "/emulator/v1/drops/counters", "", true)
	json.Unmarshal(raw, &counters)
	if counters.Total["radio"] != total || counters.UEs["ue1"]["radio"] != total ||
		len(counters.Flows) != 1 || counters.Flows[0].Drops["radio"] != total {
		t.Errorf("counters: %s", raw)
	}
	for _, bad := range []string{"?after=-1", "?after=x", "?limit=0", "?limit=10001"} {
		if code, raw := get(t, ts, "GET", "/emulator/v1/drops"+bad, "", true); code != 400 || !strings.Contains(string(raw), `"status":400`) {
			t.Errorf("%s: %d %s", bad, code, raw)
		}
	}
	if _, raw := get(t, ts, "GET", "/metrics", "", false); !strings.Contains(string(raw),
		fmt.Sprintf("emulator_drops_total{ue=\"ue1\",cause=\"radio\"} %d\n", total)) {
		t.Errorf("metrics without the drops: %s", raw)
	}
	if code, _ := get(t, ts, "GET", "/emulator/v1/drops/counters", "", false); code != 401 {
		t.Errorf("without a token: %d", code)
	}
}
