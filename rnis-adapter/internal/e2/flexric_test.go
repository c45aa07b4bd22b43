package e2

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// rawUE is a MAC UE entry read without the package's types: the test's own reading of what
// an entry the adapter can use is.
type rawUE struct {
	RNTI   float64 `json:"rnti"`
	WBCQI  float64 `json:"wb_cqi"`
	DLMCS1 float64 `json:"dl_mcs1"`
	Frame  float64 `json:"frame"`
}

func (u rawUE) usable() bool {
	return u.RNTI <= 65535 && u.WBCQI <= 15 && u.DLMCS1 <= 31 && u.Frame <= 1023
}

// TestFlexRICRecordings reads what our xApp forwarded from FlexRIC v2.0.0's nearRT-RIC and
// emu_agent_gnb (testdata/e2/flexric-*, recorded by testbed/e2-xapp/live-check.sh): the
// hello and every line decode; the agent fills the MAC SM with random values (CQI and MCS
// up to 255), so its UE entries are skipped as bad_ue, as many as the test counts itself,
// and RLC bearers of RNTIs the MAC report does not list as unknown_ue.
func TestFlexRICRecordings(t *testing.T) {
	forEachRecording(t, "flexric-*", func(t *testing.T, sc *bufio.Scanner) {
		var asm Assembler
		got, want := map[string]int{}, map[string]int{}
		macs, ues := 0, 0
		var pending map[float64]bool // RNTIs of the RLC line waiting for the next MAC line
		for sc.Scan() {
			ind, err := Decode(sc.Bytes())
			if err != nil {
				t.Fatalf("%v: %.200s", err, sc.Bytes())
			}
			if k := ind.Node.Key(); k != "gNB/505-01/1" {
				t.Fatalf("node %s: emu_agent_gnb is gNB 1 of PLMN 505-01", k)
			}
			var raw struct {
				UEs []rawUE `json:"ues"`
				RBs []struct {
					RNTI float64 `json:"rnti"`
				} `json:"rbs"`
			}
			_ = json.Unmarshal(sc.Bytes(), &raw)
			snap, dropped := asm.Add(&ind, time.Now())
			for _, d := range dropped {
				got[d.Reason]++
			}
			if ind.Type == KindRLC {
				pending = map[float64]bool{}
				for _, rb := range raw.RBs {
					pending[rb.RNTI] = true
				}
				continue
			}
			macs++
			listed := map[float64]bool{}
			usable := 0
			for _, u := range raw.UEs {
				if !u.usable() || listed[u.RNTI] {
					want[SkipBadUE]++
				} else {
					usable++
				}
				if u.usable() {
					listed[u.RNTI] = true
				}
			}
			for rnti := range pending {
				if !listed[rnti] {
					want[SkipUnknownUE]++
				}
			}
			pending = nil
			ues += len(raw.UEs)
			if n := len(snap.Stations[0].UEs); n != usable {
				t.Fatalf("MAC line %d: %d UEs in the snapshot, %d usable", macs, n, usable)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if got[SkipBadUE] != want[SkipBadUE] || got[SkipUnknownUE] != want[SkipUnknownUE] {
			t.Fatalf("skipped %v, counted %v", got, want)
		}
		if macs < 100 || ues < 50 {
			t.Fatalf("%d MAC lines with %d UE entries: too short a recording", macs, ues)
		}
		t.Logf("%d MAC lines, %d UE entries, skipped %v", macs, ues, got)
	})
}

// forEachRecording runs check on every recording testdata/e2/<dirs>/*.jsonl of our xApp's
// stream, the scanner past the hello line (checked).
func forEachRecording(t *testing.T, dirs string, check func(t *testing.T, sc *bufio.Scanner)) {
	files, _ := filepath.Glob("../../testdata/e2/" + dirs + "/*.jsonl")
	if len(files) == 0 {
		t.Fatal("no recordings in testdata/e2/" + dirs)
	}
	for _, name := range files {
		t.Run(filepath.Base(filepath.Dir(name))+"/"+filepath.Base(name), func(t *testing.T) {
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, MaxLine)
			if !sc.Scan() {
				t.Fatal("empty")
			}
			var hello Hello
			if err := json.Unmarshal(sc.Bytes(), &hello); err != nil || hello.Type != "hello" || hello.V != Version || hello.Source != "mts-e2-xapp" {
				t.Fatalf("hello %s", sc.Bytes())
			}
			check(t, sc)
		})
	}
}
