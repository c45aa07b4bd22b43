package mec012

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/svc"
)

// The subscription types this RNIS serves, with their filter attribute and event kind.
var subscriptionTypes = map[string]struct {
	filter, query string
	kind          uestate.Kind
}{
	"CellChangeSubscription": {"filterCriteriaAssocHo", "cell_change", uestate.CellChange},
	"RabEstSubscription":     {"filterCriteriaQci", "rab_est", uestate.RabEst},
	"RabModSubscription":     {"filterCriteriaQci", "rab_mod", uestate.RabMod},
	"RabRelSubscription":     {"filterCriteriaQci", "rab_rel", uestate.RabRel},
	"MeasRepUeSubscription":  {"filterCriteriaAssocTri", "meas_rep_ue", uestate.MeasRep},
}

// absentTypes are the MEC 012 subscription types this RNIS refuses (400), with the reason:
// no source it reads carries the data that would trigger them, and a subscription accepted
// but never notified would look like a quiet RAN.
var absentTypes = map[string]string{
	"NrMeasRepUeSubscription": "no source reports NR measurement reports (FlexRAN is LTE; the E2 source's MAC/RLC/KPM models carry no RRC measurement reports)",
	"MeasTaSubscription":      "no source reports a UE's timing advance (FlexRAN's statistics and the E2 models carry none)",
	"CaReconfSubscription":    "no source reports secondary cells or their reconfiguration (FlexRAN reports the primary carrier only)",
	"S1BearerSubscription":    "no source reports S1 bearers (the S-GW and eNB addresses of the tunnel)",
}

// subscription is one subscription: the body as the client sent it (returned as is, plus
// _links) and the parsed parts the notifier needs.
type subscription struct {
	ID       string
	Type     string
	Callback string
	Body     map[string]any
	Expiry   *TimeStamp
	Owner    string // app instance of the token that created it ("": a static token)
	// Websocket: notifications go over the websocket the consumer opens at
	// websocketURI (websockNotifConfig), not to Callback.
	Websocket bool
	f         subFilter
}

type subFilter struct {
	ips, cells []string
	hoStatus   []int64
	qci, erab  int64 // -1: any
	triggers   []int64
}

type store struct {
	publicURL string
	base      string // <public URL>/rni/v2/subscriptions/
	path      string // JSON file the subscriptions persist in ("": memory only)
	mu        sync.RWMutex
	subs      map[string]*subscription
}

func newStore(publicURL, path string) *store {
	return &store{publicURL: publicURL, base: publicURL + Base + "/subscriptions/", path: path, subs: map[string]*subscription{}}
}

func (st *store) href(id string) string { return st.base + id }

// parseSubscription validates a request body. Errors are for the client (400).
func parseSubscription(raw []byte) (*subscription, error) {
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		return nil, fmt.Errorf("body is not a JSON object: %v", err)
	}
	typ, _ := body["subscriptionType"].(string)
	spec, ok := subscriptionTypes[typ]
	if reason, absent := absentTypes[typ]; absent {
		return nil, fmt.Errorf("subscriptionType %s is not supported: %s", typ, reason)
	}
	if !ok {
		return nil, fmt.Errorf("subscriptionType %q is not supported; supported: CellChangeSubscription, "+
			"RabEstSubscription, RabModSubscription, RabRelSubscription, MeasRepUeSubscription", typ)
	}
	websock, err := parseWebsockNotifConfig(body)
	if err != nil {
		return nil, err
	}
	cb, _ := body["callbackReference"].(string)
	if websock {
		cb = "" // MEC 012 note: given both, the RNIS chooses one and returns only that one
		delete(body, "callbackReference")
	} else if u, err := url.Parse(cb); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, errors.New("callbackReference must be an absolute http or https URI (or ask for a websocket: " +
			`"websockNotifConfig": {"requestWebsocketUri": true})`)
	}
	if v, ok := body["requestTestNotification"]; ok {
		if _, isBool := v.(bool); !isBool {
			return nil, errors.New("requestTestNotification must be a boolean")
		}
	}
	s := &subscription{Type: typ, Callback: cb, Body: body, Websocket: websock}
	raw2, ok := body[spec.filter].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is required for %s", spec.filter, typ)
	}
	if s.f, err = parseFilterCriteria(typ, raw2); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.filter, err)
	}
	if typ == "CellChangeSubscription" && len(s.f.hoStatus) == 0 {
		raw2["hoStatus"] = []any{3} // MEC 012: COMPLETED when absent, and included in the response
		s.f.hoStatus = []int64{3}
	}
	if e, ok := body["expiryDeadline"]; ok {
		ts, err := parseTimeStamp(e)
		if err != nil {
			return nil, fmt.Errorf("expiryDeadline: %w", err)
		}
		if time.Unix(ts.Seconds, ts.NanoSeconds).Before(time.Now()) {
			return nil, errors.New("expiryDeadline is in the past")
		}
		body["expiryDeadline"] = ts
		s.Expiry = &ts
	}
	delete(body, "_links")
	return s, nil
}

