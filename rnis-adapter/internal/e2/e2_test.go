package e2

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/meas"
)

// decodeAll feeds the lines to an assembler and returns the last snapshot and every drop.
func decodeAll(t *testing.T, asm *Assembler, lines string, now time.Time) (*flexran.Snapshot, []Dropped) {
	t.Helper()
	var last *flexran.Snapshot
	var dropped []Dropped
	for _, line := range strings.Split(strings.TrimSpace(lines), "\n") {
		ind, err := Decode([]byte(line))
		if err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		snap, d := asm.Add(&ind, now)
		dropped = append(dropped, d...)
		if snap != nil {
			last = snap
		}
	}
	return last, dropped
}

// comparable clears what differs between the sources by design: of the RLC list the
// signalling bearers (OAI's RLC SM reports DRBs only), the E-RAB ids (FlexRAN's GTP E-RAB
// id; the E2 SMs have DRB ids) and the RRC measurement (E2SM-RC, not read yet).
func comparable(ms []meas.Measurement) []meas.Measurement {
	out := append([]meas.Measurement(nil), ms...)
	for i := range out {
		var drbs []flexran.RLCReport
		for _, r := range out[i].RLC {
			if r.LCID.V >= FirstDRBLCID {
				drbs = append(drbs, r)
			}
		}
		out[i].RLC, out[i].ERABs, out[i].RRC = drbs, nil, flexran.RRCMeas{}
		// MEC 012's uplink fields: the mts-e2 stream carries no uplink (served as absent)
		out[i].ULTBS, out[i].ULPRBs, out[i].CellULPRBs = meas.Int{}, meas.Int{}, meas.Int{}
	}
	return out
}

