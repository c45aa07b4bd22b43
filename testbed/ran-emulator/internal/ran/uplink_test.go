package ran

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"mts.invalid/suite/services/common/go/pkt"
	"mts.invalid/suite/services/common/go/threegpp"
)

// ulUEs is a cell with an uplink MAC and UEs 10.30.0.1.. (one bearer each).
func ulUEs(t *testing.T, cell string, bearers ...string) *Emulator {
	t.Helper()
	ues := ""
	for i, b := range bearers {
		if i > 0 {
			ues += ","
		}
		ues += fmt.Sprintf(`{"name":"ue%d","imsi":"20893000000000%d","bearers":[{"bs_id":1,"rnti":%d,
		 "ip":"10.30.0.%d","tun":{"name":"rf%d"}%s}]}`, i+1, i+1, 100+i, i+1, i, b)
	}
	return testEmu(t, fmt.Sprintf(`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1%s}],"ues":[%s]}`, cell, ues))
}

// ulPacket is an n-byte IPv4 packet from UE ue (10.30.0.ue) to the server.
func ulPacket(ue byte, n int) *pkt.Packet {
	p := udp(ue, n, 0, 1)
	b := p.Buf()
	copy(b[12:16], []byte{10, 30, 0, ue})
	copy(b[16:20], []byte{10, 10, 0, 2})
	return p
}

// stepSaturated keeps every UE's modem buffer above want bytes and runs TTI i; it returns
// the grant each UE decoded.
func stepSaturated(e *Emulator, i int64, want int) []Grant {
	var out []Grant
	for k, ue := range e.UEs {
		fillUL(e, ue.Bearers[0], byte(k+1), want, i*ms)
	}
	e.Step(i * ms)
	for _, ue := range e.UEs {
		out = append(out, ue.Bearers[0].up.LastGrant())
	}
	return out
}

// fillUL keeps UE bearer b's modem buffer above want bytes.
func fillUL(e *Emulator, b *Bearer, ue byte, want int, now int64) {
	for b.up.QueueBytes()+b.up.InboxBytes() < want {
		e.InjectUL(b, ulPacket(ue, 1500), now)
		if b.up.InboxBytes() > want { // the TTI thread takes the inbox in
			return
		}
	}
}

// A saturated UE alone gets every uplink PRB each TTI and carries TBS(P_cell, MCS)
// bytes per TTI, MCS from its uplink CQI; its grant says so.
func TestUplinkSaturatedUEGetsTheWholeCell(t *testing.T) {
	for _, tc := range []struct {
		rat          string
		prb, ulCQI   int
		numerology   int
		wantTBSBytes func(mcs, n int) (int, error)
	}{
		{"lte", 50, 11, 0, threegpp.LTETBSBytesForMCS},
		{"nr", 106, 15, 1, func(mcs, n int) (int, error) {
			bits, err := threegpp.NRTBSBits(n, mcs, threegpp.DefaultNR)
			return bits / 8, err
		}},
	} {
		e := ulUEs(t, fmt.Sprintf(`,"rat":%q,"numerology":%d,"prb":%d,"uplink":{}`, tc.rat, tc.numerology, tc.prb),
			fmt.Sprintf(`,"channel":{"cqi":15},"ul_channel":{"cqi":%d}`, tc.ulCQI))
		b := e.UEs[0].Bearers[0]
		mcs := threegpp.CQIToMCS(tc.ulCQI)
		want, err := tc.wantTBSBytes(mcs, tc.prb)
		if err != nil {
			t.Fatal(err)
		}
		tti := e.TickNs()
		delivered := 0
		const n = 400
		for i := int64(0); i < n; i++ {
			fillUL(e, b, 1, 4*want+3000, i*tti)
			e.Step(i * tti)
			for _, p := range b.up.Delivered(i * tti) {
				delivered += p.N
			}
			g := b.up.LastGrant()
			if g.PCell != tc.prb || g.NUsers != 1 || g.PUnused != 0 || g.PCurrent != tc.prb || g.MCS != mcs ||
				g.TTINs != tti || g.NR != (tc.rat == "nr") || g.StartNs != i*tti {
				t.Fatalf("%s TTI %d: grant %+v", tc.rat, i, g)
			}
		}
		if got := float64(delivered) / n; math.Abs(got-float64(want)) > 1500.0/n {
			t.Errorf("%s: %.1f bytes/TTI, want TBS(%d PRB, MCS %d) = %d", tc.rat, got, tc.prb, mcs, want)
		}
		if b.C.ULDeliveredBytes.Load() != 0 {
			t.Errorf("delivery is counted when the packet is handed to the RAN namespace, not in Delivered")
		}
	}
}