// parseWebsockNotifConfig reads the optional websockNotifConfig: true when the consumer
// asks for websocket delivery. The websocketUri is the RNIS's to set; a consumer may send
// back the one it was given (a PUT of what GET returned), which is then replaced by the
// RNIS's own. The stored form is {"requestWebsocketUri": true}; the view adds the URI.
func parseWebsockNotifConfig(body map[string]any) (bool, error) {
	raw, present := body["websockNotifConfig"]
	if !present {
		return false, nil
	}
	cfg, ok := raw.(map[string]any)
	if !ok {
		return false, errors.New("websockNotifConfig must be an object")
	}
	if uri, ok := cfg["websocketUri"]; ok {
		if _, isString := uri.(string); !isString {
			return false, errors.New("websockNotifConfig.websocketUri must be a string")
		}
	}
	asked, isBool := cfg["requestWebsocketUri"].(bool)
	if _, present := cfg["requestWebsocketUri"]; present && !isBool {
		return false, errors.New("websockNotifConfig.requestWebsocketUri must be a boolean")
	}
	if !asked {
		return false, errors.New(`websockNotifConfig: set "requestWebsocketUri": true to ask for websocket delivery ` +
			"(the RNIS allocates the websocketUri)")
	}
	body["websockNotifConfig"] = map[string]any{"requestWebsocketUri": true}
	return true, nil
}

func parseFilterCriteria(typ string, f map[string]any) (subFilter, error) {
	out := subFilter{qci: -1, erab: -1}
	if v, ok := f["appInstanceId"]; ok {
		if _, isString := v.(string); !isString {
			return out, errors.New("appInstanceId must be a string")
		}
	}
	ids, err := arrayOf(f, "associateId")
	if err != nil {
		return out, err
	}
	for _, a := range ids {
		m, _ := a.(map[string]any)
		v, isString := m["value"].(string)
		if m == nil || !isString {
			return out, errors.New("associateId: each item is {type, value} with a string value")
		}
		if num(m["type"]) != 1 {
			return out, errors.New("associateId: only type 1 (UE IPv4 address) is supported")
		}
		out.ips = append(out.ips, v)
	}
	cells, err := arrayOf(f, "ecgi")
	if err != nil {
		return out, err
	}
	for _, e := range cells {
		m, _ := e.(map[string]any)
		c, _ := m["cellId"].(string)
		if c == "" || !isPlmn(m["plmn"]) {
			return out, errors.New("ecgi: each item is {plmn: {mcc, mnc}, cellId}")
		}
		out.cells = append(out.cells, c)
	}
	if out.hoStatus, err = integers(f, "hoStatus"); err != nil {
		return out, err
	}
	if out.triggers, err = integers(f, "trigger"); err != nil {
		return out, err
	}
	if typ == "RabEstSubscription" || typ == "RabModSubscription" || typ == "RabRelSubscription" {
		if out.qci = num(f["qci"]); out.qci < 0 {
			return out, errors.New("qci is required")
		}
	}
	if typ == "RabRelSubscription" || typ == "RabModSubscription" { // FilterCriteriaQci1: erabId required
		if out.erab = num(f["erabId"]); out.erab < 0 {
			return out, errors.New("erabId is required")
		}
	}
	return out, nil
}

