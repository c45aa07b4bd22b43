package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// e2Client connects to the stream, sends the client line and returns the reader.
func e2Client(t *testing.T, addr, tok string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // hang guard
	fmt.Fprintf(conn, `{"stream":"mts-e2","v":1,"token":%q}`+"\n", tok)
	return conn, bufio.NewReader(conn)
}

func readJSON(t *testing.T, r *bufio.Reader) map[string]any {
	t.Helper()
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(line, &v); err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	return v
}

func TestE2StreamRefusesAWrongTokenAndStreamsEachNewReport(t *testing.T) {
	emu, _ := oaiLikeCell(t, `"stats_period_ms":10,`, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go NewE2Stream(emu, []string{token}, slog.New(slog.DiscardHandler)).Serve(ctx, ln)

	_, r := e2Client(t, ln.Addr().String(), "wrong")
	if v := readJSON(t, r); v["type"] != "error" {
		t.Fatalf("wrong token: got %v", v)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("the stream stayed open after a refusal")
	}

	_, r = e2Client(t, ln.Addr().String(), token)
	if v := readJSON(t, r); v["type"] != "hello" || v["v"] != 1.0 || v["source"] != "ran-emulator" {
		t.Fatalf("hello: %v", v)
	}
	for tti := int64(0); tti < 30; tti++ { // three reports (every 10 ms)
		for i := 0; i < 3; i++ {
			emu.Inject(packet(1500), tti*1e6)
		}
		emu.Step(tti * 1e6)
		time.Sleep(2 * time.Millisecond) // let the stream's 1 ms tick see each report
	}
	snap := emu.Cells[0].Snapshot()
	frame, slot := snap.FrameSlot()
	var mac, rlc map[string]any
	for mac == nil || rlc == nil || !sameReport(mac, rlc, frame, slot) {
		v := readJSON(t, r)
		switch v["type"] {
		case "mac":
			mac = v
		case "rlc":
			rlc = v
		}
	}
	node := mac["node"].(map[string]any)
	cell := mac["cell"].(map[string]any)
	ue := mac["ues"].([]any)[0].(map[string]any)
	rb := rlc["rbs"].([]any)[0].(map[string]any)
	b := &snap.Bearers[0]
	want := map[string]any{"nb_id": 10000.0, "pci": 0.0, "dl_prbs": 25.0, "rnti": 46929.0, "frame": float64(frame),
		"wb_cqi": 15.0, "dl_mcs1": float64(b.MCS), "dl_curr_tbs": float64(b.TBS), "ue_ipv4": "10.30.0.1",
		"txbuf_occ_bytes": float64(b.QueueBytes), "rbid": 1.0}
	got := map[string]any{"nb_id": node["nb_id"], "pci": cell["pci"], "dl_prbs": cell["dl_prbs"], "rnti": ue["rnti"],
		"frame": ue["frame"], "wb_cqi": ue["wb_cqi"], "dl_mcs1": ue["dl_mcs1"], "dl_curr_tbs": ue["dl_curr_tbs"],
		"ue_ipv4": ue["ue_ipv4"], "txbuf_occ_bytes": rb["txbuf_occ_bytes"], "rbid": rb["rbid"]}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if b.QueueBytes == 0 || b.TBS == 0 {
		t.Fatalf("the loaded cell reports no queue (%d B) or TBS (%d B)", b.QueueBytes, b.TBS)
	}
}

// E2PairsEnv names the file TestWriteE2Pairs writes (make emulator-captures:
// rnis-adapter/testdata/e2/emulator/pairs.jsonl): per report of one emulated cell, the
// FlexRAN document (GET /stats) and the mts-e2 lines of the same report. The RNIS adapter
// checks that both give the same measurements (rnis-adapter/internal/e2, TestSameTruth).
const E2PairsEnv = "EMU_WRITE_E2_PAIRS"

func TestWriteE2Pairs(t *testing.T) {
	path := os.Getenv(E2PairsEnv)
	if path == "" {
		t.Skip(E2PairsEnv + " not set: the pairs in rnis-adapter/testdata/e2 are kept (make emulator-captures rewrites them)")
	}
	// one OAI-like cell (25 PRB, CQI 15, a report every 10 ms), 2 % radio loss, loaded with
	// 12 then 36 Mbit/s (half, then twice the cell) into a 60 kB RLC buffer
	emu, ts := oaiLikeCell(t, `"stats_period_ms":10,`, `,"queue":{"limit_bytes":60000}`, `"loss":0.02`)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	b := emu.UEs[0].Bearers[0]
	for tti := int64(0); tti < 1600; tti++ {
		n := 1
		if tti >= 1300 {
			n = 3
		}
		for i := 0; i < n; i++ {
			emu.Inject(packet(1500), tti*1e6)
		}
		emu.Step(tti * 1e6)
		for range b.Delivered(tti * 1e6) {
		}
		if tti%10 != 9 || tti < 1000 { // past the bearer's set-up
			continue
		}
		_, doc := get(t, ts, "GET", "/stats", "", true)
		snap := emu.Cells[0].Snapshot()
		e2 := appendE2MAC(appendE2RLC(nil, snap), snap)
		fmt.Fprintf(w, "{\"t\": %.3f, \"flexran\": %s, \"e2\": %q}\n", float64(tti)/1000, doc, e2)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sameReport tells whether the MAC and RLC lines are both of the report at frame/slot.
func sameReport(mac, rlc map[string]any, frame, slot int64) bool {
	ue := mac["ues"].([]any)[0].(map[string]any)
	return ue["frame"] == float64(frame) && ue["slot"] == float64(slot) && rlc["tstamp_us"] == mac["tstamp_us"]
}
