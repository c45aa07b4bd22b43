// Package identity keeps which IPv4 address each UE has, across re-attaches and restarts.
//
// A RAN names a UE by a short-lived id: the C-RNTI in a base station (FlexRAN), the RAN UE
// id in a node (E2). Both change on every re-attach, and a restarted eNB reuses or changes
// its bs_id. Without a core (OAI noS1) there is no IMSI either, so a map from RNTI to
// address (RNIS_IP_MAP "rnti") went stale on the first re-attach and the PEP lost its radio
// data. The book learns instead:
//
//   - from what the source says: an IMSI (the address map's "imsi"), an address the source
//     reports itself (the RAN emulator's ueIpv4), or a configured <station>/<ue id>; or the
//     configured address of a station's only UE (<station>/*) when exactly one of its UEs
//     has no other evidence (a one-UE testbed without a core: no IMSI, a new RNTI each time);
//   - by succession: when a UE with a known address has gone and, within Window, exactly
//     one UE without an address appears (anywhere: an eNB that restarted may come back with
//     another bs_id), the newcomer is the same device and takes the address. The address
//     stays with the device, not with the RNTI: true in noS1 (the UE's address is its own
//     configuration) and with a core (the PDN address is kept across a re-attach to the
//     same APN; when the core gives a new one, its IMSI is known and the map's "imsi" wins).
//     Two UEs re-attaching at once are ambiguous: nobody inherits, and it is logged and
//     counted.
//
// What was learned is saved (STATE_DIR/rnis-ue-identity.json) so that an adapter restart
// keeps it. The book is source-neutral: a FlexRAN and an E2 source both report Sightings.
package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sort"
	"sync"
	"time"

	"mts.invalid/suite/services/common/go/svc"
)

// Key names a UE in a RAN source: base station (bs_id, E2 node) and its id there (RNTI).
type Key struct {
	Station int64 `json:"station"`
	UE      int64 `json:"ue"`
}

// Sighting is one UE in one poll and what the source says about its identity.
type Sighting struct {
	Key  Key
	IMSI string     // "" when unknown
	Addr netip.Addr // reported by the source itself; invalid when not
}

// Static is the configured evidence (ipmap.Map); nil means none.
type Static interface {
	Lookup(imsi string, bsID, rnti int64) netip.Addr
	// SoleUE is the address of a station's only UE without other evidence (IP map <bs_id>/*)
	SoleUE(bsID int64) netip.Addr
}

// Window is how long a departed UE's address waits for its successor.
const Window = 60 * time.Second

type binding struct {
	Key     Key        `json:"key"`
	Addr    netip.Addr `json:"ipv4"`
	IMSI    string     `json:"imsi,omitempty"`
	How     string     `json:"learned_from"`
	LeftAt  time.Time  `json:"left_at,omitzero"` // zero while the UE is present
	present bool
}

// Book is safe for concurrent use (the poller writes, the REST API reads).
type Book struct {
	static        Static
	file          string // "" = not saved
	log           *slog.Logger
	mu            sync.RWMutex
	bound         map[Key]*binding
	departed      []*binding // gone with an address, newest last, within Window
	ambiguous     int
	lastAmbiguity [2]int
}

// New returns a book with the configured evidence, loading what an earlier run learned
// from file (if file is set and exists). An unreadable file is an error.
func New(static Static, file string, log *slog.Logger) (*Book, error) {
	b := &Book{static: static, file: file, log: log, bound: map[Key]*binding{}}
	if file == "" {
		return b, nil
	}
	raw, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	var saved []*binding
	if err := json.Unmarshal(raw, &saved); err != nil {
		return nil, fmt.Errorf("%s: not a list of learned UE addresses: %w", file, err)
	}
	for _, s := range saved {
		if s.Addr.Is4() {
			// not seen yet in this run: present again at the first poll, or a predecessor
			b.bound[s.Key] = s
		}
	}
	return b, nil
}

// Lookup implements meas.Resolver: the address of the UE, invalid when unknown.
func (b *Book) Lookup(imsi string, bsID, rnti int64) netip.Addr {
	if b.static != nil {
		if a := b.static.Lookup(imsi, bsID, rnti); a.IsValid() {
			return a
		}
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if s := b.bound[Key{bsID, rnti}]; s != nil {
		return s.Addr
	}
	return netip.Addr{}
}

// Ambiguous is how many arrivals could not inherit an address because several UEs came or
// went at once.
func (b *Book) Ambiguous() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.ambiguous
}

// Poll records the UEs of one poll (every station of the source) at time now.
func (b *Book) Poll(seen []Sighting, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	changed := false
	present := make(map[Key]bool, len(seen))
	var newcomers []Sighting
	for _, s := range seen {
		present[s.Key] = true
		addr, how := b.evidence(s)
		cur := b.bound[s.Key]
		switch {
		case addr.IsValid() && (cur == nil || cur.Addr != addr):
			b.bind(s, addr, how)
			changed = true
		case cur != nil:
			changed = changed || !cur.present
			cur.present, cur.LeftAt = true, time.Time{}
		default:
			newcomers = append(newcomers, s)
		}
	}
	changed = b.departures(present, now) || changed
	newcomers = b.soleUEs(newcomers)
	changed = b.successions(newcomers) || changed
	if changed {
		b.save()
	}
}