// Two saturated UEs under round robin share the PRBs evenly (an odd PRB alternates);
// the grants each decodes add up: P_current(1) + P_current(2) + P_unused = P_cell, N = 2.
func TestUplinkRoundRobinGrantsAddUp(t *testing.T) {
	const prb = 25
	e := ulUEs(t, `,"prb":25,"uplink":{"scheduler":"rr"}`, `,"ul_channel":{"cqi":15}`, `,"ul_channel":{"cqi":9}`)
	sum := [2]int{}
	for i := int64(0); i < 200; i++ {
		g := stepSaturated(e, i, 100_000)
		g1, g2 := g[0], g[1]
		if g1.NUsers != 2 || g2.NUsers != 2 || g1.PUnused != 0 || g1.PCurrent+g2.PCurrent != prb {
			t.Fatalf("TTI %d: grants %+v / %+v", i, g1, g2)
		}
		if d := g1.PCurrent - g2.PCurrent; d != 1 && d != -1 {
			t.Fatalf("TTI %d: round robin gave %d and %d PRBs", i, g1.PCurrent, g2.PCurrent)
		}
		sum[0] += g1.PCurrent
		sum[1] += g2.PCurrent
		if g1.MCS != threegpp.CQIToMCS(15) || g2.MCS != threegpp.CQIToMCS(9) {
			t.Fatalf("MCS %d / %d", g1.MCS, g2.MCS)
		}
	}
	if sum[0] != sum[1] {
		t.Errorf("the odd PRB did not alternate: %v", sum)
	}
}

// A UE with a small backlog gets the fewest PRBs whose TBS carries it; the rest is
// P_unused. With nothing queued it gets no grant (N = 0, everything unused).
func TestUplinkSmallBacklogLeavesPRBsUnused(t *testing.T) {
	e := ulUEs(t, `,"prb":50,"uplink":{}`, `,"ul_channel":{"cqi":15}`)
	b := e.UEs[0].Bearers[0]
	e.Step(0)
	if g := b.up.LastGrant(); g.NUsers != 0 || g.PCurrent != 0 || g.PUnused != 50 {
		t.Fatalf("idle: %+v", g)
	}
	e.InjectUL(b, ulPacket(1, 1000), ms)
	e.Step(ms)
	need := 0
	mcs := threegpp.CQIToMCS(15)
	for n := 1; n <= 50; n++ {
		if tbs, _ := threegpp.LTETBSBytesForMCS(mcs, n); tbs >= 1000 {
			need = n
			break
		}
	}
	if g := b.up.LastGrant(); g.NUsers != 1 || g.PCurrent != need || g.PUnused != 50-need {
		t.Fatalf("1000 B queued: %+v, want %d PRBs", g, need)
	}
}

// Proportional fair serves both UEs over time and never grants more than the cell.
func TestUplinkProportionalFair(t *testing.T) {
	e := ulUEs(t, `,"prb":25,"uplink":{"scheduler":"pf"}`, `,"ul_channel":{"cqi":15}`, `,"ul_channel":{"cqi":7}`)
	b1, b2 := e.UEs[0].Bearers[0], e.UEs[1].Bearers[0]
	served := [2]int{}
	for i := int64(0); i < 1000; i++ {
		g := stepSaturated(e, i, 50_000)
		g1, g2 := g[0], g[1]
		if g1.PCurrent+g2.PCurrent+g1.PUnused != 25 || g1.NUsers < 1 {
			t.Fatalf("TTI %d: %+v / %+v", i, g1, g2)
		}
		served[0] += b1.up.mac.tbs
		served[1] += b2.up.mac.tbs
	}
	// PF equalizes the ratio of rate to full-band rate: both get about half the TTIs
	for i, want := range []int{threegpp.CQIToMCS(15), threegpp.CQIToMCS(7)} {
		full, _ := threegpp.LTETBSBytesForMCS(want, 25)
		share := float64(served[i]) / float64(full*1000)
		if share < 0.4 || share > 0.6 {
			t.Errorf("UE %d got %.2f of its full-band rate, want ~0.5", i+1, share)
		}
	}
}

