package api

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

var statTypes = map[string]bool{"all": true, "enb_config": true, "mac_stats": true}

func statType(r *http.Request) (string, bool) {
	t := r.PathValue("type")
	if t == "" {
		t = "all"
	}
	return t, statTypes[t]
}

func (s *Server) statsAll(w http.ResponseWriter, r *http.Request) {
	typ, ok := statType(r)
	if !ok {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid statistics type")
		return
	}
	writeRaw(w, s.flex.stats(typ, nil, nil))
}

// cellIndex resolves a FlexRAN BS id: -1 = the last added agent, below 1000 an agent
// id, otherwise a bs_id in decimal or 0x hexadecimal. ok is false if none matches.
func (s *Server) cellIndex(id string) (int, bool) {
	cells := s.emu.Cells
	if id == "" || id == "-1" {
		return len(cells) - 1, true
	}
	v, err := strconv.ParseInt(id, 0, 64)
	if err != nil || v < 0 {
		return 0, false
	}
	if v < 1000 {
		return int(v), int(v) < len(cells)
	}
	for i, c := range cells {
		if c.Cfg.BSID == uint64(v) {
			return i, true
		}
	}
	return 0, false
}

func (s *Server) statsENB(w http.ResponseWriter, r *http.Request) {
	typ, ok := statType(r)
	if !ok {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid statistics type")
		return
	}
	i, ok := s.cellIndex(r.PathValue("id"))
	if !ok {
		problem(w, r, http.StatusBadRequest, "Bad Request", "can not find agent")
		return
	}
	writeRaw(w, s.flex.stats(typ, []int{i}, nil))
}

func (s *Server) statsUE(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("ue")
	if _, err := strconv.ParseUint(id, 10, 64); err != nil {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid UE ID")
		return
	}
	sel := &ueSelector{imsi: id}
	if len(id) < 6 {
		sel = &ueSelector{rnti: atoi(id)}
	}
	var cells []int
	for i, c := range s.emu.Cells {
		if enb := r.PathValue("id"); enb != "" {
			if k, ok := s.cellIndex(enb); !ok || k != i {
				continue
			}
		}
		for _, b := range c.Bearers() {
			if sel.match(b) {
				cells = append(cells, i)
				break
			}
		}
	}
	if len(cells) == 0 {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid UE ID")
		return
	}
	writeRaw(w, s.flex.stats("all", cells, sel))
}

func (s *Server) getStatsConf(w http.ResponseWriter, r *http.Request) {
	i, ok := s.cellIndex(r.PathValue("id"))
	if !ok {
		problem(w, r, http.StatusBadRequest, "Bad Request", "can not find agent")
		return
	}
	writeJSON(w, ran.StatsConfRequest{Reports: []ran.StatsConf{s.emu.Cells[i].StatsConf()}})
}

// postStatsConf sets the reporting period: the snapshot /stats serves is refreshed
// every sf ms (FLSRF_PERIODICAL), every TTI (FLSRF_CONTINUOUS), once, or never again.
func (s *Server) postStatsConf(w http.ResponseWriter, r *http.Request) {
	i, ok := s.cellIndex(r.PathValue("id"))
	if !ok {
		problem(w, r, http.StatusBadRequest, "Bad Request", "can not find agent")
		return
	}
	var req ran.StatsConfRequest
	if err := decodeStrict(r, &req); err != nil {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid statistics configuration: "+err.Error())
		return
	}
	if err := req.Validate(); err != nil {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid statistics configuration: "+err.Error())
		return
	}
	s.emu.Cells[i].SetStatsConf(req.Reports[0])
	writeJSON(w, req)
}

func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON object")
	}
	return nil
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.emu.Cfg) }

// CellState is a cell in the control API.
type CellState struct {
	BSID        uint64        `json:"bs_id"`
	RAT         string        `json:"rat"`
	PRB         int           `json:"prb"`
	TTIs        int64         `json:"ttis"`
	PRBUsedLast int64         `json:"prb_used_last_tti"`
	StatsConf   ran.StatsConf `json:"stats_conf"`
}

func (s *Server) getCells(w http.ResponseWriter, r *http.Request) {
	out := []CellState{}
	for _, c := range s.emu.Cells {
		out = append(out, CellState{BSID: c.Cfg.BSID, RAT: c.Cfg.RAT, PRB: c.Cfg.PRB, TTIs: c.TTI.Load(),
			PRBUsedLast: c.PRBUsedLast.Load(), StatsConf: c.StatsConf()})
	}
	writeJSON(w, out)
}

