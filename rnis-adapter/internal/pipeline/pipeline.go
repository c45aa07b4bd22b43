// Package pipeline wires the adapter: each poll's snapshot is normalized, checked against the
// previous poll (repeats, events), published on AMQP and passed to the MEC 012 notifier.
package pipeline

import (
	"encoding/json"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/feed"
	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/identity"
	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
)

// Publisher is the AMQP side (feed.Publisher).
type Publisher interface {
	Publish(batch []feed.Message) error
}

// EventSink receives every event (the MEC 012 notifier).
type EventSink interface {
	Events(events []uestate.Event)
}

// What measurement messages a Pipeline publishes (RNIS_AMQP_PUBLISH).
const (
	PublishUE   = "ue"   // one message per UE per poll: rnis.v1.meas.<cell>.<imsi>.<ipv4>
	PublishCell = "cell" // one message per cell per poll with its UEs: rnis.v1.cell.<cell>
	PublishBoth = "both"
)

// Pipeline processes snapshots; it is used by the poller goroutine only.
type Pipeline struct {
	UEs     *identity.Book  // UE addresses: configured, reported, learned across re-attaches
	Clock   *ranclock.Clock // dates the reports and measures the TTI rate (one per source)
	Tracker *uestate.Tracker
	Pub     Publisher
	Sink    EventSink
	Metrics *obs.Metrics
	Publish string // PublishUE (also when empty), PublishCell or PublishBoth

	arena []byte
	batch []feed.Message
	fresh []meas.Measurement // this poll's measurements that are not repeats
}

// Handle processes one snapshot observed at the given time.
func (p *Pipeline) Handle(s *flexran.Snapshot, observed time.Time) {
	var ips meas.Resolver
	if p.UEs != nil {
		p.UEs.Poll(meas.Sightings(s), observed)
		ips = p.UEs
	}
	ms := meas.Normalize(s, observed, ips, p.Clock)
	fresh, events := p.Tracker.Update(ms, observed)
	p.arena, p.batch, p.fresh = p.arena[:0], p.batch[:0], p.fresh[:0]
	for i := range ms {
		if fresh[i] {
			p.fresh = append(p.fresh, ms[i])
		}
	}
	repeats := len(ms) - len(p.fresh)
	if p.Publish != PublishCell {
		p.addUEMessages()
	}
	if p.Publish == PublishCell || p.Publish == PublishBoth {
		p.addCellMessages()
	}
	counts := map[string]int{}
	for _, e := range events {
		counts[string(e.Kind)]++
		if e.Kind.Feed() {
			p.batch = append(p.batch, EventMessage(e))
		}
	}
	if len(p.batch) > 0 && p.Pub != nil {
		_ = p.Pub.Publish(p.batch) // failures are counted and shown in health by the publisher
	}
	if len(events) > 0 && p.Sink != nil {
		p.Sink.Events(events)
	}
	if p.Metrics != nil {
		p.Metrics.Poll(len(ms), repeats, p.Tracker.Count(), counts)
	}
}

// addUEMessages adds one message per fresh measurement.
func (p *Pipeline) addUEMessages() {
	for i := range p.fresh {
		m := &p.fresh[i]
		start := len(p.arena)
		p.arena = m.AppendJSON(p.arena)
		p.batch = append(p.batch, feed.Message{Key: m.RoutingKey(), Body: p.arena[start:len(p.arena):len(p.arena)], Kind: feed.KindMeas})
	}
}

// addCellMessages adds one message per cell with the cell's fresh measurements. Normalize
// lists a station's UEs together, and a station's cells are few: the cells are found by
// scanning, in the order they first appear.
func (p *Pipeline) addCellMessages() {
	ms := p.fresh
	for len(ms) > 0 {
		cell := ms[0].Cell
		// move this cell's measurements to the front, keeping their order
		n := 1
		for i := 1; i < len(ms); i++ {
			if ms[i].Cell == cell {
				ms[n], ms[i] = ms[i], ms[n]
				n++
			}
		}
		start := len(p.arena)
		p.arena = meas.AppendCellJSON(p.arena, ms[:n])
		p.batch = append(p.batch, feed.Message{Key: meas.CellRoutingKey(cell), Body: p.arena[start:len(p.arena):len(p.arena)], Kind: feed.KindCell})
		ms = ms[n:]
	}
}

// eventBody is mec_common.bus.rnis.RnisEvent.
type eventBody struct {
	SchemaVersion int     `json:"schema_version"`
	Event         string  `json:"event"`
	Cell          string  `json:"cell"`
	BSID          int64   `json:"bs_id"`
	PhyCellID     *int64  `json:"phy_cell_id"`
	RNTI          int64   `json:"rnti"`
	IMSI          *string `json:"imsi"`
	UEIPv4        *string `json:"ue_ipv4"`
	PreviousCell  *string `json:"previous_cell"`
	TimeNs        int64   `json:"time_ns"`
}

// EventMessage is the AMQP message of an attach, detach or cell change.
func EventMessage(e uestate.Event) feed.Message {
	m := &e.UE
	b := eventBody{SchemaVersion: meas.SchemaVersion, Event: string(e.Kind), Cell: m.Cell, BSID: m.BSID,
		RNTI: m.RNTI, TimeNs: e.TimeNs}
	if m.PhyCellID.Set {
		b.PhyCellID = &m.PhyCellID.V
	}
	if m.IMSI != "" {
		b.IMSI = &m.IMSI
	}
	if m.IPv4.IsValid() {
		ip := m.IPv4.String()
		b.UEIPv4 = &ip
	}
	if e.Previous != nil {
		b.PreviousCell = &e.Previous.Cell
	}
	body, _ := json.Marshal(b) // cannot fail: plain values
	return feed.Message{Key: meas.EventRoutingKey(string(e.Kind), m.Cell, m.IMSI, m.IPv4), Body: body, Kind: feed.KindEvent}
}
