package poller

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
)

type nopObs struct{}

func (nopObs) SourceUp(bool, string)     {}
func (nopObs) Polled(time.Duration, int) {}
func (nopObs) PollFailed(string)         {}
func (nopObs) Skipped(string)            {}
func quiet() *slog.Logger                { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func ue(rnti string) string              { return `{"rnti":` + rnti + `,"mac_stats":{"phr":1}}` }
func mac(ues ...string) string {
	return `{"mac_stats":[{"bs_id":1,"ue_mac_stats":[` + strings.Join(ues, ",") + `]}]}`
}
func config(rntis ...string) string {
	var confs []string
	for _, r := range rntis {
		confs = append(confs, `{"rnti":`+r+`,"imsi":"4200`+r+`"}`)
	}
	return `{"eNB_config":[{"bs_id":1,"eNB":{"cellConfig":[{"phyCellId":0,"dlBandwidth":25}]},"UE":{"ueConfig":[` +
		strings.Join(confs, ",") + `]}}]}`
}

// A fake controller: mac_stats and enb_config documents that the test changes, and what it was asked.
type fake struct {
	mu            sync.Mutex
	macDoc, cfg   string
	configFetches int
	posted        []string
	auth          []string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	switch {
	case r.Method == http.MethodPost:
		body, _ := io.ReadAll(r.Body)
		f.posted = append(f.posted, r.URL.Path+" "+string(body))
	case r.URL.Path == "/stats/mac_stats":
		_, _ = io.WriteString(w, f.macDoc)
	case r.URL.Path == "/stats/enb_config":
		f.configFetches++
		_, _ = io.WriteString(w, f.cfg)
	default:
		http.NotFound(w, r)
	}
}

func (f *fake) set(macDoc, cfg string) {
	f.mu.Lock()
	f.macDoc, f.cfg = macDoc, cfg
	f.mu.Unlock()
}

func TestSplitModeJoinsConfigAndHoldsUnknownUEs(t *testing.T) {
	f := &fake{}
	f.set(mac(ue("7")), config("7"))
	srv := httptest.NewServer(f)
	defer srv.Close()
	p := New(Config{BaseURL: srv.URL, Path: "/stats", Split: true, Period: time.Millisecond, Timeout: time.Second,
		ConfigPeriod: time.Hour, ReportSF: 5, Token: "secret"}, nopObs{}, quiet())
	var got [][]flexran.UEConfig
	var ues []int
	handle := func(s *flexran.Snapshot, _ time.Time) {
		got = append(got, s.Stations[0].UEConfig)
		ues = append(ues, len(s.Stations[0].UEs))
	}
	ctx := context.Background()
	if err := p.pollOnce(ctx, handle); err != nil {
		t.Fatal(err)
	}
	if got[0][0].IMSI != "42007" || ues[0] != 1 {
		t.Fatalf("config not joined: %+v", got)
	}
	// A new RNTI: the configuration is fetched again at once (it lists the UE now).
	f.set(mac(ue("7"), ue("8")), config("7", "8"))
	time.Sleep(15 * time.Millisecond)
	if err := p.pollOnce(ctx, handle); err != nil {
		t.Fatal(err)
	}
	if ues[1] != 2 || f.configFetches != 2 {
		t.Fatalf("ues %v, config fetches %d", ues, f.configFetches)
	}
	// An RNTI the controller does not configure (yet) is held back, not reported without IMSI.
	f.set(mac(ue("7"), ue("9")), config("7"))
	time.Sleep(15 * time.Millisecond)
	if err := p.pollOnce(ctx, handle); err != nil {
		t.Fatal(err)
	}
	if ues[2] != 1 {
		t.Fatalf("unconfigured UE reported: %v", ues)
	}
	if len(f.posted) != 1 || !strings.HasPrefix(f.posted[0], "/stats/conf/enb/1 ") || !strings.Contains(f.posted[0], `"sf":5`) {
		t.Fatalf("reporting period: %q", f.posted)
	}
	for _, a := range f.auth {
		if a != "Bearer secret" {
			t.Fatalf("request without the source token: %q", a)
		}
	}
}

func TestFailuresAreErrors(t *testing.T) {
	f := &fake{}
	f.set(`not json`, config())
	srv := httptest.NewServer(f)
	defer srv.Close()
	p := New(Config{BaseURL: srv.URL, Path: "/stats", Split: true, Period: time.Millisecond, Timeout: time.Second,
		ConfigPeriod: time.Hour}, nopObs{}, quiet())
	if err := p.pollOnce(context.Background(), func(*flexran.Snapshot, time.Time) {}); err == nil {
		t.Fatal("bad JSON accepted")
	}
	srv.Close()
	if err := p.pollOnce(context.Background(), func(*flexran.Snapshot, time.Time) {}); err == nil {
		t.Fatal("a closed source is not an error")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{
		{BaseURL: "http://x", Path: "/stats", Period: 0, Timeout: time.Second},
		{BaseURL: "http://x", Path: "/stats", Period: 11 * time.Second, Timeout: time.Second},
		{BaseURL: "ftp://x", Path: "/stats", Period: time.Second, Timeout: time.Second},
		{BaseURL: "http://x", Path: "stats", Period: time.Second, Timeout: time.Second},
	} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
