// Package mec012 serves the ETSI GS MEC 012 Radio Network Information API (v2) from the
// adapter's latest measurements: queries (layer2_meas, rab_info, plmn_info), subscriptions
// with notifications by HTTP POST or over a websocket, and the extension /queries/ext/ran_meas with the raw values
// MEC 012 has no field for. Errors are ProblemDetails.
package mec012

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/svc"
)

// Base is the API's base path.
const Base = "/rni/v2"

// Config of the API.
type Config struct {
	PublicURL         string // base URL clients use; links are built from it
	SubscriptionsFile string // where subscriptions persist across restarts ("": memory only)
	NotifyTimeout     time.Duration
	MaxSubsPerApp     int // subscriptions per app instance (0: 100)
	Tokens            []string
	Verifiers         []auth.Verifier // more ways to accept a token (platform-issued JWTs)
	AppInstanceID     string          // the adapter's own app instance on the platform ("": none)
}

// Server is the MEC 012 API and the notifier of its subscriptions.
type Server struct {
	cfg      Config
	auth     []auth.Verifier
	tracker  *uestate.Tracker
	metrics  *obs.Metrics
	log      *slog.Logger
	subs     *store
	notifier *notifier
	sockets  *sockets // the open websockets of subscriptions that asked for one
	known    sync.Map // app instance ids this RNIS knows exist: its own and its callers'
}

// New returns the API with the subscriptions saved in cfg.SubscriptionsFile; Routes mounts
// it and Run delivers notifications.
func New(cfg Config, tracker *uestate.Tracker, metrics *obs.Metrics, log *slog.Logger) (*Server, error) {
	if cfg.NotifyTimeout <= 0 {
		cfg.NotifyTimeout = 2 * time.Second
	}
	if cfg.MaxSubsPerApp <= 0 {
		cfg.MaxSubsPerApp = 100
	}
	s := &Server{cfg: cfg, auth: append([]auth.Verifier{auth.StaticTokens(cfg.Tokens)}, cfg.Verifiers...), tracker: tracker, metrics: metrics, log: log,
		subs: newStore(cfg.PublicURL, cfg.SubscriptionsFile), sockets: newSockets()}
	if err := s.subs.load(log); err != nil {
		return nil, fmt.Errorf("subscriptions: %w", err)
	}
	s.notifier = newNotifier(s.subs, s.sockets, cfg.NotifyTimeout, metrics, log)
	return s, nil
}

// Routes mounts the API, the OpenAPI document and /docs.
func (s *Server) Routes(mux *http.ServeMux) {
	doc, err := OpenAPI(s.cfg.PublicURL)
	if err != nil {
		panic(err) // the embedded spec is part of the binary; tests load it
	}
	if err := docsRoutes(mux, doc); err != nil {
		panic(err)
	}
	routes := map[string]http.HandlerFunc{
		"GET /queries/layer2_meas":                  s.layer2Meas,
		"GET /queries/rab_info":                     s.rabInfo,
		"GET /queries/plmn_info":                    s.plmnInfo,
		"GET /queries/ext/ran_meas":                 s.extRanMeas,
		"GET /subscriptions":                        s.listSubscriptions,
		"POST /subscriptions":                       s.createSubscription,
		"GET /subscriptions/{subscriptionId}":       s.getSubscription,
		"PUT /subscriptions/{subscriptionId}":       s.putSubscription,
		"DELETE /subscriptions/{subscriptionId}":    s.deleteSubscription,
		"GET " + websocketPath + "{subscriptionId}": s.serveWebsocket,
	}
	for pattern, h := range routes {
		method, path, _ := strings.Cut(pattern, " ")
		mux.Handle(method+" "+Base+path, s.authorized(h))
	}
	mux.Handle(Base+"/", s.authorized(func(w http.ResponseWriter, r *http.Request) {
		problem(w, r, http.StatusNotFound, "no such resource in the RNI API: "+r.URL.Path)
	}))
}

// Run delivers notifications and expires subscriptions until ctx ends.
func (s *Server) Run(ctx context.Context) { s.notifier.run(ctx) }

// Events implements pipeline.EventSink.
func (s *Server) Events(events []uestate.Event) { s.notifier.enqueue(events) }

func (s *Server) authorized(h http.HandlerFunc) http.Handler { return svc.Authorized("rni", s.auth, h) }

func problem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	svc.Problem(w, r, status, detail)
}

func writeJSON(w http.ResponseWriter, status int, v any) { svc.WriteJSON(w, status, v) }

