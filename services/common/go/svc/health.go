package svc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Health is the state of a service's dependencies, in the shape of mec_common.health.
type Health struct {
	mu     sync.Mutex
	checks map[string]*check
}

type check struct {
	OK       bool    `json:"ok"`
	Detail   string  `json:"detail"`
	Required bool    `json:"required"`
	Since    float64 `json:"since"`
}

// NewHealth returns an empty report.
func NewHealth() *Health { return &Health{checks: map[string]*check{}} }

// Set records a dependency's state; "since" only moves when ok changes.
func (h *Health) Set(name string, ok bool, detail string, required bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.checks[name]; c != nil && c.OK == ok {
		c.Detail, c.Required = detail, required
		return
	}
	h.checks[name] = &check{OK: ok, Detail: detail, Required: required, Since: float64(time.Now().UnixNano()) / 1e9}
}

// OK tells whether every required dependency is up.
func (h *Health) OK() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.checks {
		if c.Required && !c.OK {
			return false
		}
	}
	return true
}

// ServeHTTP answers /healthz: 200 when every required dependency is up, else 503.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	names := make([]string, 0, len(h.checks))
	for n := range h.checks {
		names = append(names, n)
	}
	sort.Strings(names)
	checks := make(map[string]check, len(names))
	for _, n := range names {
		checks[n] = *h.checks[n]
	}
	h.mu.Unlock()
	status, code := "ok", http.StatusOK
	if !h.OK() {
		status, code = "degraded", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "checks": checks})
}

// KeepRunning runs run until ctx ends, and again after each failure with a capped
// exponential backoff (200 ms doubling to 5 s), each failure shown under check in health
// (not required) and logged: a lost broker or peer is retried, never a crash loop.
func KeepRunning(ctx context.Context, health *Health, check, what string, log *slog.Logger,
	run func(context.Context) error) {
	health.Set(check, false, "connecting", false)
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		health.Set(check, false, fmt.Sprintf("retrying in %v: %v", backoff, err), false)
		log.Warn(what+" lost; retrying", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
