package api

import (
	"net/http"
	"sort"
	"strconv"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// maxDropsPage bounds one read of the drop log.
const maxDropsPage = 10000

// DropEvent is one labelled drop as the API shows it.
type DropEvent struct {
	Seq    uint64 `json:"seq"`
	TimeNs int64  `json:"time_ns"`
	UE     string `json:"ue"`
	Cause  string `json:"cause"`
	FlowKey
	Bytes  int    `json:"bytes"`
	TCPSeq uint32 `json:"tcp_seq"`
	TCPLen int    `json:"tcp_len"`
}

// FlowKey is a 5-tuple.
type FlowKey struct {
	Src   string `json:"src"`
	Dst   string `json:"dst"`
	Proto uint8  `json:"proto"`
	Sport uint16 `json:"sport"`
	Dport uint16 `json:"dport"`
}

func flowKey(f ran.Flow) FlowKey {
	k := FlowKey{Proto: f.Proto, Sport: f.Sport, Dport: f.Dport}
	if f.Src.IsValid() {
		k.Src, k.Dst = f.Src.String(), f.Dst.String()
	}
	return k
}

// getDrops reads the drop log after a cursor: ?after=<seq>&limit=<n>.
func (s *Server) getDrops(w http.ResponseWriter, r *http.Request) {
	after, err := queryUint(r, "after", 0)
	if err != nil {
		problem(w, r, http.StatusBadRequest, "Bad Request", err.Error())
		return
	}
	limit, err := queryUint(r, "limit", 1000)
	if err != nil || limit < 1 || limit > maxDropsPage {
		problem(w, r, http.StatusBadRequest, "Bad Request", "limit must be an integer in 1.."+strconv.Itoa(maxDropsPage))
		return
	}
	drops, next, lost := s.emu.Truth.Since(after, int(limit))
	out := make([]DropEvent, 0, len(drops))
	for _, d := range drops {
		out = append(out, DropEvent{Seq: d.Seq, TimeNs: d.TimeNs, UE: d.UE, Cause: d.Cause.String(),
			FlowKey: flowKey(d.Flow), Bytes: d.Bytes, TCPSeq: d.TCPSeq, TCPLen: d.TCPLen})
	}
	writeJSON(w, map[string]any{"drops": out, "next": next, "lost": lost})
}

// getDropCounters is the drop counters per cause: in total, per UE and per flow.
func (s *Server) getDropCounters(w http.ResponseWriter, r *http.Request) {
	c := s.emu.Truth.Counts()
	ues := map[string]map[string]uint64{}
	for ue, n := range c.PerUE {
		ues[ue] = n.Map()
	}
	type flowCounts struct {
		FlowKey
		Drops map[string]uint64 `json:"drops"`
	}
	flows := make([]flowCounts, 0, len(c.PerFlow))
	for f, n := range c.PerFlow {
		flows = append(flows, flowCounts{flowKey(f), n.Map()})
	}
	sort.Slice(flows, func(i, j int) bool {
		a, b := flows[i].FlowKey, flows[j].FlowKey
		if a.Src != b.Src || a.Dst != b.Dst {
			return a.Src+a.Dst < b.Src+b.Dst
		}
		if a.Sport != b.Sport {
			return a.Sport < b.Sport
		}
		return a.Dport < b.Dport
	})
	writeJSON(w, map[string]any{"total": c.Total.Map(), "ues": ues, "flows": flows,
		"flows_overflow": c.FlowsOverflow, "last_seq": c.LastSeq})
}

func queryUint(r *http.Request, name string, def uint64) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &queryError{name}
	}
	return n, nil
}

type queryError struct{ name string }

func (e *queryError) Error() string { return e.name + " must be a non-negative integer" }