// arrayOf reads the optional array f[key]. A value of another type (null included) is an
// error, not an empty filter: a filter silently dropped would widen the subscription.
func arrayOf(f map[string]any, key string) ([]any, error) {
	v, present := f[key]
	if !present {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an array", key)
	}
	return l, nil
}

// integers reads the optional array of non-negative integers f[key] (MEC 012 enumerations).
func integers(f map[string]any, key string) ([]int64, error) {
	items, err := arrayOf(f, key)
	if err != nil {
		return nil, err
	}
	out := make([]int64, 0, len(items))
	for _, item := range items {
		n := num(item)
		if n < 0 {
			return nil, fmt.Errorf("%s: each item must be a non-negative integer", key)
		}
		out = append(out, n)
	}
	return out, nil
}

func isPlmn(v any) bool {
	m, _ := v.(map[string]any)
	_, hasMCC := m["mcc"].(string)
	_, hasMNC := m["mnc"].(string)
	return hasMCC && hasMNC
}

// num reads a JSON number (UseNumber) as an integer; -1 if it is none.
func num(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return -1
	}
	i, err := n.Int64()
	if err != nil {
		return -1
	}
	return i
}

func parseTimeStamp(v any) (TimeStamp, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return TimeStamp{}, errors.New("want {seconds, nanoSeconds}")
	}
	ns := m["nanoSeconds"]
	if ns == nil {
		ns = m["nanoseconds"] // the spec's own examples spell it so
	}
	sec, nsec := num(m["seconds"]), num(ns)
	if sec < 0 || nsec < 0 || nsec >= 1e9 {
		return TimeStamp{}, errors.New("want non-negative integer seconds and nanoSeconds < 1e9")
	}
	return TimeStamp{sec, nsec}, nil
}

// view is the subscription as the API returns it.
func (st *store) view(s *subscription) map[string]any {
	out := make(map[string]any, len(s.Body)+1)
	for k, v := range s.Body {
		out[k] = v
	}
	out["_links"] = map[string]any{"self": map[string]any{"href": st.href(s.ID)}}
	if s.Websocket {
		out["websockNotifConfig"] = map[string]any{"requestWebsocketUri": true,
			"websocketUri": websocketURI(st.publicURL, s.ID)}
	}
	return out
}

// errTooMany: the owner already holds the most subscriptions it may.
var errTooMany = errors.New("too many subscriptions")

// add stores a new subscription unless its owner already holds max; if it cannot be
// saved, nothing changes.
func (st *store) add(s *subscription, max int) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	held := 0
	for _, other := range st.subs {
		if other.Owner == s.Owner {
			held++
		}
	}
	if held >= max {
		return errTooMany
	}
	s.ID = newID()
	st.subs[s.ID] = s
	if err := st.save(); err != nil {
		delete(st.subs, s.ID)
		return err
	}
	return nil
}

func (st *store) get(id string) (*subscription, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	s, ok := st.subs[id]
	return s, ok
}

// precondition is checked with a subscription's current representation before a change,
// under the store's lock, so two writers holding the same ETag cannot both succeed.
type precondition func(current map[string]any) error

// replace swaps subscription id for s (false: no such subscription); if the precondition
// fails or the change cannot be saved, nothing changes.
func (st *store) replace(id string, s *subscription, check precondition) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old, ok := st.subs[id]
	if !ok {
		return false, nil
	}
	if err := check(st.view(old)); err != nil {
		return true, err
	}
	s.ID = id
	st.subs[id] = s
	if err := st.save(); err != nil {
		st.subs[id] = old
		return true, err
	}
	return true, nil
}