// TimeStamp is MEC 012's time stamp.
type TimeStamp struct {
	Seconds     int64 `json:"seconds"`
	NanoSeconds int64 `json:"nanoSeconds"`
}

func stamp(ns int64) TimeStamp { return TimeStamp{ns / 1e9, ns % 1e9} }

func now() TimeStamp { return stamp(time.Now().UnixNano()) }

// Plmn and Ecgi as MEC 012 defines them.
type Plmn struct {
	MCC string `json:"mcc"`
	MNC string `json:"mnc"`
}

// Ecgi is the E-UTRAN cell global id.
type Ecgi struct {
	Plmn   Plmn   `json:"plmn"`
	CellID string `json:"cellId"`
}

func ecgiOf(m *meas.Measurement) Ecgi {
	return Ecgi{Plmn: Plmn{MCC: m.ECGI.MCC, MNC: m.ECGI.MNC}, CellID: m.ECGI.CellID}
}

// AssociateID identifies a UE: type 1 = UE IPv4 address.
type AssociateID struct {
	Type  int    `json:"type"`
	Value string `json:"value"`
}

func associate(m *meas.Measurement) []AssociateID {
	if !m.IPv4.IsValid() {
		return nil
	}
	return []AssociateID{{Type: 1, Value: m.IPv4.String()}}
}

// filter is the common query filters: cell_id (E-UTRAN cell id as in the Ecgi, or the
// feed's <bs_id>-<phyCellId>) and ue_ipv4_address, both comma-separated lists.
type filter struct {
	cells, ips, imsis []string
	noMatch           bool // a filter on something this RNIS never has (IPv6, NAT, GTP TEID)
}

func parseFilter(r *http.Request, allowed ...string) (filter, error) {
	var f filter
	q := r.URL.Query()
	if err := svc.UnknownQueryParameter(q, allowed...); err != nil {
		return f, err
	}
	f.cells = splitList(q["cell_id"])
	f.ips = splitList(q["ue_ipv4_address"])
	f.imsis = splitList(q["imsi"])
	for _, ip := range f.ips {
		if a, err := netip.ParseAddr(ip); err != nil || !a.Is4() {
			return f, fmt.Errorf("ue_ipv4_address %q is not an IPv4 address", ip)
		}
	}
	for _, key := range []string{"ue_ipv6_address", "nated_ip_address", "gtp_teid"} {
		if q.Has(key) {
			f.noMatch = true
		}
	}
	return f, nil
}

func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// unknownCell is the first cell the filter names that the RAN does not report ("" if none):
// MEC 012 answers 404 for a query about a cell that does not exist.
func (s *Server) unknownCell(f filter) string {
	latest := s.tracker.Latest()
	for _, c := range f.cells {
		one := filter{cells: []string{c}}
		if !slices.ContainsFunc(latest, func(m meas.Measurement) bool { return one.cellMatch(&m) }) {
			return c
		}
	}
	return ""
}

func (f filter) cellMatch(m *meas.Measurement) bool {
	if len(f.cells) == 0 {
		return true
	}
	for _, c := range f.cells {
		if strings.EqualFold(c, m.ECGI.CellID) || c == m.Cell {
			return true
		}
	}
	return false
}

func (f filter) ueMatch(m *meas.Measurement) bool {
	if f.noMatch {
		return false
	}
	if len(f.ips) > 0 && (!m.IPv4.IsValid() || !contains(f.ips, m.IPv4.String())) {
		return false
	}
	return len(f.imsis) == 0 || contains(f.imsis, m.IMSI)
}

func (s *Server) matching(f filter) []meas.Measurement {
	var out []meas.Measurement
	for _, m := range s.tracker.Latest() {
		if f.cellMatch(&m) && f.ueMatch(&m) {
			out = append(out, m)
		}
	}
	return out
}

