package state

import (
	"net/netip"
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