// Uplink HARQ: a failed TB is retransmitted one HARQ RTT later on the same PRBs, and
// counted as a retransmission (prbRetxUl in the snapshot).
func TestUplinkHARQRetransmission(t *testing.T) {
	e := ulUEs(t, `,"prb":25,"uplink":{}`, `,"ul_channel":{"cqi":15}`)
	b := e.UEs[0].Bearers[0]
	e.InjectUL(b, ulPacket(1, 1000), 0)
	bler := 0.999999
	b.up.Channel().Apply(ChannelOverride{BLER: &bler})
	e.Step(0)
	bler = 0
	b.up.Channel().Apply(ChannelOverride{BLER: &bler})
	var at int64 = -1
	for i := int64(1); i < 20 && at < 0; i++ {
		e.Step(i * ms)
		if len(b.up.Delivered(i*ms)) > 0 {
			at = i
		}
	}
	if at != 8 || b.up.C.TBRetx.Load() != 1 {
		t.Errorf("delivered at TTI %d after %d retransmissions, want TTI 8 after 1", at, b.up.C.TBRetx.Load())
	}
}

// The modem buffer holds ul_buffer_bytes: beyond it packets are dropped and counted,
// and the grant reports the occupancy.
func TestUplinkModemBufferLimit(t *testing.T) {
	e := ulUEs(t, `,"prb":6,"uplink":{}`, `,"ul_buffer_bytes":30000,"ul_channel":{"cqi":1}`)
	b := e.UEs[0].Bearers[0]
	for i := 0; i < 40; i++ {
		e.InjectUL(b, ulPacket(1, 1500), 0)
	}
	e.Step(0)
	g := b.up.LastGrant()
	if g.BufferByte > 30000 || g.BufferByte < 30000-1500 {
		t.Errorf("buffer %d B, want about the 30000 B limit", g.BufferByte)
	}
	if drops := b.up.C.DLQueueDropPkts.Load(); drops != 20 {
		t.Errorf("%d packets dropped, want 20", drops)
	}
}

// A default buffer is the research's 10 MB; ul_channel without an uplink MAC is an error.
func TestUplinkConfig(t *testing.T) {
	e := ulUEs(t, `,"prb":25,"uplink":{}`, ``)
	b := e.UEs[0].Bearers[0]
	if b.Cfg.ULBufferBytes != DefaultULBufferBytes || b.up.Cell.Cfg.PRB != 25 || b.up.Cell.Cfg.Scheduler != "rr" {
		t.Errorf("defaults: buffer %d, uplink %+v", b.Cfg.ULBufferBytes, b.up.Cell.Cfg)
	}
	for _, bad := range []string{
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1}],"ues":[{"name":"u","bearers":[{"bs_id":1,"rnti":1,"ip":"10.30.0.1","tun":{"name":"a"},"ul_channel":{"cqi":3}}]}]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1,"uplink":{"prb":300}}],"ues":[]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1,"uplink":{"scheduler":"x"}}],"ues":[]}`,
		`{"dl_tun":{"name":"x"},"cells":[{"bs_id":1,"uplink":{}}],"ues":[{"name":"u","bearers":[{"bs_id":1,"rnti":1,"ip":"10.30.0.1","tun":{"name":"a"},"ul_buffer_bytes":100}]}]}`,
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// PHR falls by 10·log10(M) dB with M PRBs granted and stays in the report's range.
func TestPHR(t *testing.T) {
	for _, c := range []struct{ conf, prb, want int }{{40, 0, 40}, {40, 1, 40}, {40, 10, 30}, {40, 100, 20}, {5, 100, 0}} {
		if got := phrFor(c.conf, c.prb); got != c.want {
			t.Errorf("phrFor(%d, %d) = %d, want %d", c.conf, c.prb, got, c.want)
		}
	}
}

// struct sigma_grant's layout: the fields at the offsets ue/bpf/sigma.h gives them.
func TestEncodeGrant(t *testing.T) {
	v := EncodeGrant(Grant{StartNs: 1 << 40, TTI: 7, TTINs: 500_000, PCell: 106, NUsers: 2, PUnused: 3,
		PCurrent: 50, MCS: 27, NR: true, BufferByte: 12345})
	le := binary.LittleEndian
	got := []uint64{le.Uint64(v[0:]), le.Uint64(v[8:])}
	for off := 16; off < 48; off += 4 {
		got = append(got, uint64(le.Uint32(v[off:])))
	}
	want := []uint64{1 << 40, 7, 500_000, 106, 2, 3, 50, 27, 1, 12345}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("encoded %v, want %v", got, want)
	}
	if TBSIndex(false, 0, 0) != 0 || TBSIndex(true, 28, 275) != tbsEntries-1 {
		t.Errorf("TBS index range")
	}
}
