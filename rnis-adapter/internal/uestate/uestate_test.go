package uestate

import (
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/meas"
)

func mk(cell string, bs, rnti int64, imsi string, sfn int64) meas.Measurement {
	return meas.Measurement{Cell: cell, BSID: bs, RNTI: rnti, IMSI: imsi, SFNSF: flexran.Some(sfn),
		IPv4:  netip.MustParseAddr("10.30.1.1"),
		ERABs: []meas.ERAB{{ID: 5, QCI: flexran.Some(9)}}}
}

func kinds(events []Event) []Kind {
	var out []Kind
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

func TestAttachRepeatDetach(t *testing.T) {
	tr := New(100 * time.Millisecond)
	t0 := time.Unix(0, 0)
	fresh, ev := tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 16)}, t0)
	if !fresh[0] || len(ev) != 2 || ev[0].Kind != RabEst || ev[1].Kind != Attach {
		t.Fatalf("first poll: fresh=%v events=%v", fresh, kinds(ev))
	}
	fresh, ev = tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 16)}, t0.Add(10*time.Millisecond))
	if fresh[0] || len(ev) != 0 {
		t.Fatalf("same frame, same values: fresh=%v events=%v", fresh, kinds(ev))
	}
	fresh, _ = tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 17)}, t0.Add(20*time.Millisecond))
	if !fresh[0] {
		t.Fatal("a new frame is fresh")
	}
	// Missing for one poll, then for long enough: detach only after both conditions.
	if _, ev = tr.Update(nil, t0.Add(200*time.Millisecond)); len(ev) != 0 {
		t.Fatalf("one missed poll: %v", kinds(ev))
	}
	if _, ev = tr.Update(nil, t0.Add(210*time.Millisecond)); len(ev) != 2 || ev[0].Kind != RabRel || ev[1].Kind != Detach {
		t.Fatalf("detach: %v", kinds(ev))
	}
	if tr.Count() != 0 {
		t.Fatal("detached UE still known")
	}
}

func TestCellChangeByIMSI(t *testing.T) {
	tr := New(time.Second)
	t0 := time.Unix(0, 0)
	tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 16)}, t0)
	_, ev := tr.Update([]meas.Measurement{mk("2-0", 2, 9, "42", 16)}, t0.Add(time.Millisecond))
	if len(ev) != 1 || ev[0].Kind != CellChange || ev[0].Previous.Cell != "1-0" || ev[0].UE.Cell != "2-0" {
		t.Fatalf("events %v", kinds(ev))
	}
	if tr.Count() != 1 {
		t.Fatalf("the old cell's entry is gone: %d UEs", tr.Count())
	}
}

func TestMultipathUEIsNotACellChange(t *testing.T) {
	tr := New(time.Second)
	t0 := time.Unix(0, 0)
	tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 16)}, t0)
	_, ev := tr.Update([]meas.Measurement{mk("1-0", 1, 7, "42", 17), mk("2-0", 2, 9, "42", 17)}, t0.Add(time.Millisecond))
	if len(ev) != 2 || ev[1].Kind != Attach {
		t.Fatalf("a second path attaches: %v", kinds(ev))
	}
}

func TestMeasurementReport(t *testing.T) {
	tr := New(time.Second)
	m := mk("1-0", 1, 7, "42", 16)
	m.RRC = flexran.RRCMeas{MeasID: flexran.Some(-1), RSRP: flexran.Some(-1), RSRQ: flexran.Some(-1)}
	_, ev := tr.Update([]meas.Measurement{m}, time.Unix(0, 0))
	for _, e := range ev {
		if e.Kind == MeasRep {
			t.Fatal("-1 is no report")
		}
	}
	m.SFNSF, m.RRC = flexran.Some(17), flexran.RRCMeas{MeasID: flexran.Some(1), RSRP: flexran.Some(-90), RSRQ: flexran.Some(-9)}
	if _, ev = tr.Update([]meas.Measurement{m}, time.Unix(1, 0)); len(ev) != 1 || ev[0].Kind != MeasRep {
		t.Fatalf("events %v", kinds(ev))
	}
}

// drbTimeline turns the live re-attach capture (testdata/flexran/live-oai-rfsim-timeline/
// reattach-drb-timing.txt: per poll and RNTI, whether the UE is in ueConfig, the QCIs of its
// DRBs in lcUeConfig and its GTP eRabIds) into the measurements the tracker sees.
func drbTimeline(t *testing.T) (times []time.Time, polls [][]meas.Measurement) {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/flexran/live-oai-rfsim-timeline/reattach-drb-timing.txt")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^(\d+)\.(\d+) rnti (\d+): in ueConfig=(\w+) lc DRB qci=\(([\d,]*)\) mac gtp eRabId=(None|\(([\d,]*)\))$`)
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := line.FindStringSubmatch(l)
		if f == nil {
			t.Fatalf("unexpected line %q", l)
		}
		sec, _ := strconv.ParseInt(f[1], 10, 64)
		ms, _ := strconv.ParseInt(f[2], 10, 64)
		at := time.Unix(sec, ms*1e6)
		rnti, _ := strconv.ParseInt(f[3], 10, 64)
		m := meas.Measurement{Cell: "10000-0", BSID: 10000, RNTI: rnti}
		qcis := strings.FieldsFunc(f[5], func(r rune) bool { return r == ',' })
		for i, id := range strings.FieldsFunc(f[7], func(r rune) bool { return r == ',' }) {
			e := meas.ERAB{}
			e.ID, _ = strconv.ParseInt(id, 10, 64)
			if i < len(qcis) { // meas.erabs pairs the i-th E-RAB with the i-th DRB's QCI
				q, _ := strconv.ParseInt(qcis[i], 10, 64)
				e.QCI = flexran.Some(q)
			}
			m.ERABs = append(m.ERABs, e)
		}
		if n := len(times); n == 0 || !times[n-1].Equal(at) {
			times, polls = append(times, at), append(polls, nil)
		}
		if f[4] == "True" {
			polls[len(polls)-1] = append(polls[len(polls)-1], m)
		}
	}
	return times, polls
}