var layer2Params = []string{"app_ins_id", "cell_id", "ue_ipv4_address", "ue_ipv6_address", "nated_ip_address", "gtp_teid",
	"dl_gbr_prb_usage_cell", "ul_gbr_prb_usage_cell", "dl_nongbr_prb_usage_cell", "ul_nongbr_prb_usage_cell",
	"dl_total_prb_usage_cell", "ul_total_prb_usage_cell", "received_dedicated_preambles_cell",
	"received_randomly_selected_preambles_low_range_cell", "received_randomly_selected_preambles_high_range_cell",
	"number_of_active_ue_dl_gbr_cell", "number_of_active_ue_ul_gbr_cell", "number_of_active_ue_dl_nongbr_cell",
	"number_of_active_ue_ul_nongbr_cell", "dl_gbr_pdr_cell", "ul_gbr_pdr_cell", "dl_nongbr_pdr_cell", "ul_nongbr_pdr_cell",
	"dl_gbr_delay_ue", "ul_gbr_delay_ue", "dl_nongbr_delay_ue", "ul_nongbr_delay_ue", "dl_gbr_pdr_ue", "ul_gbr_pdr_ue",
	"dl_nongbr_pdr_ue", "ul_nongbr_pdr_ue", "dl_gbr_throughput_ue", "ul_gbr_throughput_ue", "dl_nongbr_throughput_ue",
	"ul_nongbr_throughput_ue", "dl_gbr_data_volume_ue", "ul_gbr_data_volume_ue", "dl_nongbr_data_volume_ue",
	"ul_nongbr_data_volume_ue"}

// layer2Meas maps FlexRAN values into the fields of L2Meas where they fit (docs/rnis-adapter.md):
// cell PRB usage = ΣprbDl / dlBandwidth (and ΣprbUl / ulBandwidth), active UEs = UEs with
// bytes queued, UE throughput = tbsDl (tbsUl) × 8 bit per measured TTI (kbit/s), UE delay =
// RLC head-of-line delay (ms). Every bearer is counted as non-GBR: FlexRAN does not tell GBR
// bearers apart reliably. A field whose inputs the source did not report is omitted, never 0.
func (s *Server) layer2Meas(w http.ResponseWriter, r *http.Request) {
	f, ok := s.cellQuery(w, r, layer2Params...)
	if !ok {
		return
	}
	if _, status, err := s.appInstances(r, false); err != nil {
		problem(w, r, status, err.Error())
		return
	}
	values, err := parseValueFilters(r, layer2Params[6:]...) // after the ids and addresses
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	type cellAcc struct {
		info        map[string]any
		active      int
		queuesKnown bool  // some UE reported its RLC queue
		ulPRBs      int64 // Σ prbUl
		ulKnown     bool  // every UE reported prbUl and the cell its ulBandwidth
		ulBandwidth int64
	}
	cells := map[string]*cellAcc{}
	var order []string
	ueInfo := []map[string]any{}
	var newest int64 // the time of the newest measurement reported (ns)
	for _, m := range s.tracker.Latest() {
		if !f.cellMatch(&m) {
			continue
		}
		newest = max(newest, measuredAt(&m))
		c := cells[m.Cell]
		if c == nil {
			c = &cellAcc{info: map[string]any{"ecgi": ecgiOf(&m)}, ulKnown: m.CellULPRBs.Set && m.CellULPRBs.V > 0,
				ulBandwidth: m.CellULPRBs.V}
			if m.HasPRBUsage() {
				c.info["dl_total_prb_usage_cell"] = min(100, int(m.CellPRBUsage*100+0.5))
				c.info["dl_nongbr_prb_usage_cell"] = c.info["dl_total_prb_usage_cell"]
			}
			cells[m.Cell] = c
			order = append(order, m.Cell)
		}
		c.queuesKnown = c.queuesKnown || m.RLCQueue.Set
		if m.RLCQueue.Set && m.RLCQueue.V > 0 {
			c.active++
		}
		c.ulKnown = c.ulKnown && m.ULPRBs.Set
		c.ulPRBs += m.ULPRBs.V
		if !f.ueMatch(&m) || !m.IPv4.IsValid() {
			continue // CellUEInfo requires an associateId: a UE without a known address has none
		}
		ue := map[string]any{"ecgi": ecgiOf(&m), "associateId": associate(&m)[0]}
		if m.DLTBS.Set {
			ue["dl_nongbr_throughput_ue"] = m.BitsPerSecond(m.DLTBS.V).V / 1000 // kbit/s at the measured TTI rate
		}
		if m.ULTBS.Set {
			ue["ul_nongbr_throughput_ue"] = m.BitsPerSecond(m.ULTBS.V).V / 1000
		}
		if m.RLCHOL.Set {
			ue["dl_nongbr_delay_ue"] = m.RLCHOL.V
		}
		ueInfo = append(ueInfo, ue)
	}
	cellInfo := []map[string]any{}
	for _, key := range order {
		c := cells[key]
		if c.queuesKnown {
			c.info["number_of_active_ue_dl_nongbr_cell"] = c.active
		}
		if c.ulKnown {
			c.info["ul_total_prb_usage_cell"] = min(100, int((100*c.ulPRBs+c.ulBandwidth/2)/c.ulBandwidth))
			c.info["ul_nongbr_prb_usage_cell"] = c.info["ul_total_prb_usage_cell"]
		}
		cellInfo = append(cellInfo, c.info)
	}
	if f.noMatch || len(f.ips) > 0 {
		cellInfo = []map[string]any{} // a UE-level query: cell figures were not asked for
	}
	cellInfo, ueInfo = values.keep(cellInfo), values.keep(ueInfo)
	stamped := now()
	if newest > 0 {
		stamped = stamp(newest)
	}
	writeJSON(w, http.StatusOK, map[string]any{"cellInfo": cellInfo, "cellUEInfo": ueInfo, "timeStamp": stamped})
}

