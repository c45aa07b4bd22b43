package api

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// CaptureDirEnv names the directory TestWriteOAILikeCaptures writes emulator timelines to
// (make emulator-captures: rnis-adapter/testdata/flexran/emulator-oai-like/). They have the
// live timelines' format ({"t": s, "doc": GET /stats}) plus the emulator's truth since the
// previous line: "radio_losses" (packets lost on the radio: HARQ residual + channel loss)
// and "congestion_losses" (RLC buffer or AQM drops). The RNIS adapter replays them through
// MELD's decision (rnis-adapter/internal/meas, TestMELDReplay).
const CaptureDirEnv = "EMU_WRITE_CAPTURES"

func TestWriteOAILikeCaptures(t *testing.T) {
	dir := os.Getenv(CaptureDirEnv)
	if dir == "" {
		t.Skip(CaptureDirEnv + " not set: the captures in rnis-adapter/testdata are kept (make emulator-captures rewrites them)")
	}
	arrivals := rand.New(rand.NewPCG(22, 2))
	// 3 Mbit/s at random (a 1500 B packet in 1 of 4 TTIs), 2 % radio loss: the light load
	// of the live run behind issue 22 (0.5-1 % there; 2 % for more loss events per second)
	writeCapture(t, filepath.Join(dir, "light-3mbps-loss2-poll-10ms.jsonl"), `"loss":0.02`, 0,
		func(e *ran.Emulator, tti int64) {
			if arrivals.IntN(4) == 0 {
				e.Inject(packet(1500), tti*1e6)
			}
		})
	// saturating load into a 60 kB RLC buffer (congestion drops) and 1 % radio loss
	writeCapture(t, filepath.Join(dir, "saturated-loss1-poll-10ms.jsonl"), `"loss":0.01`, 60_000,
		func(e *ran.Emulator, tti int64) {
			for i := 0; i < 3; i++ { // 36 Mbit/s offered to an 18 Mbit/s cell
				e.Inject(packet(1500), tti*1e6)
			}
		})
}

// writeCapture runs one OAI-like cell (25 PRB, CQI 15, reports every 10 ms as RNIS_REPORT_SF=10
// sets them) for 1 s, then writes GET /stats every 10 TTIs for 3 s.
func writeCapture(t *testing.T, path, channel string, limit int, load func(*ran.Emulator, int64)) {
	t.Helper()
	queue := ""
	if limit > 0 {
		queue = fmt.Sprintf(`,"queue":{"limit_bytes":%d}`, limit)
	}
	emu, ts := oaiLikeCell(t, `"stats_period_ms":10,`, queue, channel)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	b := emu.UEs[0].Bearers[0]
	radio := b.C.DLChannelLossPkts.Load() + b.C.DLResidualLostPkts.Load()
	congestion := b.C.DLQueueDropPkts.Load() + b.C.DLAQMDropPkts.Load()
	for tti := int64(0); tti < 4000; tti++ {
		load(emu, tti)
		emu.Step(tti * 1e6)
		for range b.Delivered(tti * 1e6) {
		}
		if tti%10 != 9 || tti < 1000 { // past the bearer's set-up
			continue
		}
		path := "/stats/mac_stats"
		if tti == 1009 {
			path = "/stats" // the first line carries the configuration (cell PRBs)
		}
		_, doc := get(t, ts, "GET", path, "", true)
		r := b.C.DLChannelLossPkts.Load() + b.C.DLResidualLostPkts.Load()
		c := b.C.DLQueueDropPkts.Load() + b.C.DLAQMDropPkts.Load()
		fmt.Fprintf(w, "{\"t\": %.3f, \"radio_losses\": %d, \"congestion_losses\": %d, \"doc\": %s}\n",
			float64(tti)/1000, r-radio, c-congestion, doc)
		radio, congestion = r, c
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