// remove deletes subscription id (false: no such subscription); if the precondition fails
// or the change cannot be saved, nothing changes.
func (st *store) remove(id string, check precondition) (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old, ok := st.subs[id]
	if !ok {
		return false, nil
	}
	if err := check(st.view(old)); err != nil {
		return true, err
	}
	delete(st.subs, id)
	if err := st.save(); err != nil {
		st.subs[id] = old
		return true, err
	}
	return true, nil
}

func (st *store) all() []*subscription {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return sortedByID(st.subs)
}

func sortedByID(subs map[string]*subscription) []*subscription {
	out := make([]*subscription, 0, len(subs))
	for _, s := range subs {
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// expired removes and returns the subscriptions whose deadline has passed.
func (st *store) expired(t time.Time) []*subscription {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []*subscription
	for id, s := range st.subs {
		if s.Expiry != nil && !time.Unix(s.Expiry.Seconds, s.Expiry.NanoSeconds).After(t) {
			out = append(out, s)
			delete(st.subs, id)
		}
	}
	if len(out) > 0 {
		_ = st.save() // if this fails, the next load drops the expired ones anyway
	}
	return out
}

// subscriptionTypeValues are the values MEC 012 permits for subscription_type.
var subscriptionTypeValues = []string{"cell_change", "rab_est", "rab_mod", "rab_rel", "meas_rep_ue",
	"nr_meas_rep_ue", "timing_advance_ue", "ca_reconf", "s1_bearer"}

func (s *Server) listSubscriptions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	err := svc.UnknownQueryParameter(q, "subscription_type")
	if err == nil {
		err = svc.EnumQueryParameter(q, "subscription_type", subscriptionTypeValues...)
	}
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	want := q.Get("subscription_type")
	caller := auth.AppInstanceOf(auth.BearerToken(r.Header.Get("Authorization")))
	links := []map[string]any{}
	for _, sub := range s.subs.all() {
		if caller != "" && sub.Owner != caller {
			continue // an app sees its own subscriptions only
		}
		if want == "" || subscriptionTypes[sub.Type].query == want {
			links = append(links, map[string]any{"href": s.subs.href(sub.ID), "subscriptionType": sub.Type})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"_links": map[string]any{
		"self": map[string]any{"href": s.cfg.PublicURL + Base + "/subscriptions"}, "subscription": links}})
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		problem(w, r, http.StatusUnsupportedMediaType, "the body must be application/json")
		return nil, false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		problem(w, r, http.StatusBadRequest, "cannot read the body: "+err.Error())
		return nil, false
	}
	return raw, true
}

func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request) {
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	sub, err := parseSubscription(raw)
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	sub.Owner = auth.AppInstanceOf(auth.BearerToken(r.Header.Get("Authorization")))
	if err := s.subs.add(sub, s.cfg.MaxSubsPerApp); errors.Is(err, errTooMany) {
		problem(w, r, http.StatusForbidden, fmt.Sprintf("an app instance may hold at most %d subscriptions; delete one first", s.cfg.MaxSubsPerApp))
		return
	} else if err != nil {
		s.log.Error("cannot save the subscriptions", "err", err)
		problem(w, r, http.StatusInternalServerError, "the subscription could not be saved")
		return
	}
	s.log.Info("subscription created", "id", sub.ID, "type", sub.Type, "callback", sub.Callback)
	if sub.Body["requestTestNotification"] == true && !sub.Websocket {
		s.notifier.test(sub) // over a websocket: once it is open (serveWebsocket)
	}
	w.Header().Set("Location", s.subs.href(sub.ID))
	svc.WriteTagged(w, r, http.StatusCreated, s.subs.view(sub))
}

