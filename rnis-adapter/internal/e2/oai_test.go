package e2

import (
	"bufio"
	"encoding/json"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/services/common/go/threegpp"
)

// oaiLine is a MAC UE entry of the OAI recordings read without the package's types.
type oaiLine struct {
	Type string `json:"type"`
	UEs  []struct {
		RNTI      int64 `json:"rnti"`
		WBCQI     int64 `json:"wb_cqi"`
		DLMCS1    int   `json:"dl_mcs1"`
		DLCurrTBS int   `json:"dl_curr_tbs"`
		DLSchedRB int   `json:"dl_sched_rb"`
		DLAggrTBS int64 `json:"dl_aggr_tbs"`
	} `json:"ues"`
	RBs []struct {
		RNTI          int64 `json:"rnti"`
		TxBufOccBytes int64 `json:"txbuf_occ_bytes"`
	} `json:"rbs"`
}

// TestOAIRecordings reads what our xApp forwarded from a live OAI gNB (2024.w12, RF
// simulator, phy-test, one UE) through FlexRIC 34d6810f's nearRT-RIC (testdata/e2/oai-*,
// README there). Unlike FlexRIC's emulated agent, every entry is real and usable; the test
// checks what the live gNB showed (docs/e2.md, "What a live OAI gNB showed"):
//   - OAI's dl_curr_tbs is TS 38.214's TBS on 13 PDSCH symbols (OAIPDSCHSymbols), not 12;
//   - reports dated in a TDD uplink slot read dl_curr_tbs 0 while the UE is served: the
//     adapter keeps the last downlink slot's TB, so no served report reads as idle;
//   - wb_cqi is 0 without CSI reports: read as unknown, and MELD's D_TBS then comes from
//     the scheduler's MCS, not 0 ("radio dead").
func TestOAIRecordings(t *testing.T) {
	forEachRecording(t, "oai-*", checkOAIRecording)
}

func checkOAIRecording(t *testing.T, sc *bufio.Scanner) {
	var asm Assembler
	var macs, zeroTBSRaw, queued int
	seenTB := false
	var lastAggr int64 = -1
	for sc.Scan() {
		ind, err := Decode(sc.Bytes())
		if err != nil {
			t.Fatalf("%v: %.200s", err, sc.Bytes())
		}
		var raw oaiLine
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatal(err)
		}
		snap, dropped := asm.Add(&ind, time.Now())
		if len(dropped) > 0 {
			t.Fatalf("a live gNB's entries are usable: dropped %v", dropped)
		}
		for _, rb := range raw.RBs {
			if rb.TxBufOccBytes > 0 {
				queued++
			}
		}
		if ind.Type != KindMAC {
			continue
		}
		macs++
		if len(raw.UEs) != 1 || len(snap.Stations) != 1 || len(snap.Stations[0].UEs) != 1 {
			t.Fatalf("MAC line %d: one phy-test UE expected in the line and the snapshot", macs)
		}
		u := raw.UEs[0]
		if u.DLCurrTBS > 0 {
			p := threegpp.NRParams{MCSTable: 1, Symbols: OAIPDSCHSymbols, DMRSPerPRB: 12, Layers: 1}
			if bits, _ := threegpp.NRTBSBits(u.DLSchedRB, u.DLMCS1, p); bits/8 != u.DLCurrTBS {
				t.Fatalf("dl_curr_tbs %d on %d PRBs at MCS %d, TS 38.214 on %d symbols gives %d",
					u.DLCurrTBS, u.DLSchedRB, u.DLMCS1, OAIPDSCHSymbols, bits/8)
			}
		}
		served := lastAggr >= 0 && u.DLAggrTBS > lastAggr
		lastAggr = u.DLAggrTBS
		m := meas.Normalize(snap, time.Now(), nil, nil)[0]
		if !served || !seenTB { // the adapter knows no downlink slot's TB before the first
			seenTB = seenTB || u.DLCurrTBS > 0
			continue
		}
		if u.DLCurrTBS == 0 {
			zeroTBSRaw++
		}
		if !m.DLTBS.Set || m.DLTBS.V == 0 {
			t.Fatalf("MAC line %d: served (dl_aggr_tbs grew) but the adapter reads TBS %+v", macs, m.DLTBS)
		}
		if u.WBCQI == 0 && (m.WBCQI.Set || !m.RadioTBS.Set || m.RadioTBS.V == 0) {
			t.Fatalf("MAC line %d: wb_cqi 0 of a served UE read as %+v, D_TBS %+v", macs, m.WBCQI, m.RadioTBS)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if macs < 100 || zeroTBSRaw == 0 || queued == 0 {
		t.Fatalf("%d MAC lines, %d served ones read 0 by the gNB, %d RLC bearers with a queue: "+
			"the recording no longer shows what the test is about", macs, zeroTBSRaw, queued)
	}
	t.Logf("%d MAC lines, %d served reports with dl_curr_tbs 0 kept at the last TB, %d queued bearers", macs, zeroTBSRaw, queued)
}
