package e2

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// lines64 is one report of 64 UEs as the xApp writes it: the rlc line and the mac line.
func lines64() (rlc, mac []byte) {
	var r, m strings.Builder
	head := `"node":{"ran":"gNB","mcc":208,"mnc":95,"mnc_digits":2,"nb_id":3584,"cu_du_id":null},"cell":{"pci":0,"dl_prbs":106,"slots_per_frame":20,"harq_processes":16},"tstamp_us":1764091234567890`
	r.WriteString(`{"type":"rlc",` + head + `,"rbs":[`)
	m.WriteString(`{"type":"mac",` + head + `,"ues":[`)
	for i := range 64 {
		if i > 0 {
			r.WriteByte(',')
			m.WriteByte(',')
		}
		fmt.Fprintf(&r, `{"rnti":%d,"rbid":1,"mode":0,"txbuf_occ_bytes":%d,"txbuf_occ_pkts":9,"txsdu_wt_us":3000,"txpdu_retx_pkts":0,"txpdu_dd_pkts":0,"txsdu_avg_time_to_tx":0}`, 1000+i, 1000*i)
		fmt.Fprintf(&m, `{"rnti":%d,"frame":512,"slot":7,"wb_cqi":12,"dl_mcs1":20,"ul_mcs1":9,"dl_curr_tbs":3000,"ul_curr_tbs":200,"dl_sched_rb":40,"ul_sched_rb":5,"dl_bler":0.08,"ul_bler":0.01,"bsr":300,"phr":40,"pusch_snr":20.5,"pucch_snr":18,"dl_aggr_tbs":91234,"dl_aggr_prb":3221,"dl_aggr_retx_prb":4,"dl_num_harq":4}`, 1000+i)
	}
	r.WriteString("]}")
	m.WriteString("]}")
	return []byte(r.String()), []byte(m.String())
}

// BenchmarkReport64: decoding and assembling one 64-UE report (its rlc and mac lines), the
// E2 source's CPU per report before the pipeline (go test -bench Report64 ./rnis-adapter/internal/e2).
func BenchmarkReport64(b *testing.B) {
	rlc, mac := lines64()
	var asm Assembler
	now := time.Now()
	b.ReportAllocs()
	b.SetBytes(int64(len(rlc) + len(mac)))
	for range b.N {
		for _, line := range [][]byte{rlc, mac} {
			ind, err := Decode(line)
			if err != nil {
				b.Fatal(err)
			}
			if snap, dropped := asm.Add(&ind, now); len(dropped) > 0 || (ind.Type == KindMAC && len(snap.Stations[0].UEs) != 64) {
				b.Fatalf("dropped %v", dropped)
			}
		}
	}
}