// BearerState is a UE on one cell: identity, channel and ground-truth counters.
type BearerState struct {
	UE         string         `json:"ue"`
	IMSI       string         `json:"imsi"`
	BSID       uint64         `json:"bs_id"`
	RNTI       uint16         `json:"rnti"`
	IP         string         `json:"ip"`
	Channel    ChannelState   `json:"channel"`
	QueueBytes int            `json:"queue_bytes"` // RLC queue at the end of TTI queue_tti
	QueueTTI   int64          `json:"queue_tti"`
	InboxBytes int            `json:"inbox_bytes"` // read from the TUN, not yet in the RLC queue
	Counters   map[string]any `json:"counters"`
	UplinkMAC  *UplinkMAC     `json:"ul_mac,omitempty"` // with the cell's uplink MAC only
}

// UplinkMAC is a UE's uplink on a cell with an uplink MAC: its modem buffer (ground
// truth), uplink channel, HARQ counters and grant feed.
type UplinkMAC struct {
	BufferBytes     int                `json:"buffer_bytes"` // the UE's modem buffer at the end of TTI buffer_tti
	BufferTTI       int64              `json:"buffer_tti"`
	BufferDropPkts  uint64             `json:"buffer_drop_pkts"` // the modem buffer was full
	CQI             int                `json:"cqi"`              // uplink channel of the last TTI
	BLER            float64            `json:"bler"`
	HARQTx          uint64             `json:"harq_tx"`
	HARQRetx        uint64             `json:"harq_retx"`
	HARQFailures    uint64             `json:"harq_failures"`
	TBBytes         uint64             `json:"tb_bytes"`
	PRBs            uint64             `json:"prbs"`
	ResidualLostPkt uint64             `json:"residual_lost_pkts"` // RLC UM: a TB failed every HARQ attempt
	GrantFeed       ran.GrantFeedStats `json:"grant_feed"`
}

func uplinkMAC(b *ran.Bearer) *UplinkMAC {
	up := b.Uplink()
	if up == nil {
		return nil
	}
	c, last := &up.C, up.Channel().Last()
	return &UplinkMAC{BufferBytes: up.QueueBytes(), BufferTTI: up.QueueTTI(),
		BufferDropPkts: c.DLQueueDropPkts.Load(), CQI: last.CQI, BLER: last.BLER,
		HARQTx: c.TBs.Load(), HARQRetx: c.TBRetx.Load(), HARQFailures: c.TBFailures.Load(),
		TBBytes: c.TBBytes.Load(), PRBs: c.PRBs.Load(), ResidualLostPkt: c.DLResidualLostPkts.Load(),
		GrantFeed: up.GrantFeedStats()}
}

// ChannelState is the channel of the last TTI.
type ChannelState struct {
	Model        string  `json:"model"`
	CQI          int     `json:"cqi"`
	BLER         float64 `json:"bler"`
	Loss         float64 `json:"loss"`
	CapacityMbps float64 `json:"capacity_mbps"`
	LoS          bool    `json:"los"`
	Blocked      bool    `json:"blocked"`
}

func bearerState(b *ran.Bearer) BearerState {
	last := b.Channel().Last()
	c := &b.C
	return BearerState{UE: b.UE.Cfg.Name, IMSI: b.UE.Cfg.IMSI, BSID: b.Cell.Cfg.BSID, RNTI: b.Cfg.RNTI,
		IP: b.Cfg.IP.String(), QueueBytes: b.QueueBytes(), QueueTTI: b.QueueTTI(), InboxBytes: b.InboxBytes(),
		Channel: ChannelState{Model: b.Cfg.Channel.Model, CQI: last.CQI, BLER: last.BLER, Loss: last.Loss,
			CapacityMbps: last.CapacityMbps, LoS: last.LoS, Blocked: b.Channel().Blocked()},
		Counters: map[string]any{
			"dl_arrived_pkts": c.DLArrivedPkts.Load(), "dl_arrived_bytes": c.DLArrivedBytes.Load(),
			"dl_queue_drop_pkts": c.DLQueueDropPkts.Load(), "dl_queue_drop_bytes": c.DLQueueDropBytes.Load(),
			"dl_aqm_drop_pkts": c.DLAQMDropPkts.Load(), "dl_aqm_drop_bytes": c.DLAQMDropBytes.Load(),
			"dl_delivered_pkts": c.DLDeliveredPkts.Load(), "dl_delivered_bytes": c.DLDeliveredBytes.Load(),
			"dl_residual_lost_pkts": c.DLResidualLostPkts.Load(), "dl_channel_loss_pkts": c.DLChannelLossPkts.Load(),
			"harq_tx": c.TBs.Load(), "harq_retx": c.TBRetx.Load(), "harq_failures": c.TBFailures.Load(),
			"tb_bytes": c.TBBytes.Load(), "prbs": c.PRBs.Load(),
			"ul_arrived_pkts": c.ULArrivedPkts.Load(), "ul_arrived_bytes": c.ULArrivedBytes.Load(),
			"ul_drop_pkts": c.ULDropPkts.Load(), "ul_delivered_pkts": c.ULDeliveredPkts.Load(),
			"ul_delivered_bytes": c.ULDeliveredBytes.Load(), "ul_spoofed_pkts": c.ULSpoofedPkts.Load(),
		},
		UplinkMAC: uplinkMAC(b)}
}

