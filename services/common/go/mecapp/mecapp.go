// Package mecapp runs a Go service of the suite as a MEC app: its API tokens (the static
// ones and, with a platform, the platform's JWTs), its HTTP API, the workers it starts, and
// with a platform its Mp1 registration. Everything stops together on SIGINT/SIGTERM or on
// the platform's termination notification. The rnis-adapter and the tunnel run on it; its
// Python twin is mec_common.rest_service.
package mecapp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/mp1"
	"mts.invalid/suite/services/common/go/svc"
)

// App is one service's run: build it with New, add routes to Mux and workers with Go,
// then Serve.
type App struct {
	Log      *slog.Logger
	Health   *svc.Health    // served at GET /healthz
	Mux      *http.ServeMux // the API; /healthz is on it
	Tokens   []string       // the static API tokens, configured or generated
	Platform *auth.Platform // the platform's tokens; nil when standalone

	settings *svc.Common
	trusted  []netip.Prefix // proxies whose forwarded base is honoured
	ctx      context.Context
	stop     context.CancelFunc
	workers  sync.WaitGroup
}

// New prepares the app of the service name (its generated token is <STATE_DIR>/<name>.token).
// With a platform, its tokens are accepted from the apps whose AppD requires consumedAs
// (and the operator's), or from any app on the platform when consumedAs is empty; revoked
// clients are refused (docs/security.md). Call Stop if Serve is never reached.
func New(settings *svc.Common, name, consumedAs string, log *slog.Logger) (*App, error) {
	trusted, err := svc.ParsePrefixes(settings.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("TRUSTED_PROXIES: %w", err)
	}
	tokens, err := svc.APITokens(settings.APITokens, settings.StateDir, name, log)
	if err != nil {
		return nil, err
	}
	a := &App{Log: log, Health: svc.NewHealth(), Mux: http.NewServeMux(), Tokens: tokens,
		settings: settings, trusted: trusted}
	if settings.PlatformURL != "" {
		base := strings.TrimSuffix(settings.PlatformURL, "/")
		a.Platform = auth.NewPlatform(base + "/oauth2/jwks")
		if consumedAs != "" {
			a.Platform.ForService(consumedAs)
		}
		a.Platform.WithRevocations(auth.NewRevocations(base + "/oauth2/revocations"))
	}
	a.Mux.Handle("GET /healthz", a.Health)
	a.ctx, a.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	return a, nil
}

// Verifiers accept the static tokens and, with a platform, the platform's.
func (a *App) Verifiers() []auth.Verifier {
	verifiers := []auth.Verifier{auth.StaticTokens(a.Tokens)}
	if a.Platform != nil {
		verifiers = append(verifiers, a.Platform)
	}
	return verifiers
}

// Context ends when the app stops.
func (a *App) Context() context.Context { return a.ctx }

// Stop ends the app: Serve returns once the workers are done.
func (a *App) Stop() { a.stop() }

// Go runs f as a worker until the app stops; Serve waits for it.
func (a *App) Go(f func(ctx context.Context)) {
	a.workers.Add(1)
	go func() {
		defer a.workers.Done()
		f(a.ctx)
	}()
}

// Listen opens the API's listener at HTTP_HOST:HTTP_PORT.
func (a *App) Listen() (net.Listener, error) {
	return net.Listen("tcp", net.JoinHostPort(a.settings.HTTPHost, strconv.Itoa(a.settings.HTTPPort)))
}

// Serve serves the API on listener (at PUBLIC_URL, or the base that trusted proxies forward),
// registers services (MEC 011 ServiceInfoPost bodies) on the platform when there is one, and
// returns when the app has stopped and its workers are done.
func (a *App) Serve(listener net.Listener, services []map[string]any) error {
	if s := a.settings; s.PlatformURL != "" {
		reg := mp1.Attach(a.Mux, mp1.Config{PlatformURL: s.PlatformURL, AppInstanceID: s.AppInstanceID,
			ClientID: s.ClientID, ClientSecret: s.ClientSecret, PublicURL: s.PublicURL, Services: services},
			a.Tokens, a.Platform, a.stop, a.Health, a.Log)
		a.Go(reg.Run)
	}
	server := &http.Server{Handler: svc.PublicBase(a.settings.PublicURL, a.trusted, a.Mux), ReadHeaderTimeout: 5 * time.Second}
	err := svc.Serve(a.ctx, server, listener)
	a.stop()
	a.workers.Wait()
	return err
}
