// Package mp1 registers a Go service on the MEC platform over Mp1 (ETSI GS MEC 011 v2):
// confirm ready, register each of its ServiceInfos (e.g. the RNIS once per transport),
// subscribe to the app's termination; on shutdown or on the platform's termination
// notification: deregister, unsubscribe, confirm termination. The platform is retried with
// capped exponential backoff while unreachable ("platform" in /healthz). It mirrors
// mec_common.mp1.MecAppRegistration for the Go services (rnis-adapter, tunnel).
package mp1

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/svc"
)

const (
	serviceMgmt = "/mec_service_mgmt/v1"
	appSupport  = "/mec_app_support/v1"
)

// Config of the registration.
type Config struct {
	PlatformURL, AppInstanceID, ClientID, ClientSecret string
	PublicURL                                          string           // this service's base URL
	Services                                           []map[string]any // MEC 011 ServiceInfoPost bodies
}

// Registration is the app's life on the platform.
type Registration struct {
	cfg    Config
	health *svc.Health
	log    *slog.Logger
	client *http.Client
	secret string // path element of the termination callback: only the platform knows it

	mu           sync.Mutex
	token        string
	tokenExpiry  time.Time
	registered   []string // serInstanceIds
	subscription string
	done         bool
}

// New returns a registration; Run performs it.
func New(cfg Config, health *svc.Health, log *slog.Logger) *Registration {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	cfg.PlatformURL = strings.TrimSuffix(cfg.PlatformURL, "/")
	return &Registration{cfg: cfg, health: health, log: log, client: &http.Client{Timeout: 5 * time.Second},
		secret: hex.EncodeToString(b)}
}

// CallbackPath is where the platform delivers the AppTerminationNotification.
func (r *Registration) CallbackPath() string { return "/mec/notifications/app_termination/" + r.secret }

// Handler serves the termination notification: it cleans up, then calls terminate. The
// request must carry a bearer token that verify accepts for our subscription (its URI: the
// platform's notification token bound to it, as mec_common.mp1.termination_router checks
// it): the secret path alone is not enough, nor a notification token of another subscription.
func (r *Registration) Handler(terminate func(), verify func(token, subscription string) bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		subscription := r.subscription
		r.mu.Unlock()
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		if !ok || !verify(strings.TrimSpace(token), subscription) {
			w.Header().Set("WWW-Authenticate", "Bearer")
			svc.Problem(w, req, http.StatusUnauthorized, "a platform notification token is required")
			return
		}
		var body struct {
			OperationAction string `json:"operationAction"`
		}
		if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil ||
			(body.OperationAction != "STOPPING" && body.OperationAction != "TERMINATING") {
			svc.Problem(w, req, http.StatusBadRequest, "operationAction must be STOPPING or TERMINATING")
			return
		}
		r.log.Info("termination requested by the platform", "operation_action", body.OperationAction)
		w.WriteHeader(http.StatusNoContent)
		go func() {
			r.Stop(body.OperationAction)
			terminate()
		}()
	}
}