func (s *Server) getBearers(w http.ResponseWriter, r *http.Request) {
	out := []BearerState{}
	for _, b := range s.emu.Bearers() {
		out = append(out, bearerState(b))
	}
	writeJSON(w, out)
}

// bearer finds a UE (by name, IMSI or index) on a cell (by bs_id).
func (s *Server) bearer(w http.ResponseWriter, r *http.Request) *ran.Bearer {
	ue, bs := r.PathValue("ue"), r.PathValue("bs")
	for _, u := range s.emu.UEs {
		if u.Cfg.Name != ue && u.Cfg.IMSI != ue && strconv.Itoa(u.Index) != ue {
			continue
		}
		for _, b := range u.Bearers {
			if strconv.FormatUint(b.Cell.Cfg.BSID, 10) == bs {
				return b
			}
		}
		problem(w, r, http.StatusNotFound, "Not Found", fmt.Sprintf("UE %q is not attached to cell %q", ue, bs))
		return nil
	}
	problem(w, r, http.StatusNotFound, "Not Found", fmt.Sprintf("no UE %q", ue))
	return nil
}

func (s *Server) getBearer(w http.ResponseWriter, r *http.Request) {
	if b := s.bearer(w, r); b != nil {
		writeJSON(w, bearerState(b))
	}
}

// patchChannel changes a UE's channel at run time: fixed CQI (or back to the model),
// blockage, BLER, residual loss, capacity. Invalid input changes nothing.
func (s *Server) patchChannel(w http.ResponseWriter, r *http.Request) {
	if b := s.bearer(w, r); b != nil {
		s.applyChannel(w, r, b, b.Channel())
	}
}

// patchULChannel changes the uplink channel of a UE on a cell with an uplink MAC.
func (s *Server) patchULChannel(w http.ResponseWriter, r *http.Request) {
	b := s.bearer(w, r)
	if b == nil {
		return
	}
	if b.Uplink() == nil {
		problem(w, r, http.StatusNotFound, "Not Found", fmt.Sprintf("cell %d has no uplink MAC", b.Cell.Cfg.BSID))
		return
	}
	s.applyChannel(w, r, b, b.Uplink().Channel())
}

func (s *Server) applyChannel(w http.ResponseWriter, r *http.Request, b *ran.Bearer, ch *ran.Channel) {
	var o ran.ChannelOverride
	if err := decodeStrict(r, &o); err != nil {
		problem(w, r, http.StatusBadRequest, "Bad Request", "invalid channel change: "+err.Error())
		return
	}
	if err := ch.Apply(o); err != nil {
		problem(w, r, http.StatusUnprocessableEntity, "Unprocessable Entity", err.Error())
		return
	}
	writeJSON(w, bearerState(b))
}

// TimingState is the TTI clock's punctuality.
type TimingState struct {
	Ticks   uint64  `json:"ticks"`
	Skipped uint64  `json:"skipped"`
	P50us   int64   `json:"lateness_p50_us"`
	P90us   int64   `json:"lateness_p90_us"`
	P99us   int64   `json:"lateness_p99_us"`
	P999us  int64   `json:"lateness_p999_us"`
	MaxUs   int64   `json:"lateness_max_us"`
	TickUs  float64 `json:"tick_us"`
}

