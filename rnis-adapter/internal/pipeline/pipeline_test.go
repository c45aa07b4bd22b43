package pipeline

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/feed"
	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
)

type nopPub struct{ n int }

func (p *nopPub) Publish(b []feed.Message) error { p.n += len(b); return nil }

// keepPub keeps copies of what was published.
type keepPub struct{ msgs []feed.Message }

func (p *keepPub) Publish(b []feed.Message) error {
	for _, m := range b {
		m.Body = append([]byte(nil), m.Body...)
		p.msgs = append(p.msgs, m)
	}
	return nil
}

// Each publication mode sends what it promises: per UE, per cell (one message per cell with
// all its UEs), or both; an unchanged second poll sends no measurement.
func TestPublishModes(t *testing.T) {
	doc, err := os.ReadFile("../../testdata/flexran/v2/two-bs-x2-2ue.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"", PublishUE, PublishCell, PublishBoth} {
		pub := &keepPub{}
		p := &Pipeline{Tracker: uestate.New(time.Second), Pub: pub, Publish: mode}
		var parser flexran.Parser
		for range 2 {
			snaps, err := parser.Parse(doc)
			if err != nil {
				t.Fatal(err)
			}
			p.Handle(&snaps[0], time.Now())
		}
		kinds := map[string]int{}
		ues := map[string]int{} // cell key → UEs in cell messages
		for _, m := range pub.msgs {
			kinds[m.Kind]++
			if m.Kind != feed.KindCell {
				continue
			}
			var body struct {
				Cell string           `json:"cell"`
				UEs  []map[string]any `json:"ues"`
			}
			if err := json.Unmarshal(m.Body, &body); err != nil || m.Key != "rnis.v1.cell."+body.Cell {
				t.Fatalf("%s %s: %v", m.Key, m.Body, err)
			}
			ues[body.Cell] += len(body.UEs)
		}
		wantMeas, wantCells := 2, 0
		switch mode {
		case PublishCell:
			wantMeas, wantCells = 0, 2
		case PublishBoth:
			wantCells = 2
		}
		if kinds[feed.KindMeas] != wantMeas || kinds[feed.KindCell] != wantCells || kinds[feed.KindEvent] != 2 {
			t.Errorf("mode %q: %v", mode, kinds)
		}
		if wantCells > 0 && len(ues) != 2 {
			t.Errorf("mode %q: UEs per cell %v, want one in each of 2 cells", mode, ues)
		}
	}
}

// sourceDoc fetches a 64-UE mac_stats document from the synthetic source.
func sourceDoc(b *testing.B) []byte {
	bin := filepath.Join(b.TempDir(), "src")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/flexran-source").CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	cmd := exec.Command(bin, "--ues=64", "--listen=127.0.0.1:0")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line := make([]byte, 64)
	n, _ := stdout.Read(line)
	url := string(line[len("listening on ") : n-1])
	resp, err := http.Get(url + "/stats/mac_stats") // what a poll reads in split mode
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	doc, _ := io.ReadAll(resp.Body)
	return doc
}

// BenchmarkPoll is the CPU of one 64-UE poll after the HTTP response: parse, normalize,
// track, encode 64 messages (ue) or one (cell).
func BenchmarkPoll(b *testing.B) {
	doc := sourceDoc(b)
	b.Logf("document: %d bytes", len(doc))
	for _, mode := range []string{PublishUE, PublishCell} {
		b.Run(mode, func(b *testing.B) { benchPoll(b, doc, mode) })
	}
}

func benchPoll(b *testing.B, doc []byte, mode string) {
	pub := &nopPub{}
	p := &Pipeline{Tracker: uestate.New(time.Second), Pub: pub, Publish: mode}
	var parser flexran.Parser
	b.ReportAllocs()
	b.ResetTimer()
	defer reportCPU(b)()
	for i := range b.N {
		snaps, err := parser.Parse(doc)
		if err != nil {
			b.Fatal(err)
		}
		snaps[0].Stations[0].UEs[0].SFNSF.V = int64(i) // a new frame each time: nothing is skipped
		p.Handle(&snaps[0], time.Now())
	}
}

// reportCPU adds the process CPU time per operation: on a shared machine, wall time per
// operation mostly measures the other programs.
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op") }
}

// BenchmarkHTTPGet is the client side of one poll of a 64-UE document over loopback.
func BenchmarkHTTPGet(b *testing.B) {
	doc := sourceDoc(b)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(doc) }))
	defer srv.Close()
	client := &http.Client{}
	b.ReportAllocs()
	defer reportCPU(b)()
	for range b.N {
		resp, err := client.Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
