package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/feed"
	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/state"
)

type nopPub struct{ n int }

func (p *nopPub) Publish(b []feed.Message) error { p.n += len(b); return nil }

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
// track, encode 64 messages.
func BenchmarkPoll(b *testing.B) {
	doc := sourceDoc(b)
	b.Logf("document: %d bytes", len(doc))
	pub := &nopPub{}
	p := &Pipeline{Tracker: state.New(time.Second), Pub: pub}
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