func (s *Server) timing() TimingState {
	t := &s.emu.Timing
	return TimingState{Ticks: t.Ticks.Load(), Skipped: t.Skipped.Load(), P50us: t.Percentile(0.5),
		P90us: t.Percentile(0.9), P99us: t.Percentile(0.99), P999us: t.Percentile(0.999),
		MaxUs: t.MaxNs.Load() / 1000, TickUs: float64(s.emu.TickNs()) / 1000}
}

func (s *Server) getTiming(w http.ResponseWriter, r *http.Request) { writeJSON(w, s.timing()) }

func (s *Server) resetTiming(w http.ResponseWriter, r *http.Request) {
	s.emu.Timing.Reset()
	writeJSON(w, s.timing())
}

func (s *Server) getWAN(w http.ResponseWriter, r *http.Request) {
	out := []map[string]any{}
	for _, d := range s.emu.WAN() {
		dir := map[string]any{"direction": d.Name, "arrived_pkts": d.Pkts.Load(),
			"arrived_bytes": d.Bytes.Load(), "drop_pkts": d.Drops.Load(), "delivered_pkts": d.DelivPkts.Load(),
			"reordered_pkts": d.Reordered.Load()}
		if a := d.AQMStats(); a != nil {
			dir["dualpi2"] = a
		}
		out = append(out, dir)
	}
	writeJSON(w, out)
}

// metrics is the Prometheus text exposition.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	t := s.timing()
	fmt.Fprintf(w, "# HELP emulator_tti_lateness_us How late TTI ticks start (µs).\n# TYPE emulator_tti_lateness_us summary\n")
	for _, q := range []struct {
		q string
		v int64
	}{{"0.5", t.P50us}, {"0.9", t.P90us}, {"0.99", t.P99us}, {"0.999", t.P999us}} {
		fmt.Fprintf(w, "emulator_tti_lateness_us{quantile=%q} %d\n", q.q, q.v)
	}
	fmt.Fprintf(w, "emulator_tti_lateness_us_count %d\n", t.Ticks)
	fmt.Fprintf(w, "# TYPE emulator_ticks_skipped_total counter\nemulator_ticks_skipped_total %d\n", t.Skipped)
	fmt.Fprintf(w, "# TYPE emulator_unknown_destination_total counter\nemulator_unknown_destination_total %d\n", s.emu.UnknownDst.Load())
	fmt.Fprintf(w, "# TYPE emulator_write_errors_total counter\nemulator_write_errors_total %d\n", s.emu.WriteErrors.Load())
	drops := s.emu.Truth.Counts().PerUE
	fmt.Fprintf(w, "# HELP emulator_drops_total Dropped packets by UE and cause (radio, overflow, aqm, wan).\n# TYPE emulator_drops_total counter\n")
	for _, ue := range sortedKeys(drops) {
		n := drops[ue]
		byCause := n.Map()
		for _, cause := range sortedKeys(byCause) {
			fmt.Fprintf(w, "emulator_drops_total{ue=%q,cause=%q} %d\n", ue, cause, byCause[cause])
		}
	}
	states := []BearerState{}
	for _, b := range s.emu.Bearers() {
		states = append(states, bearerState(b))
	}
	if len(states) == 0 {
		return
	}
	fmt.Fprintf(w, "# TYPE emulator_queue_bytes gauge\n")
	for _, st := range states {
		fmt.Fprintf(w, "emulator_queue_bytes{%s} %d\n", labels(st), st.QueueBytes)
	}
	fmt.Fprintf(w, "# TYPE emulator_cqi gauge\n")
	for _, st := range states {
		fmt.Fprintf(w, "emulator_cqi{%s} %d\n", labels(st), st.Channel.CQI)
	}
	for _, name := range sortedKeys(states[0].Counters) {
		fmt.Fprintf(w, "# TYPE emulator_%s_total counter\n", name)
		for _, st := range states {
			fmt.Fprintf(w, "emulator_%s_total{%s} %v\n", name, labels(st), st.Counters[name])
		}
	}
}

func labels(st BearerState) string {
	return fmt.Sprintf("ue=%q,imsi=%q,bs_id=\"%d\",rnti=\"%d\"", st.UE, st.IMSI, st.BSID, st.RNTI)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func esc(s string) string { return html.EscapeString(s) }

func atoi(s string) int {
	v, _ := strconv.Atoi(strings.TrimSpace(s))
	return v
}