// evidence is what the source or the configuration says about a sighting's address.
func (b *Book) evidence(s Sighting) (netip.Addr, string) {
	if s.Addr.IsValid() {
		return s.Addr, "source"
	}
	if b.static != nil {
		if a := b.static.Lookup(s.IMSI, s.Key.Station, s.Key.UE); a.IsValid() {
			return a, "ip_map"
		}
	}
	return netip.Addr{}, ""
}

func (b *Book) bind(s Sighting, addr netip.Addr, how string) {
	b.bound[s.Key] = &binding{Key: s.Key, Addr: addr, IMSI: s.IMSI, How: how, present: true}
	b.dropDeparted(addr) // the device is back under this key
}

// departures moves the UEs that are no longer reported to the departed list (their address
// waits for a successor) and forgets departed ones older than Window.
func (b *Book) departures(present map[Key]bool, now time.Time) bool {
	changed := false
	for k, s := range b.bound {
		if present[k] {
			continue
		}
		delete(b.bound, k)
		if s.LeftAt.IsZero() {
			s.LeftAt = now
		}
		s.present = false
		b.dropDeparted(s.Addr)
		b.departed = append(b.departed, s)
		changed = true
	}
	kept := b.departed[:0]
	for _, s := range b.departed {
		if now.Sub(s.LeftAt) <= Window {
			kept = append(kept, s)
		} else {
			changed = true
		}
	}
	b.departed = kept
	return changed
}

func (b *Book) dropDeparted(addr netip.Addr) {
	kept := b.departed[:0]
	for _, s := range b.departed {
		if s.Addr != addr {
			kept = append(kept, s)
		}
	}
	b.departed = kept
}

// soleUEs binds the configured <station>/* address to a station's only newcomer, when no
// other UE of the station holds it; it returns the newcomers still without an address.
func (b *Book) soleUEs(newcomers []Sighting) []Sighting {
	if b.static == nil {
		return newcomers
	}
	perStation := map[int64]int{}
	for _, n := range newcomers {
		perStation[n.Key.Station]++
	}
	rest := newcomers[:0]
	for _, n := range newcomers {
		addr := b.static.SoleUE(n.Key.Station)
		if addr.IsValid() && perStation[n.Key.Station] == 1 && !b.holds(n.Key.Station, addr) {
			b.bind(n, addr, "ip_map (sole UE)")
			continue
		}
		rest = append(rest, n)
	}
	return rest
}

// holds tells whether a present UE of station already has addr.
func (b *Book) holds(station int64, addr netip.Addr) bool {
	for k, s := range b.bound {
		if k.Station == station && s.Addr == addr {
			return true
		}
	}
	return false
}

// successions gives a departed UE's address to its successor: by IMSI when both have one,
// else when exactly one UE without an address arrived and exactly one address is waiting.
func (b *Book) successions(newcomers []Sighting) bool {
	changed := false
	rest := newcomers[:0]
	for _, n := range newcomers {
		if d := b.departedIMSI(n.IMSI); d != nil {
			b.inherit(n, d, "succession (same IMSI)")
			changed = true
			continue
		}
		rest = append(rest, n)
	}
	switch {
	case len(rest) == 0 || len(b.departed) == 0:
	case len(rest) == 1 && len(b.departed) == 1 && compatible(rest[0], b.departed[0]):
		b.inherit(rest[0], b.departed[0], "succession")
		changed = true
	case b.lastAmbiguity != [2]int{len(rest), len(b.departed)}: // said once per situation
		b.lastAmbiguity = [2]int{len(rest), len(b.departed)}
		b.ambiguous++
		b.log.Warn("UEs without an address arrived while several addresses wait for a successor: none inherits",
			"arrived", len(rest), "waiting", len(b.departed))
	}
	return changed
}

func (b *Book) departedIMSI(imsi string) *binding {
	if imsi == "" {
		return nil
	}
	for _, d := range b.departed {
		if d.IMSI == imsi {
			return d
		}
	}
	return nil
}

// compatible: two different IMSIs are two devices.
func compatible(n Sighting, d *binding) bool { return n.IMSI == "" || d.IMSI == "" || n.IMSI == d.IMSI }

func (b *Book) inherit(n Sighting, d *binding, how string) {
	b.bind(n, d.Addr, how)
	b.log.Info("UE address learned", "ipv4", d.Addr.String(), "station", n.Key.Station, "ue", n.Key.UE,
		"previous_station", d.Key.Station, "previous_ue", d.Key.UE, "how", how)
}

// save writes what was learned (present and waiting) atomically; a failure is logged (the
// book works on, an adapter restart would then relearn).
func (b *Book) save() {
	if b.file == "" {
		return
	}
	list := make([]*binding, 0, len(b.bound)+len(b.departed))
	for _, s := range b.bound {
		list = append(list, s)
	}
	list = append(list, b.departed...)
	sort.Slice(list, func(i, j int) bool {
		return list[i].Key.Station < list[j].Key.Station || (list[i].Key.Station == list[j].Key.Station && list[i].Key.UE < list[j].Key.UE)
	})
	raw, _ := json.MarshalIndent(list, "", " ") // plain values: cannot fail
	if err := svc.WriteFileAtomic(b.file, raw); err != nil {
		b.log.Warn("could not save the learned UE addresses", "file", b.file, "err", err)
	}
}
