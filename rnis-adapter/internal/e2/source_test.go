package e2

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
)

type recorder struct {
	mu      sync.Mutex
	ups     []bool
	detail  string
	skipped map[string]int
	lines   int
}

func (r *recorder) SourceUp(up bool, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ups) == 0 || r.ups[len(r.ups)-1] != up {
		r.ups = append(r.ups, up)
	}
	r.detail = detail
}
func (r *recorder) Polled(time.Duration, int) { r.mu.Lock(); r.lines++; r.mu.Unlock() }
func (r *recorder) PollFailed(string)         {}
func (r *recorder) Skipped(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.skipped == nil {
		r.skipped = map[string]int{}
	}
	r.skipped[reason]++
}

func (r *recorder) state() (ups []bool, detail string, skipped map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	skipped = map[string]int{}
	for k, v := range r.skipped {
		skipped[k] = v
	}
	return append([]bool(nil), r.ups...), r.detail, skipped
}

// fakeStream serves one session per accepted connection: it checks the token, says hello,
// sends lines and closes (the source must come back).
func fakeStream(t *testing.T, lines []string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			first, _ := bufio.NewReader(conn).ReadString('\n')
			if !strings.Contains(first, `"token":"secret"`) {
				fmt.Fprintln(conn, `{"type":"error","detail":"a valid token is required"}`)
				conn.Close()
				continue
			}
			fmt.Fprintln(conn, `{"type":"hello","stream":"mts-e2","v":1,"source":"test","sm":["mac","rlc"],"interval_ms":1}`)
			for _, l := range lines {
				fmt.Fprintln(conn, l)
			}
			time.Sleep(50 * time.Millisecond)
			conn.Close()
		}
	}()
	return ln
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second) // hang guard, not a timing assertion
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSourceReconnectsCountsBadLinesAndShowsHealth(t *testing.T) {
	ln := fakeStream(t, []string{
		`{"type":"rlc",` + node + `,"rbs":[{"rnti":5,"rbid":1,"txbuf_occ_bytes":10}]}`,
		`{"type":"mac",` + node + `,"ues":[{"rnti":5,"wb_cqi":12},{"rnti":6,"wb_cqi":16}]}`,
		`{"type":"mac",` + node,
		`{"type":"kpm",` + node + `}`,
	})
	rec := &recorder{}
	src := New(Config{Addr: ln.Addr().String(), Token: "secret", MaxBackoff: 100 * time.Millisecond}, rec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var snaps []*flexran.Snapshot
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(s *flexran.Snapshot, _ time.Time) { mu.Lock(); snaps = append(snaps, s); mu.Unlock() })
	}()
	waitFor(t, "two sessions", func() bool { mu.Lock(); defer mu.Unlock(); return len(snaps) >= 2 })
	cancel()
	<-done
	ups, _, skipped := rec.state()
	if len(ups) < 3 || !ups[0] || ups[1] {
		t.Fatalf("health went %v, want up, down (lost), up ...", ups)
	}
	if skipped[SkipBadLine] < 2 || skipped[SkipBadUE] < 2 || skipped[SkipUnknownUE] != 0 {
		t.Fatalf("skipped %v: want the cut line and CQI 16 counted in each session", skipped)
	}
	if ue := snaps[0].Stations[0].UEs; len(ue) != 1 || ue[0].RLC[0].TxQueue != flexran.Some(10) {
		t.Fatalf("first snapshot %+v", snaps[0])
	}
}

func TestSourceRefusedIsDownWithTheReason(t *testing.T) {
	ln := fakeStream(t, nil)
	rec := &recorder{}
	src := New(Config{Addr: ln.Addr().String(), Token: "wrong", MaxBackoff: 50 * time.Millisecond}, rec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, func(*flexran.Snapshot, time.Time) { t.Error("no snapshot from a refused stream") })
	}()
	waitFor(t, "the refusal", func() bool { _, d, _ := rec.state(); return strings.Contains(d, "a valid token is required") })
	cancel()
	<-done
	if ups, _, _ := rec.state(); len(ups) != 1 || ups[0] {
		t.Fatalf("health %v, want down only", ups)
	}
}

func TestSourceUnreachableIsRetried(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there
	rec := &recorder{}
	src := New(Config{Addr: addr, MaxBackoff: 20 * time.Millisecond}, rec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	src.Run(ctx, func(*flexran.Snapshot, time.Time) {})
	if ups, d, _ := rec.state(); len(ups) != 1 || ups[0] || !strings.Contains(d, "refused") {
		t.Fatalf("health %v %q", ups, d)
	}
}

func TestSourceSilentStreamIsLost(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = bufio.NewReader(conn).ReadString('\n')
			fmt.Fprintln(conn, `{"type":"hello","stream":"mts-e2","v":1,"source":"test","sm":["mac"],"interval_ms":1}`)
			defer conn.Close() // then silence: a RIC that went away under a live xApp
		}
	}()
	rec := &recorder{}
	src := New(Config{Addr: ln.Addr().String(), IdleTimeout: 100 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}, rec, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); src.Run(ctx, func(*flexran.Snapshot, time.Time) {}) }()
	waitFor(t, "the silence in health", func() bool { _, d, _ := rec.state(); return strings.Contains(d, "no indication for 100ms") })
	cancel()
	<-done
}
