// Package uestate keeps the latest measurement of every UE and turns successive polls into
// events: attach, detach and cell change (AMQP feed), and the E-RAB and measurement-report
// changes the MEC 012 notifications need. It also tells which measurements are exact repeats
// (same frame, same values), which are not published again.
package uestate

import (
	"sort"
	"sync"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/meas"
)

// Kind of an event.
type Kind string

const (
	Attach     Kind = "attach"
	Detach     Kind = "detach"
	CellChange Kind = "cell_change"
	RabEst     Kind = "rab_est"  // MEC 012 only
	RabMod     Kind = "rab_mod"  // MEC 012 only: an announced E-RAB's QCI changed
	RabRel     Kind = "rab_rel"  // MEC 012 only
	MeasRep    Kind = "meas_rep" // MEC 012 only: a new RRC measurement report
)

// Feed tells whether the kind goes to the AMQP feed (the others are MEC 012 notifications).
func (k Kind) Feed() bool { return k == Attach || k == Detach || k == CellChange }

// Event is one change; UE is the UE's measurement now (its last one for detach/rab_rel).
type Event struct {
	Kind     Kind
	UE       meas.Measurement
	Previous *meas.Measurement // cell_change: the UE in its old cell
	ERAB     meas.ERAB         // rab_est, rab_mod (with its new QCI), rab_rel
	TimeNs   int64
}

type ueKey struct {
	bs   int64
	rnti int64
}

type ue struct {
	m        meas.Measurement
	hash     uint64
	lastSeen time.Time
	missed   int         // successful polls without this UE
	erabs    []meas.ERAB // the E-RABs announced (rab_est sent), with the QCI announced
	waiting  map[int64]time.Time
}

// QCIWait is how long an E-RAB without a QCI is held back before it is announced anyway
// (a source that never reports one). A live OAI eNB lists the GTP E-RAB ~45 ms after the
// UE and the DRB's QCI ~0.5 s later (testdata/.../reattach-drb-timing.txt); announced at
// once, the bearer had no QCI and MEC 012's mandatory QCI filter never matched.
const QCIWait = 2 * time.Second

// Tracker is safe for one writer (the poller) and many readers (the REST API).
type Tracker struct {
	detachAfter time.Duration
	mu          sync.RWMutex
	ues         map[ueKey]*ue
}

// New returns a tracker that declares a UE detached after it has been missing from at least
// two successful polls and for detachAfter.
func New(detachAfter time.Duration) *Tracker {
	return &Tracker{detachAfter: detachAfter, ues: make(map[ueKey]*ue)}
}

// Update records one poll. It returns which measurements are new (not exact repeats) and the
// events the poll caused.
func (t *Tracker) Update(ms []meas.Measurement, now time.Time) (fresh []bool, events []Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fresh = make([]bool, len(ms))
	present := make(map[ueKey]bool, len(ms))
	var arrived []ueKey
	for i := range ms {
		m := &ms[i]
		k := ueKey{m.BSID, m.RNTI}
		present[k] = true
		h := hash(m)
		u := t.ues[k]
		if u == nil {
			u = &ue{}
			t.ues[k] = u
			arrived = append(arrived, k)
		} else if m.SFNSF.Set && u.hash == h {
			u.lastSeen, u.missed = now, 0
			continue // the controller has not refreshed this UE since the last poll
		}
		fresh[i] = true
		events = t.measReport(events, u, m, now)
		events = t.erabChanges(events, u, m, now)
		u.m, u.hash, u.lastSeen, u.missed = *m, h, now, 0
	}
	events = t.arrivals(events, arrived, present, now)
	events = t.departures(events, present, now)
	return fresh, events
}

// arrivals turns new UEs into attach events, or into cell changes when the same subscriber
// (IMSI, else IP address) just left another cell.
func (t *Tracker) arrivals(events []Event, arrived []ueKey, present map[ueKey]bool, now time.Time) []Event {
	for _, k := range arrived {
		u := t.ues[k]
		if old, ok := t.leftCell(u.m, present); ok {
			prev := t.ues[old].m
			events = handedOver(events, k, t.ues[old].erabs)
			delete(t.ues, old)
			events = append(events, Event{Kind: CellChange, UE: u.m, Previous: &prev, TimeNs: now.UnixNano()})
			continue
		}
		events = append(events, Event{Kind: Attach, UE: u.m, TimeNs: now.UnixNano()})
	}
	return events
}

// handedOver drops the rab_est events of a UE that arrived by handover with those bearers:
// its E-RABs moved with it, none was established.
func handedOver(events []Event, k ueKey, erabs []meas.ERAB) []Event {
	out := events[:0]
	for _, e := range events {
		if e.Kind == RabEst && e.UE.BSID == k.bs && e.UE.RNTI == k.rnti {
			if _, moved := findERAB(erabs, e.ERAB.ID); moved {
				continue
			}
		}
		out = append(out, e)
	}
	return out
}

func (t *Tracker) leftCell(m meas.Measurement, present map[ueKey]bool) (ueKey, bool) {
	if m.IMSI == "" && !m.IPv4.IsValid() {
		return ueKey{}, false
	}
	for k, u := range t.ues {
		if present[k] || u.m.Cell == m.Cell {
			continue
		}
		if (m.IMSI != "" && u.m.IMSI == m.IMSI) || (m.IMSI == "" && u.m.IPv4 == m.IPv4) {
			return k, true
		}
	}
	return ueKey{}, false
}