// measuredAt is when the RAN took a measurement: when the adapter first saw its report
// (ranclock; FlexRAN's date_time is only when the controller answered), else when the
// adapter saw it.
func measuredAt(m *meas.Measurement) int64 {
	if m.SourceTimeNs.Set {
		return m.SourceTimeNs.V
	}
	return m.ObservedNs
}

var rabParams = []string{"app_ins_id", "cell_id", "ue_ipv4_address", "ue_ipv6_address", "nated_ip_address", "gtp_teid",
	"erab_id", "qci", "erab_mbr_dl", "erab_mbr_ul", "erab_gbr_dl", "erab_gbr_ul"}

// rabInfo lists the E-RABs of the UEs, per cell.
func (s *Server) rabInfo(w http.ResponseWriter, r *http.Request) {
	f, ok := s.cellQuery(w, r, rabParams...)
	if !ok {
		return
	}
	apps, status, err := s.appInstances(r, true)
	if err != nil {
		problem(w, r, status, err.Error())
		return
	}
	q := r.URL.Query()
	erabID, err1 := optionalInt(q.Get("erab_id"))
	qci, err2 := optionalInt(q.Get("qci"))
	if err1 != nil || err2 != nil {
		problem(w, r, http.StatusBadRequest, "erab_id and qci must be integers")
		return
	}
	// FlexRAN reports no bit rates: a filter on them is checked, and matches no bearer.
	bitRates, err := parseValueFilters(r, "erab_mbr_dl", "erab_mbr_ul", "erab_gbr_dl", "erab_gbr_ul")
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if len(bitRates) > 0 {
		f.noMatch = true
	}
	type cellUsers struct {
		Ecgi   Ecgi             `json:"ecgi"`
		UEInfo []map[string]any `json:"ueInfo"`
	}
	var cells []*cellUsers
	index := map[string]*cellUsers{}
	for _, m := range s.matching(f) {
		var erabs []map[string]any
		for _, e := range m.ERABs {
			if (erabID >= 0 && e.ID != erabID) || (qci >= 0 && (!e.QCI.Set || e.QCI.V != qci)) {
				continue
			}
			erab := map[string]any{"erabId": e.ID}
			if e.QCI.Set {
				erab["erabQosParameters"] = map[string]any{"qci": e.QCI.V}
			}
			erabs = append(erabs, erab)
		}
		if len(erabs) == 0 {
			continue
		}
		c := index[m.Cell]
		if c == nil {
			c = &cellUsers{Ecgi: ecgiOf(&m)}
			index[m.Cell] = c
			cells = append(cells, c)
		}
		ue := map[string]any{"erabInfo": erabs}
		if a := associate(&m); a != nil {
			ue["associateId"] = a
		}
		c.UEInfo = append(c.UEInfo, ue)
	}
	if cells == nil {
		cells = []*cellUsers{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"appInstanceId": apps[0],
		"requestId": newID(), "cellUserInfo": cells, "timeStamp": now()})
}

// cellQuery parses a query's filters: 400 for a bad parameter, 404 for a cell the RAN does
// not report.
func (s *Server) cellQuery(w http.ResponseWriter, r *http.Request, allowed ...string) (filter, bool) {
	f, err := parseFilter(r, allowed...)
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return f, false
	}
	if c := s.unknownCell(f); c != "" {
		problem(w, r, http.StatusNotFound, fmt.Sprintf("cell_id %q: no such cell is reported by the RAN", c))
		return f, false
	}
	return f, true
}

