package feed

import (
	"context"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"
)

type nopObs struct{ up chan bool }

func (o nopObs) BrokerUp(up bool, _ string) {
	select {
	case o.up <- up:
	default:
	}
}
func (nopObs) Confirmed(time.Duration, bool) {}
func (nopObs) Dropped(string, int)           {}
func (nopObs) Published(int)                 {}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPublish64 is the client CPU of publishing one poll's 64 messages (900 bytes each)
// with confirms, on the broker at RNIS_TEST_AMQP_URL (default: the local one); the exchange
// has no queue, so the broker only routes and confirms. Before the wire.go publisher,
// amqp091-go took ~600 µs and ~3000 allocations per batch on the same machine.
func BenchmarkPublish64(b *testing.B) {
	url := os.Getenv("RNIS_TEST_AMQP_URL")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/%2F"
	}
	obs := nopObs{up: make(chan bool, 1)}
	p := New(Config{URL: url, Exchange: "rnis-bench-publish", MaxLag: time.Hour, MaxInFlight: 1 << 20}, obs,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	select {
	case up := <-obs.up:
		if !up {
			b.Fatal("broker unreachable")
		}
	case <-time.After(10 * time.Second):
		b.Fatal("broker unreachable")
	}
	body := make([]byte, 900)
	batch := make([]Message, 64)
	for i := range batch {
		batch[i] = Message{Key: "rnis.v1.meas.10000-0.208930000000001.10_30_1_1", Body: body, Kind: "meas"}
	}
	b.ReportAllocs()
	start := cpu()
	b.ResetTimer()
	for range b.N {
		_ = p.Publish(batch) // a slow broker makes batches drop (back-pressure), not fail
	}
	b.StopTimer()
	b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}
