package ran

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"mts.invalid/suite/services/common/go/pkt"
)

// runLabelled offers load packets per TTI (1500 B UDP, source ports 1..3) for ttis TTIs and
// returns the bearer after the pipeline drained.
func runLabelled(t *testing.T, cfg string, ttis int64, perTTI int) (*Emulator, *Bearer) {
	t.Helper()
	e := testEmu(t, cfg)
	b := e.UEs[0].Bearers[0]
	for tti := int64(0); tti < ttis+200; tti++ {
		for i := 0; tti < ttis && i < perTTI; i++ {
			e.Inject(udp(1, 1500, uint32(tti), uint16(1+(tti+int64(i))%3)), tti*ms)
		}
		e.Step(tti * ms)
		b.Delivered(tti * ms)
	}
	return e, b
}

// Every drop is labelled with its cause, and the labels add up to the bearer's own
// counters: radio loss (HARQ exhausted and residual) beside RLC overflow in one run.
func TestDropLabelsMatchCounters(t *testing.T) {
	e, b := runLabelled(t, `{"dl_tun":{"name":"x"},"cells":[{"bs_id":1000,"prb":25,"harq":{"max_retx":1}}],
	 "ues":[{"name":"ue1","imsi":"1","bearers":[{"bs_id":1000,"rnti":100,"ip":"10.30.0.1","tun":{"name":"a"},
	 "queue":{"discipline":"fifo","limit_bytes":30000},"channel":{"cqi":9,"bler":0.2,"loss":0.02}}]}]}`, 3000, 1)
	c := e.Truth.Counts()
	radio := b.C.DLResidualLostPkts.Load() + b.C.DLChannelLossPkts.Load()
	overflow := b.C.DLQueueDropPkts.Load()
	if radio == 0 || overflow == 0 {
		t.Fatalf("the scenario must have both causes: radio %d, overflow %d", radio, overflow)
	}
	if c.Total[CauseRadio] != radio || c.Total[CauseOverflow] != overflow || c.Total[CauseAQM] != 0 || c.Total[CauseWAN] != 0 {
		t.Errorf("labels %v, counters radio %d overflow %d", c.Total, radio, overflow)
	}
	if c.PerUE["ue1"] != c.Total {
		t.Errorf("per UE %v, total %v", c.PerUE["ue1"], c.Total)
	}
	var perFlow CauseCounts
	for f, n := range c.PerFlow {
		if f.Proto != 17 || f.Dst != netip.MustParseAddr("10.30.0.1") || f.Sport < 1 || f.Sport > 3 {
			t.Errorf("unexpected flow %+v", f)
		}
		for i := range n {
			perFlow[i] += n[i]
		}
	}
	if len(c.PerFlow) != 3 || perFlow != c.Total {
		t.Errorf("%d flows summing to %v, total %v", len(c.PerFlow), perFlow, c.Total)
	}
	drops, next, lost := e.Truth.Since(0, 1<<30)
	if uint64(len(drops)) != radio+overflow || next != c.LastSeq || lost != 0 {
		t.Errorf("log: %d drops, next %d (last %d), lost %d", len(drops), next, c.LastSeq, lost)
	}
	var logged CauseCounts
	for i, d := range drops {
		logged[d.Cause]++
		if d.Seq != uint64(i+1) || d.UE != "ue1" || d.Bytes != 1500 || (i > 0 && d.TimeNs < drops[i-1].TimeNs) {
			t.Fatalf("drop %d: %+v", i, d)
		}
	}
	if logged != c.Total {
		t.Errorf("log causes %v, counters %v", logged, c.Total)
	}
}

// CoDel's head drops are labelled aqm, not overflow.
func TestAQMDropLabel(t *testing.T) {
	e, b := runLabelled(t, `{"dl_tun":{"name":"x"},"cells":[{"bs_id":1000,"prb":25}],
	 "ues":[{"name":"ue1","imsi":"1","bearers":[{"bs_id":1000,"rnti":100,"ip":"10.30.0.1","tun":{"name":"a"},
	 "queue":{"discipline":"codel"},"channel":{"cqi":9}}]}]}`, 2000, 1)
	c := e.Truth.Counts()
	if aqm := b.C.DLAQMDropPkts.Load(); aqm == 0 || c.Total[CauseAQM] != aqm || c.Total[CauseRadio] != 0 {
		t.Errorf("labels %v, AQM drops %d", c.Total, aqm)
	}
}

// The log is a ring read with a cursor: pages continue where the last ended, and a reader
// that fell behind is told how many drops it lost.
func TestDropLogCursor(t *testing.T) {
	tr := NewTruth(4)
	p := udp(1, 100, 0, 1)
	defer pkt.Put(p)
	for i := range 10 {
		tr.Record(int64(i), "ue1", CauseRadio, p)
	}
	drops, next, lost := tr.Since(0, 2)
	if lost != 6 || next != 8 || len(drops) != 2 || drops[0].Seq != 7 {
		t.Fatalf("behind: %d drops from %d, next %d, lost %d", len(drops), drops[0].Seq, next, lost)
	}
	drops, next, lost = tr.Since(next, 100)
	if lost != 0 || next != 10 || len(drops) != 2 || drops[1].Seq != 10 {
		t.Fatalf("page 2: %d drops, next %d, lost %d", len(drops), next, lost)
	}
	if drops, next, _ = tr.Since(next, 100); len(drops) != 0 || next != 10 {
		t.Fatalf("caught up: %d drops, next %d", len(drops), next)
	}
}

// A TCP drop carries its 5-tuple, sequence number and payload length.
func TestDropFlowOfTCPSegment(t *testing.T) {
	b := make([]byte, 1000)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:4], 1000)
	b[9] = 6
	copy(b[12:16], []byte{10, 20, 0, 1})
	copy(b[16:20], []byte{10, 30, 0, 1})
	binary.BigEndian.PutUint16(b[20:], 443)
	binary.BigEndian.PutUint16(b[22:], 50000)
	binary.BigEndian.PutUint32(b[24:], 123456789)
	b[32] = 8 << 4 // 32-byte TCP header (timestamps)
	f, seq, n := parseFlow(b)
	want := Flow{netip.MustParseAddr("10.20.0.1"), netip.MustParseAddr("10.30.0.1"), 6, 443, 50000}
	if f != want || seq != 123456789 || n != 1000-20-32 {
		t.Errorf("%+v seq %d len %d", f, seq, n)
	}
	if f, _, _ := parseFlow(b[:10]); f != (Flow{}) {
		t.Errorf("short packet: %+v", f)
	}
}