// appInstances are the app instances a query is about: app_ins_id, or the caller's own
// instance (from its platform-issued token). An app's token reaches only its own instance
// (403 for another's: isolation, not a statement about existence); a static (operator)
// token may name an instance this RNIS knows to exist (its own, or one whose token it has
// seen), 404 otherwise. required: a caller with no instance must name one (400).
func (s *Server) appInstances(r *http.Request, required bool) ([]string, int, error) {
	caller := auth.AppInstanceOf(auth.BearerToken(r.Header.Get("Authorization")))
	if caller != "" {
		s.known.Store(caller, true)
	}
	asked := splitList(r.URL.Query()["app_ins_id"])
	if len(asked) == 0 && caller != "" {
		return []string{caller}, 0, nil
	}
	if len(asked) == 0 && required {
		return nil, http.StatusBadRequest, errors.New("app_ins_id is required: the token carries no app instance")
	}
	for _, id := range asked {
		_, seen := s.known.Load(id)
		switch {
		case caller != "" && id != caller:
			return nil, http.StatusForbidden, fmt.Errorf("app_ins_id %q: this token reaches only its own app instance %q", id, caller)
		case caller == "" && id != s.cfg.AppInstanceID && !seen:
			return nil, http.StatusNotFound, fmt.Errorf("app_ins_id %q: no such application instance is known to this RNIS", id)
		}
	}
	return asked, 0, nil
}

// plmnInfo returns, for each application instance asked about, the PLMNs of the cells.
func (s *Server) plmnInfo(w http.ResponseWriter, r *http.Request) {
	if _, err := parseFilter(r, "app_ins_id"); err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if !r.URL.Query().Has("app_ins_id") { // mandatory in MEC 012, even for an app's token
		problem(w, r, http.StatusBadRequest, "app_ins_id is required (comma-separated list)")
		return
	}
	apps, status, err := s.appInstances(r, true)
	if err != nil {
		problem(w, r, status, err.Error())
		return
	}
	var plmns []Plmn
	for _, m := range s.tracker.Latest() {
		p := Plmn{MCC: m.ECGI.MCC, MNC: m.ECGI.MNC}
		if p.MCC != "" && !containsPlmn(plmns, p) {
			plmns = append(plmns, p)
		}
	}
	if len(plmns) == 0 {
		problem(w, r, http.StatusNotFound, "no cell with a known PLMN is reported by the RAN")
		return
	}
	out := make([]map[string]any, 0, len(apps))
	for _, app := range apps {
		out = append(out, map[string]any{"appInstanceId": app, "plmn": plmns, "timeStamp": now()})
	}
	writeJSON(w, http.StatusOK, out)
}

// extRanMeas is the extension: the latest feed measurement of every matching UE.
func (s *Server) extRanMeas(w http.ResponseWriter, r *http.Request) {
	f, err := parseFilter(r, "cell_id", "ue_ipv4_address", "imsi")
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ts, _ := json.Marshal(now())
	b := append([]byte(`{"timeStamp":`), ts...)
	b = append(b, `,"ueMeas":[`...)
	for i, m := range s.matching(f) {
		if i > 0 {
			b = append(b, ',')
		}
		b = m.AppendJSON(b)
	}
	b = append(b, "]}\n"...)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// valueFilters are query parameters that ask for an exact non-negative integer value of
// the field of the same name (MEC 012's layer2_meas and rab_info filters).
type valueFilters map[string]int64

func parseValueFilters(r *http.Request, names ...string) (valueFilters, error) {
	out := valueFilters{}
	q := r.URL.Query()
	for _, name := range names {
		if !q.Has(name) {
			continue
		}
		v, err := optionalInt(q.Get(name))
		if err != nil || v < 0 || len(q[name]) > 1 {
			return nil, fmt.Errorf("query parameter %q must be one non-negative integer", name)
		}
		out[name] = v
	}
	return out, nil
}

// keep is the entries of list whose fields equal every filter on a field of theirs (cell
// filters end in _cell, UE filters in _ue); a field the entry lacks does not match.
func (vf valueFilters) keep(list []map[string]any) []map[string]any {
	out := []map[string]any{}
	for _, entry := range list {
		_, isUE := entry["associateId"]
		isCell := !isUE
		matches := true
		for name, want := range vf {
			if strings.HasSuffix(name, "_cell") != isCell {
				continue
			}
			got, ok := entry[name]
			matches = matches && ok && fmt.Sprint(got) == strconv.FormatInt(want, 10)
		}
		if matches {
			out = append(out, entry)
		}
	}
	return out
}

func optionalInt(s string) (int64, error) {
	if s == "" {
		return -1, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad integer")
	}
	return n, nil
}

func containsPlmn(list []Plmn, p Plmn) bool {
	for _, e := range list {
		if e == p {
			return true
		}
	}
	return false
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
