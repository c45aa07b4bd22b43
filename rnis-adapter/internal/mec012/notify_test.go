package mec012

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/services/common/go/svc"
)

// TestStalledReceiversDelayOnlyThemselves: receivers that accept connections and never
// answer (tarpits) must not delay a healthy one (issue 20: 40 tarpits delayed a healthy
// subscriber by 79 s when one goroutine posted every notification). Each stalled POST
// holds for a minute, so a healthy receiver waiting behind even one would miss the guard.
// MTS_STALLED_RECEIVERS (default 300) and MTS_NOTIFY_ROUNDS (3) size it; make
// bench-rnis-notify runs it with 1,000 and writes the figures (MTS_NOTIFY_OUT).
func TestStalledReceiversDelayOnlyThemselves(t *testing.T) {
	stalled, rounds := envInt("MTS_STALLED_RECEIVERS", 300), envInt("MTS_NOTIFY_ROUNDS", 3)
	arrived := make(chan time.Time, rounds)
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- time.Now()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer healthy.Close()
	var subs []*subscription
	for i := range stalled {
		tarpit, err := net.Listen("tcp", "127.0.0.1:0") // never accepted: the kernel's backlog holds the requests
		if err != nil {
			t.Fatal(err)
		}
		defer tarpit.Close()
		subs = append(subs, &subscription{ID: strconv.Itoa(i), Callback: "http://" + tarpit.Addr().String() + "/notify"})
	}
	subs = append(subs, &subscription{ID: "healthy", Callback: healthy.URL + "/notify"}) // last: behind every stalled one

	n := newNotifier(newStore("http://rnis", ""), newSockets(), time.Minute, obs.NewMetrics(svc.NewHealth()),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []float64
	for range rounds {
		start := time.Now()
		for _, sub := range subs {
			n.send(ctx, sub, map[string]any{"notificationType": "CellChangeNotification"})
		}
		select {
		case at := <-arrived:
			ms = append(ms, float64(at.Sub(start).Microseconds())/1e3)
		case <-time.After(30 * time.Second):
			t.Fatalf("the healthy receiver got nothing in 30 s beside %d stalled ones", stalled)
		}
		time.Sleep(200 * time.Millisecond)
	}
	slices.Sort(ms)
	t.Logf("healthy receiver beside %d stalled ones: median %.1f ms, max %.1f ms (%d rounds: %v)", stalled, ms[len(ms)/2], ms[len(ms)-1], rounds, ms)
	if out := os.Getenv("MTS_NOTIFY_OUT"); out != "" {
		load, _ := os.ReadFile("/proc/loadavg")
		raw, _ := json.MarshalIndent(map[string]any{"command": "make bench-rnis-notify", "stalled": stalled,
			"rounds": rounds, "ms_sorted": ms, "median_ms": ms[len(ms)/2], "max_ms": ms[len(ms)-1],
			"loadavg": string(load)}, "", " ")
		if err := os.WriteFile(out, append(raw, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func envInt(name string, fallback int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return fallback
}