func (t *Tracker) departures(events []Event, present map[ueKey]bool, now time.Time) []Event {
	var gone []ueKey
	for k, u := range t.ues {
		if present[k] {
			continue
		}
		u.missed++
		if u.missed >= 2 && now.Sub(u.lastSeen) >= t.detachAfter {
			gone = append(gone, k)
		}
	}
	sort.Slice(gone, func(a, b int) bool { return less(gone[a], gone[b]) })
	for _, k := range gone {
		u := t.ues[k]
		for _, e := range u.erabs {
			events = append(events, Event{Kind: RabRel, UE: u.m, ERAB: e, TimeNs: now.UnixNano()})
		}
		events = append(events, Event{Kind: Detach, UE: u.m, TimeNs: now.UnixNano()})
		delete(t.ues, k)
	}
	return events
}

// erabChanges announces an E-RAB when it is complete (its QCI known), or after QCIWait
// without one; an E-RAB announced without a QCI is announced again when its QCI arrives.
// An announced E-RAB that goes is released.
func (t *Tracker) erabChanges(events []Event, u *ue, m *meas.Measurement, now time.Time) []Event {
	announced := make([]meas.ERAB, 0, len(m.ERABs))
	for _, e := range m.ERABs {
		old, known := findERAB(u.erabs, e.ID)
		switch {
		case known && old.QCI.Set && e.QCI.Set && old.QCI.V != e.QCI.V:
			// The QoS of an established E-RAB changed: a modification (3GPP TS 36.413
			// E-RAB MODIFY), the only one a source shows (no bit rates are reported).
			events = append(events, Event{Kind: RabMod, UE: *m, ERAB: e, TimeNs: now.UnixNano()})
			announced = append(announced, e)
			continue
		case known && (old.QCI.Set || !e.QCI.Set):
			announced = append(announced, old) // nothing new to tell
			continue
		case !e.QCI.Set && !u.waitedFor(e.ID, now):
			continue // not complete yet: the QCI usually follows
		}
		delete(u.waiting, e.ID)
		events = append(events, Event{Kind: RabEst, UE: *m, ERAB: e, TimeNs: now.UnixNano()})
		announced = append(announced, e)
	}
	for _, e := range u.erabs {
		if _, still := findERAB(m.ERABs, e.ID); !still {
			events = append(events, Event{Kind: RabRel, UE: *m, ERAB: e, TimeNs: now.UnixNano()})
		}
	}
	for id := range u.waiting {
		if _, still := findERAB(m.ERABs, id); !still {
			delete(u.waiting, id)
		}
	}
	u.erabs = announced
	return events
}

// waitedFor tells whether E-RAB id has waited QCIWait for its QCI (it starts waiting now).
func (u *ue) waitedFor(id int64, now time.Time) bool {
	if u.waiting == nil {
		u.waiting = map[int64]time.Time{}
	}
	since, ok := u.waiting[id]
	if !ok {
		u.waiting[id] = now
		return false
	}
	return now.Sub(since) >= QCIWait
}

func findERAB(list []meas.ERAB, id int64) (meas.ERAB, bool) {
	for _, e := range list {
		if e.ID == id {
			return e, true
		}
	}
	return meas.ERAB{}, false
}

// measReport: a new RRC measurement (another measid, RSRP or RSRQ; -1 is "none yet").
func (t *Tracker) measReport(events []Event, u *ue, m *meas.Measurement, now time.Time) []Event {
	r := m.RRC
	if !r.RSRP.Set || !r.RSRQ.Set || r.RSRP.V == -1 {
		return events
	}
	old := u.m.RRC
	if old.MeasID == r.MeasID && old.RSRP == r.RSRP && old.RSRQ == r.RSRQ {
		return events
	}
	return append(events, Event{Kind: MeasRep, UE: *m, TimeNs: now.UnixNano()})
}

func less(a, b ueKey) bool { return a.bs < b.bs || (a.bs == b.bs && a.rnti < b.rnti) }

// Latest returns a copy of the latest measurement of every UE, ordered by cell and RNTI.
func (t *Tracker) Latest() []meas.Measurement {
	t.mu.RLock()
	out := make([]meas.Measurement, 0, len(t.ues))
	for _, u := range t.ues {
		out = append(out, u.m)
	}
	t.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool {
		if out[a].Cell != out[b].Cell {
			return out[a].Cell < out[b].Cell
		}
		return out[a].RNTI < out[b].RNTI
	})
	return out
}

// Count is the number of UEs known now.
func (t *Tracker) Count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.ues)
}

// hash covers what the RAN reported for the UE (not when the adapter saw it), FNV-1a.
func hash(m *meas.Measurement) uint64 {
	h := uint64(14695981039346656037)
	mix := func(v int64, set bool) { // a word at a time (FNV-1a's bytes cost 8 multiplies)
		if set {
			v ^= 1 << 62
		}
		h = (h ^ uint64(v)) * 0x9E3779B97F4A7C15
		h ^= h >> 29
	}
	for _, v := range []flexran.Int{m.SFNSF, m.WBCQI, m.DLMCS, m.DLTBS, m.DLPRBs, m.CellPRBs, m.PHR, m.HARQ,
		m.CellAllocPRBs, m.RRC.RSRP, m.RRC.RSRQ, m.RRC.MeasID} {
		mix(v.V, v.Set)
	}
	mix(int64(m.CellUEs), true)
	for _, q := range m.RLC {
		mix(q.LCID.V, q.LCID.Set)
		mix(q.TxQueue.V, q.TxQueue.Set)
		mix(q.TxHOL.V, q.TxHOL.Set)
	}
	return h
}