// Defect 2: on a live OAI eNB the E-RAB appears ~45 ms after the UE and its QCI ~0.5 s later.
// One RabEst per attach, sent when the QCI is known and carrying it; the released UE's
// bearer is released.
func TestLiveReattachAnnouncesTheBearerWithItsQCI(t *testing.T) {
	times, polls := drbTimeline(t)
	tr := New(time.Millisecond)
	var ests, rels []Event
	for i := range times {
		for j := range polls[i] {
			polls[i][j].SFNSF = flexran.Some(int64(i)) // every poll is a new report
		}
		_, ev := tr.Update(polls[i], times[i])
		for _, e := range ev {
			switch e.Kind {
			case RabEst:
				ests = append(ests, e)
			case RabRel:
				rels = append(rels, e)
			}
		}
	}
	if len(ests) != 2 {
		t.Fatalf("%d rab_est, want one per attach (2)", len(ests))
	}
	for _, e := range ests {
		if !e.ERAB.QCI.Set || e.ERAB.QCI.V != 1 || e.ERAB.ID != 1 {
			t.Errorf("rnti %d: rab_est without its QCI: %+v", e.UE.RNTI, e.ERAB)
		}
	}
	if late := ests[1]; late.UE.RNTI != 57529 || late.TimeNs != times[len(times)-1].UnixNano() {
		t.Errorf("re-attached UE announced at %d by rnti %d, want when its QCI arrived", late.TimeNs, late.UE.RNTI)
	}
	if len(rels) != 1 || rels[0].UE.RNTI != 20537 {
		t.Errorf("releases %+v, want the old RNTI's bearer", rels)
	}
}

// A source that never reports a QCI: the E-RAB is announced after QCIWait without one, and
// again when a QCI finally comes.
func TestBearerWithoutQCIIsAnnouncedLate(t *testing.T) {
	tr := New(time.Second)
	t0 := time.Unix(0, 0)
	m := mk("1-0", 1, 7, "42", 1)
	m.ERABs = []meas.ERAB{{ID: 5}}
	var got []Event
	for i, dt := range []time.Duration{0, time.Second, QCIWait, QCIWait + time.Second} {
		m.SFNSF = flexran.Some(int64(i))
		if i == 3 {
			m.ERABs = []meas.ERAB{{ID: 5, QCI: flexran.Some(9)}}
		}
		_, ev := tr.Update([]meas.Measurement{m}, t0.Add(dt))
		for _, e := range ev {
			if e.Kind == RabEst {
				got = append(got, e)
			}
		}
	}
	if len(got) != 2 || got[0].ERAB.QCI.Set || got[0].TimeNs != int64(QCIWait) || got[1].ERAB.QCI != flexran.Some(9) {
		t.Fatalf("rab_est %+v", got)
	}
}

// TestQCIChangeIsAModification: an announced E-RAB whose QCI changes is a rab_mod with the
// new QCI (not a release and a new establishment); its later release carries the new QCI.
func TestQCIChangeIsAModification(t *testing.T) {
	tr := New(time.Millisecond)
	t0 := time.Unix(0, 0)
	m := mk("1-0", 1, 7, "42", 1)
	_, ev := tr.Update([]meas.Measurement{m}, t0)
	if got := kinds(ev); len(got) != 2 || got[0] != RabEst || got[1] != Attach {
		t.Fatalf("attach: %v", got)
	}
	m.SFNSF, m.ERABs = flexran.Some(2), []meas.ERAB{{ID: 5, QCI: flexran.Some(7)}}
	_, ev = tr.Update([]meas.Measurement{m}, t0.Add(time.Second))
	if len(ev) != 1 || ev[0].Kind != RabMod || ev[0].ERAB != (meas.ERAB{ID: 5, QCI: flexran.Some(7)}) {
		t.Fatalf("modification: %+v", ev)
	}
	m.SFNSF = flexran.Some(3)
	if _, ev = tr.Update([]meas.Measurement{m}, t0.Add(2*time.Second)); len(ev) != 0 {
		t.Fatalf("unchanged QCI: %+v", ev)
	}
	tr.Update(nil, t0.Add(3*time.Second))
	_, ev = tr.Update(nil, t0.Add(4*time.Second))
	if len(ev) != 2 || ev[0].Kind != RabRel || ev[0].ERAB.QCI != flexran.Some(7) {
		t.Fatalf("release: %+v", ev)
	}
}