// reachable finds subscription id for the caller: 404 if it does not exist, 403 if it
// belongs to another app instance (an app's token reaches only its own subscriptions; a
// static operator token reaches all). It answers the refusal itself.
func (s *Server) reachable(w http.ResponseWriter, r *http.Request, id string) (*subscription, bool) {
	sub, ok := s.subs.get(id)
	if !ok {
		problem(w, r, http.StatusNotFound, "no subscription "+id)
		return nil, false
	}
	caller := auth.AppInstanceOf(auth.BearerToken(r.Header.Get("Authorization")))
	if caller != "" && caller != sub.Owner {
		problem(w, r, http.StatusForbidden, fmt.Sprintf("subscription %s belongs to another app instance", id))
		return nil, false
	}
	return sub, true
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	sub, ok := s.reachable(w, r, r.PathValue("subscriptionId"))
	if !ok {
		return
	}
	svc.WriteTagged(w, r, http.StatusOK, s.subs.view(sub))
}

// conditions are the request's If-Match / If-None-Match as a precondition.
func conditions(r *http.Request) precondition {
	return func(current map[string]any) error {
		if err := svc.CheckPreconditions(r, svc.ETagOf(current)); err != nil {
			return err
		}
		return nil
	}
}

func (s *Server) putSubscription(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("subscriptionId")
	old, ok := s.reachable(w, r, id)
	if !ok {
		return
	}
	raw, ok := readBody(w, r)
	if !ok {
		return
	}
	sub, err := parseSubscription(raw)
	if err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if sub.Type != old.Type {
		problem(w, r, http.StatusUnprocessableEntity, "subscriptionType cannot change ("+old.Type+")")
		return
	}
	sub.Owner = old.Owner
	found, err := s.subs.replace(id, sub, conditions(r))
	if !s.stored(w, r, id, found, err) {
		return
	}
	if !sub.Websocket {
		s.sockets.close(id) // delivery moved to the callback
	}
	svc.WriteTagged(w, r, http.StatusOK, s.subs.view(sub))
}

func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("subscriptionId")
	if _, ok := s.reachable(w, r, id); !ok {
		return
	}
	found, err := s.subs.remove(id, conditions(r))
	if !s.stored(w, r, id, found, err) {
		return
	}
	s.sockets.close(id)
	w.WriteHeader(http.StatusNoContent)
}

// stored answers a change to subscription id that did not happen (404, or 500 if it could
// not be saved) and tells whether it did.
func (s *Server) stored(w http.ResponseWriter, r *http.Request, id string, found bool, err error) bool {
	var failed *svc.PreconditionError
	switch {
	case !found:
		problem(w, r, http.StatusNotFound, "no subscription "+id)
	case errors.As(err, &failed):
		problem(w, r, failed.Status, failed.Detail)
	case err != nil:
		s.log.Error("cannot save the subscriptions", "err", err)
		problem(w, r, http.StatusInternalServerError, "the change could not be saved")
	default:
		return true
	}
	return false
}

// notifier matches events to subscriptions in one goroutine and hands each notification
// to its receiver (the callback's scheme, host and port): every receiver has its own
// goroutine and bounded queue, so a slow or stalled receiver delays only its own
// notifications (issue 20). A full event queue or receiver queue drops (counted) rather
// than slow the poller down. A receiver's goroutine ends when its queue stays empty.
type notifier struct {
	subs      *store
	sockets   *sockets
	client    *http.Client
	metrics   *obs.Metrics
	log       *slog.Logger
	queue     chan uestate.Event
	tests     chan *subscription // new subscriptions that asked for a TestNotification
	mu        sync.Mutex
	receivers map[string]chan delivery
}

type delivery struct {
	sub  *subscription
	body map[string]any
}

const (
	receiverQueue = 1000             // notifications waiting for one receiver
	receiverIdle  = 30 * time.Second // a receiver's goroutine ends after this without work
)

func newNotifier(subs *store, sockets *sockets, timeout time.Duration, metrics *obs.Metrics, log *slog.Logger) *notifier {
	return &notifier{subs: subs, sockets: sockets, client: &http.Client{Timeout: timeout}, metrics: metrics, log: log,
		queue: make(chan uestate.Event, 4096), tests: make(chan *subscription, 64), receivers: map[string]chan delivery{}}
}