// Run registers (retrying with backoff) and, when ctx ends, deregisters.
func (r *Registration) Run(ctx context.Context) {
	r.health.Set("platform", false, "registering", true)
	backoff := 200 * time.Millisecond
	for {
		err := r.registerOnce(ctx)
		if err == nil {
			break
		}
		r.health.Set("platform", false, fmt.Sprintf("retrying in %v: %v", backoff, err), true)
		r.log.Warn("platform registration failed; retrying", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			r.Stop("TERMINATING")
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	r.health.Set("platform", true, fmt.Sprintf("registered %d service(s)", len(r.registered)), true)
	r.log.Info("registered on the MEC platform", "services", len(r.registered))
	<-ctx.Done()
	r.Stop("TERMINATING")
}

// registerOnce does the steps not done yet (each step is done once across retries).
func (r *Registration) registerOnce(ctx context.Context) error {
	app := "/applications/" + url.PathEscape(r.cfg.AppInstanceID)
	if err := r.call(ctx, http.MethodPost, appSupport+app+"/confirm_ready", map[string]any{"indication": "READY"}, nil, nil); err != nil {
		return err
	}
	for len(r.registered) < len(r.cfg.Services) {
		var created struct {
			SerInstanceID string `json:"serInstanceId"`
		}
		info := r.cfg.Services[len(r.registered)]
		if err := r.call(ctx, http.MethodPost, serviceMgmt+app+"/services", info, &created, nil); err != nil {
			return err
		}
		if created.SerInstanceID == "" {
			return errors.New("platform returned no serInstanceId")
		}
		r.mu.Lock()
		r.registered = append(r.registered, created.SerInstanceID)
		r.mu.Unlock()
	}
	if r.subscription == "" {
		sub := map[string]any{"subscriptionType": "AppTerminationNotificationSubscription",
			"callbackReference": r.cfg.PublicURL + r.CallbackPath(), "appInstanceId": r.cfg.AppInstanceID}
		var header http.Header
		if err := r.call(ctx, http.MethodPost, appSupport+app+"/subscriptions", sub, nil, &header); err != nil {
			return err
		}
		r.mu.Lock()
		r.subscription = header.Get("Location")
		r.mu.Unlock()
	}
	return nil
}

// Stop deregisters, unsubscribes and confirms termination (idempotent, best effort).
func (r *Registration) Stop(action string) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	r.done = true
	registered, sub := r.registered, r.subscription
	r.registered, r.subscription = nil, ""
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	app := "/applications/" + url.PathEscape(r.cfg.AppInstanceID)
	for _, id := range registered {
		r.quietly(r.call(ctx, http.MethodDelete, serviceMgmt+app+"/services/"+url.PathEscape(id), nil, nil, nil))
	}
	if sub != "" {
		r.quietly(r.call(ctx, http.MethodDelete, strings.TrimPrefix(sub, r.cfg.PlatformURL), nil, nil, nil))
	}
	// 409: no termination in progress (we stop on our own), which is fine.
	r.quietly(r.call(ctx, http.MethodPost, appSupport+app+"/confirm_termination", map[string]any{"operationAction": action}, nil, nil))
	r.health.Set("platform", false, "terminated", false)
}

func (r *Registration) quietly(err error) {
	var status *statusError
	if err != nil && !(errors.As(err, &status) && (status.code == 404 || status.code == 409)) {
		r.log.Warn("platform cleanup step failed", "err", err)
	}
}

type statusError struct {
	code   int
	detail string
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.detail) }

// call makes an authenticated request; a 401 fetches a new token once.
func (r *Registration) call(ctx context.Context, method, path string, body, out any, header *http.Header) error {
	for attempt := 1; ; attempt++ {
		token, err := r.accessToken(ctx)
		if err != nil {
			return err
		}
		var reader io.Reader
		if body != nil {
			raw, _ := json.Marshal(body)
			reader = bytes.NewReader(raw)
		}
		req, err := http.NewRequestWithContext(ctx, method, r.cfg.PlatformURL+path, reader)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := r.client.Do(req)
		if err != nil {
			return err
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && attempt == 1 {
			r.mu.Lock()
			r.token = ""
			r.mu.Unlock()
			continue
		}
		if resp.StatusCode >= 400 {
			return &statusError{resp.StatusCode, fmt.Sprintf("%s %s: %.300s", method, path, raw)}
		}
		if header != nil {
			*header = resp.Header
		}
		if out != nil {
			return json.Unmarshal(raw, out)
		}
		return nil
	}
}

// accessToken returns a client-credentials token, renewed 30 s before it expires.
func (r *Registration) accessToken(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.token != "" && time.Now().Before(r.tokenExpiry.Add(-30*time.Second)) {
		return r.token, nil
	}
	form := url.Values{"grant_type": {"client_credentials"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.PlatformURL+"/oauth2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return "", err
	}
	req.SetBasicAuth(r.cfg.ClientID, r.cfg.ClientSecret)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := r.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string  `json:"access_token"`
		ExpiresIn   float64 `json:"expires_in"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return "", &statusError{resp.StatusCode, fmt.Sprintf("token: %.300s", raw)}
	}
	if err := json.Unmarshal(raw, &tok); err != nil || tok.AccessToken == "" {
		return "", errors.New("token endpoint returned no access_token")
	}
	if tok.ExpiresIn <= 0 {
		tok.ExpiresIn = 300
	}
	r.token, r.tokenExpiry = tok.AccessToken, time.Now().Add(time.Duration(tok.ExpiresIn*float64(time.Second)))
	return r.token, nil
}

// Attach prepares the registration of a service on the platform: the termination callback
// goes on mux (accepted with one of the service's static tokens or the platform's
// notification token for our subscription, as mec_common.auth's verify_notification),
// terminate is called after
// the platform's termination. Run the returned registration's Run in a goroutine.
func Attach(mux *http.ServeMux, cfg Config, static auth.StaticTokens, platform *auth.Platform,
	terminate func(), health *svc.Health, log *slog.Logger) *Registration {
	reg := New(cfg, health, log)
	fromPlatform := func(token, subscription string) bool {
		return static.Verify(token) || platform.VerifyNotification(token, subscription)
	}
	mux.Handle("POST "+reg.CallbackPath(), reg.Handler(terminate, fromPlatform))
	return reg
}