// TestSameTruth: per report of an emulated cell under load, the FlexRAN document and the
// mts-e2 lines of the same report give the same measurements (testdata/e2/emulator, written
// by the emulator: make emulator-captures).
func TestSameTruth(t *testing.T) {
	f, err := os.Open("../../testdata/e2/emulator/pairs.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var asm Assembler
	var parser flexran.Parser
	now := time.Unix(1_800_000_000, 0)
	loaded, n := 0, 0
	for sc.Scan() {
		var pair struct {
			FlexRAN json.RawMessage `json:"flexran"`
			E2      string          `json:"e2"`
		}
		if err := json.Unmarshal(sc.Bytes(), &pair); err != nil {
			t.Fatal(err)
		}
		snaps, err := parser.Parse(pair.FlexRAN)
		if err != nil {
			t.Fatal(err)
		}
		want := meas.Normalize(&snaps[0], now, nil, nil)
		snap, dropped := decodeAll(t, &asm, pair.E2, now)
		if len(dropped) > 0 {
			t.Fatalf("report %d: dropped %v", n, dropped)
		}
		got := meas.Normalize(snap, now, nil, nil)
		if !reflect.DeepEqual(comparable(got), comparable(want)) {
			t.Fatalf("report %d:\n e2      %+v\n flexran %+v", n, got, want)
		}
		if q := got[0].RLCQueue; q.Set && q.V > 0 && got[0].DLTBS.V > 0 {
			loaded++
		}
		n++
	}
	if n < 50 || loaded < n/2 {
		t.Fatalf("%d reports, %d with a queue and a transport block: the pairs do not load the cell", n, loaded)
	}
}

const node = `"node":{"ran":"gNB","mcc":208,"mnc":95,"mnc_digits":2,"nb_id":3584}`

func TestBadInputIsCountedAndSkipped(t *testing.T) {
	for _, line := range []string{`not json`, `{"type":"mac"}`, `{}`, `[1]`, `{"type":"mac",` + node + `,"ues":[}`,
		`{"type":7,` + node + `}`, `{"type":"rlc","node":{"nb_id":-1}}`, `{"type":"mac",` + node + `,"cell":{"pci":"x"}}`,
		`{"type":"mac",` + node + `} trailing`} {
		if _, err := Decode([]byte(line)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", line, err)
		}
	}
	var asm Assembler
	now := time.Now()
	snap, dropped := decodeAll(t, &asm, `{"type":"rlc",`+node+`,"rbs":[{"rnti":7,"rbid":1,"txbuf_occ_bytes":100}]}
{"type":"mac",`+node+`,"ues":[{"rnti":5,"wb_cqi":12},{"rnti":6,"wb_cqi":99},{"wb_cqi":3},{"rnti":5},{"rnti":8,"ue_ipv4":"::1"},{"rnti":"x"},7]}
{"type":"rlc",`+node+`,"rbs":[{"rnti":5,"rbid":1,"txbuf_occ_bytes":100},{"rnti":9,"rbid":1},{"rnti":5,"txbuf_occ_bytes":-1}]}
{"type":"mac",`+node+`,"ues":[{"rnti":5,"wb_cqi":12}]}`, now)
	reasons := map[string]int{}
	for _, d := range dropped {
		reasons[d.Reason]++
	}
	// rnti 7 and 9 unknown; cqi 99, no rnti, rnti 5 twice, a bad address, rnti "x", not an
	// object, no rbid: bad
	if want := map[string]int{SkipUnknownUE: 2, SkipBadUE: 7}; !reflect.DeepEqual(reasons, want) {
		t.Fatalf("dropped %v, want %v", dropped, want)
	}
	ues := snap.Stations[0].UEs
	if len(snap.Stations) != 1 || len(ues) != 1 || ues[0].RNTI != 5 || ues[0].RLC[0].TxQueue != flexran.Some(100) {
		t.Fatalf("snapshot %+v", snap)
	}
}

func TestNodesStayUntilTheyFallSilent(t *testing.T) {
	var asm Assembler
	t0 := time.Now()
	other := strings.Replace(node, "3584", "3585", 1)
	decodeAll(t, &asm, `{"type":"mac",`+node+`,"ues":[{"rnti":1}]}`, t0)
	snap, _ := decodeAll(t, &asm, `{"type":"mac",`+other+`,"ues":[{"rnti":2}]}`, t0.Add(time.Millisecond))
	if len(snap.Stations) != 2 || snap.Stations[0].BSID != 3585 || snap.Stations[1].BSID != 3584 {
		t.Fatalf("both nodes' UEs belong in the snapshot: %+v", snap.Stations)
	}
	snap, _ = decodeAll(t, &asm, `{"type":"mac",`+other+`,"ues":[{"rnti":2}]}`, t0.Add(NodeGone+time.Millisecond))
	if len(snap.Stations) != 1 {
		t.Fatalf("a node silent for %v is gone: %+v", NodeGone, snap.Stations)
	}
}

func TestSlotsBecomeSubframes(t *testing.T) {
	var asm Assembler
	snap, _ := decodeAll(t, &asm, `{"type":"mac",`+node+`,"cell":{"pci":1,"dl_prbs":106,"slots_per_frame":20},"ues":[{"rnti":1,"frame":512,"slot":19}]}`, time.Now())
	if got := snap.Stations[0].UEs[0].SFNSF; got != flexran.Some(5129) {
		t.Fatalf("frame 512 slot 19 of 20 = subframe 9: sfn_sf %+v", got)
	}
	if c := snap.Stations[0].Cells[0]; c.DLBandwidth != flexran.Some(106) || c.PhyCellID != flexran.Some(1) || c.PLMNs[0].MCC != 208 {
		t.Fatalf("cell %+v", c)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"mac",` + node + `,"ues":[{"rnti":5,"wb_cqi":12,"frame":3,"slot":1}]}`))
	f.Add([]byte(`{"type":"rlc",` + node + `,"rbs":[{"rnti":5,"rbid":1,"txbuf_occ_bytes":100,"txsdu_wt_us":3000}]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var asm Assembler
		ind, err := Decode(line)
		if err != nil || bytes.Contains(line, []byte("\n")) {
			return
		}
		if ind.Node != nil {
			asm.Add(&ind, time.Now()) // must not panic
		}
	})
}