// test asks for a TestNotification to a new subscription's callback (MEC 012 v2.2.1
// requestTestNotification, MEC 009 clause 6.12a). It is sent from run's goroutine, whose
// context outlives the request that created the subscription.
func (n *notifier) test(sub *subscription) {
	select {
	case n.tests <- sub:
	default:
		n.metrics.Notified("TestNotification", false)
	}
}

func (n *notifier) enqueue(events []uestate.Event) {
	for _, e := range events {
		select {
		case n.queue <- e:
		default:
			n.metrics.Notified(string(e.Kind), false)
		}
	}
}

func (n *notifier) run(ctx context.Context) {
	ticker := time.NewTicker(200 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-n.queue:
			for _, sub := range n.subs.all() {
				if body := notification(sub, &e); body != nil {
					n.send(ctx, sub, body)
				}
			}
		case sub := <-n.tests:
			n.send(ctx, sub, map[string]any{"notificationType": "TestNotification",
				"_links": map[string]any{"subscription": map[string]any{"href": n.subs.href(sub.ID)}}})
		case t := <-ticker.C:
			for _, sub := range n.subs.expired(t) {
				n.send(ctx, sub, map[string]any{"notificationType": "ExpiryNotification",
					"_links": map[string]any{"self": n.subs.href(sub.ID)}, "expiryDeadline": sub.Expiry,
					"timeStamp": stamp(t.UnixNano())})
			}
		}
	}
}

// send queues a notification for its receiver, starting the receiver's goroutine if needed.
func (n *notifier) send(ctx context.Context, sub *subscription, body map[string]any) {
	key := receiverOf(sub)
	n.mu.Lock()
	defer n.mu.Unlock() // held while sending, so a goroutine that finds its queue empty can end
	queue, ok := n.receivers[key]
	if !ok {
		queue = make(chan delivery, receiverQueue)
		n.receivers[key] = queue
		go n.serve(ctx, key, queue)
	}
	select {
	case queue <- delivery{sub, body}:
	default:
		n.metrics.Notified(body["notificationType"].(string), false)
		n.log.Warn("notification dropped: the receiver's queue is full", "receiver", key)
	}
}

// serve delivers one receiver's notifications in order until it has had nothing to do for
// receiverIdle.
func (n *notifier) serve(ctx context.Context, key string, queue chan delivery) {
	idle := time.NewTimer(receiverIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-queue:
			n.post(ctx, d.sub, d.body)
			idle.Reset(receiverIdle)
		case <-idle.C:
			n.mu.Lock()
			if len(queue) == 0 {
				delete(n.receivers, key)
				n.mu.Unlock()
				return
			}
			n.mu.Unlock()
			idle.Reset(receiverIdle)
		}
	}
}

// receiverOf is who receives a subscription's notifications: the callback's scheme, host
// and port, or the subscription's own websocket.
func receiverOf(sub *subscription) string {
	if sub.Websocket {
		return "websocket:" + sub.ID
	}
	u, err := url.Parse(sub.Callback)
	if err != nil {
		return sub.Callback
	}
	return u.Scheme + "://" + u.Host
}

func (n *notifier) post(ctx context.Context, sub *subscription, body map[string]any) {
	raw, _ := json.Marshal(body)
	kind := body["notificationType"].(string)
	if sub.Websocket {
		err := n.sockets.send(sub.ID, raw, n.client.Timeout)
		if kind == "ExpiryNotification" {
			n.sockets.close(sub.ID) // the subscription is gone: so is its websocket
		}
		n.metrics.Notified(kind, err == nil)
		if err != nil {
			n.log.Warn("notification not delivered", "subscription", sub.ID, "type", kind, "err", err)
		}
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.Callback, bytes.NewReader(raw))
	if err != nil {
		n.metrics.Notified(kind, false)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
	}
	n.metrics.Notified(kind, err == nil)
	if err != nil {
		n.log.Warn("notification not delivered", "subscription", sub.ID, "type", kind, "err", err)
	}
}

