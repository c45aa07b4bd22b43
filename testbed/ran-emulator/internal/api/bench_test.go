package api

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// BenchmarkStatsJSON64UEs is the cost of one /stats document for 64 UEs after a new
// report (what a 1 kHz poller with sf = 1 ms pays per poll; cached polls cost nothing).
func BenchmarkStatsJSON64UEs(b *testing.B) {
	var ues []string
	for i := 1; i <= 64; i++ {
		ues = append(ues, fmt.Sprintf(`{"name":"ue%d","imsi":"2089300000000%02d","bearers":[{"bs_id":10000,"rnti":%d,"ip":"10.30.0.%d","tun":{"name":"rf0"},"channel":{"cqi":%d}}]}`,
			i, i, 17920+i, i, 1+i%15))
	}
	c, err := ran.ParseConfig([]byte(`{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000,"prb":100}],"ues":[` + strings.Join(ues, ",") + `]}`))
	if err != nil {
		b.Fatal(err)
	}
	emu, _ := ran.New(c, slog.New(slog.DiscardHandler))
	f, _ := newFlexranJSON(emu, "x")
	b.ReportAllocs()
	size := 0
	for i := 0; i < b.N; i++ {
		emu.Step(int64(i) * 1e6) // a new report every TTI: the cache is always cold
		size = len(f.stats("all", nil, nil))
	}
	b.ReportMetric(float64(size), "bytes/doc")
}

// BenchmarkStep64UEs is one TTI of a cell with 64 idle UEs, with a report every TTI
// (the part of BenchmarkStatsJSON64UEs that is not JSON).
func BenchmarkStep64UEs(b *testing.B) {
	var ues []string
	for i := 1; i <= 64; i++ {
		ues = append(ues, fmt.Sprintf(`{"name":"ue%d","imsi":"%d","bearers":[{"bs_id":10000,"rnti":%d,"ip":"10.30.0.%d","tun":{"name":"rf0"}}]}`,
			i, i, 17920+i, i))
	}
	c, _ := ran.ParseConfig([]byte(`{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000,"prb":100}],"ues":[` + strings.Join(ues, ",") + `]}`))
	emu, _ := ran.New(c, slog.New(slog.DiscardHandler))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		emu.Step(int64(i) * 1e6)
	}
}