// notification builds the notification of an event for a subscription, or nil if the
// subscription does not want it.
func notification(sub *subscription, e *uestate.Event) map[string]any {
	spec := subscriptionTypes[sub.Type]
	if spec.kind != e.Kind {
		return nil
	}
	m, f := &e.UE, sub.f
	if len(f.ips) > 0 && (!m.IPv4.IsValid() || !contains(f.ips, m.IPv4.String())) {
		return nil
	}
	inCells := func(ms ...*meas.Measurement) bool {
		if len(f.cells) == 0 {
			return true
		}
		for _, x := range ms {
			for _, c := range f.cells {
				if x != nil && strings.EqualFold(c, x.ECGI.CellID) {
					return true
				}
			}
		}
		return false
	}
	out := map[string]any{"timeStamp": stamp(e.TimeNs)}
	if a := associate(m); a != nil {
		out["associateId"] = a
	}
	switch e.Kind {
	case uestate.CellChange:
		if !inCells(m, e.Previous) || !containsInt(f.hoStatus, 3) {
			return nil
		}
		out["notificationType"] = "CellChangeNotification"
		out["srcEcgi"] = ecgiOf(e.Previous)
		out["trgEcgi"] = []Ecgi{ecgiOf(m)}
		out["hoStatus"] = 3 // COMPLETED: FlexRAN statistics show handovers only once done
	case uestate.RabEst, uestate.RabMod, uestate.RabRel:
		if !inCells(m) || !e.ERAB.QCI.Set || e.ERAB.QCI.V != f.qci || (f.erab >= 0 && e.ERAB.ID != f.erab) {
			return nil
		}
		out["ecgi"] = ecgiOf(m)
		if e.Kind != uestate.RabRel {
			out["notificationType"] = map[uestate.Kind]string{uestate.RabEst: "RabEstNotification",
				uestate.RabMod: "RabModNotification"}[e.Kind]
			out["erabId"] = e.ERAB.ID
			out["erabQosParameters"] = map[string]any{"qci": e.ERAB.QCI.V}
		} else {
			out["notificationType"] = "RabRelNotification"
			out["erabReleaseInfo"] = map[string]any{"erabId": e.ERAB.ID}
		}
	case uestate.MeasRep:
		const notAvailable = 0 // FlexRAN does not say which event triggered the report
		if !inCells(m) || (len(f.triggers) > 0 && !containsInt(f.triggers, notAvailable)) {
			return nil
		}
		out["notificationType"] = "MeasRepUeNotification"
		out["ecgi"] = ecgiOf(m)
		out["rsrp"] = rsrpIndex(m.RRC.RSRP.V)
		out["rsrq"] = rsrqIndex(m.RRC.RSRQ.V)
		out["trigger"] = notAvailable
		var neigh []map[string]any
		for _, nb := range m.RRC.Neighbours {
			if nb.RSRP.Set && nb.RSRQ.Set {
				neigh = append(neigh, map[string]any{"rsrp": rsrpIndex(nb.RSRP.V), "rsrq": rsrqIndex(nb.RSRQ.V)})
			}
		}
		if neigh != nil {
			out["eutranNeighbourCellMeasInfo"] = neigh
		}
	default:
		return nil
	}
	return out
}

// rsrpIndex maps RSRP in dBm to the reported value of TS 36.133 (0: < -140 dBm ... 97: >= -44).
func rsrpIndex(dBm int64) int64 { return max(0, min(97, dBm+141)) }

// rsrqIndex maps RSRQ in dB to the reported value of TS 36.133 (0: < -19.5 dB ... 34: >= -3).
func rsrqIndex(dB int64) int64 { return max(0, min(34, 2*(dB+20))) }

func containsInt(list []int64, v int64) bool {
	for _, e := range list {
		if e == v {
			return true
		}
	}
	return false
}
