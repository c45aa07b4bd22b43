// Command tunnel is one end of the suite's multipath tunnel: TUN on each end, one UDP
// socket per path, FQ-CoDel at the ingress, a path scheduler, REST /tunnel/v1.
// See docs/tunnel.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/mp1"
	"mts.invalid/suite/services/common/go/svc"
	"mts.invalid/suite/tunnel/internal/api"
	"mts.invalid/suite/tunnel/internal/config"
	"mts.invalid/suite/tunnel/internal/engine"
	"mts.invalid/suite/tunnel/internal/rnisfeed"
)

const usage = `tunnel: one end of the multipath tunnel (docs/tunnel.md)

Usage:
  tunnel serve [flags]   run the data plane and serve /tunnel/v1 (flags: serve -h)
  tunnel openapi         print the API's OpenAPI document
  tunnel env             print the settings table (Markdown)

Every serve flag can be set by its environment variable (TUNNEL_<FLAG>, e.g. TUNNEL_SCHEDULER).
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch cmd := os.Args[1]; cmd {
	case "serve":
		if err := serve(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "tunnel:", err)
			os.Exit(1)
		}
	case "openapi":
		fmt.Println(string(api.OpenAPI("http://127.0.0.1:8105")))
	case "env":
		fmt.Print(config.Markdown())
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "tunnel: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
}

func serve(args []string) error {
	cfg, err := config.Load(flag.NewFlagSet("serve", flag.ContinueOnError), args)
	if err != nil {
		return err
	}
	log := svc.NewLogger(cfg.LogLevel, cfg.LogFormat)
	engCfg, err := cfg.Engine()
	if err != nil {
		return err
	}
	tokens, err := svc.APITokens(cfg.APITokens, cfg.StateDir, "tunnel", log)
	if err != nil {
		return err
	}
	verifiers := []auth.Verifier{auth.StaticTokens(tokens)}
	var platformTokens *auth.Platform
	if cfg.PlatformURL != "" { // apps on the platform call with the tokens it issues
		base := strings.TrimSuffix(cfg.PlatformURL, "/")
		// revoked clients (terminated or deleted instances) refused: docs/security.md
		platformTokens = auth.NewPlatform(base + "/oauth2/jwks").
			WithRevocations(auth.NewRevocations(base + "/oauth2/revocations"))
		verifiers = append(verifiers, platformTokens)
	}
	eng, err := engine.New(engCfg, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	health := svc.NewHealth()
	health.Set("data_plane", true, fmt.Sprintf("TUN %s, %d path(s)", engCfg.TUN, len(engCfg.Paths)), true)
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", health)
	mux.Handle("GET /metrics", api.Metrics(eng))
	api.New(eng, cfg.Public(), verifiers, cfg.PublicURL).Routes(mux)
	listener, err := net.Listen("tcp", net.JoinHostPort(cfg.HTTPHost, strconv.Itoa(cfg.HTTPPort)))
	if err != nil {
		eng.Close()
		return err
	}
	trusted, err := svc.ParsePrefixes(cfg.TrustedProxies)
	if err != nil {
		eng.Close()
		return fmt.Errorf("%sTRUSTED_PROXIES: %w", config.Prefix, err)
	}
	server := &http.Server{Handler: svc.PublicBase(cfg.PublicURL, trusted, mux), ReadHeaderTimeout: 5 * time.Second}
	log.Info("tunnel started", "role", cfg.Role, "peer", cfg.PeerID, "tun", engCfg.TUN, "paths", len(engCfg.Paths),
		"queue", cfg.Queue, "scheduler", cfg.Scheduler, "cwnd", cfg.CwndMode, "listen", listener.Addr().String())

	var wg sync.WaitGroup
	start := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	start(func() { eng.Run(ctx) })
	if ues := eng.RadioUEs(); cfg.AMQPURL != "" && len(ues) > 0 {
		start(func() { rnisfeed.Run(ctx, cfg.AMQPURL, cfg.RnisExchange, ues, eng.SetRadio, health, log) })
	}
	if cfg.PlatformURL != "" {
		reg := mp1.Attach(mux, mp1.Config{PlatformURL: cfg.PlatformURL, AppInstanceID: cfg.AppInstanceID,
			ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, PublicURL: cfg.PublicURL,
			Services: serviceInfos(cfg.PublicURL)}, tokens, platformTokens, stop, health, log)
		start(func() { reg.Run(ctx) })
	}
	err = svc.Serve(ctx, server, listener)
	stop()
	wg.Wait()
	if err != nil {
		return err
	}
	log.Info("tunnel stopped")
	return nil
}

// serviceInfos is the tunnel's Mp1 registration (MEC 011 ServiceInfoPost): serName
// "mp-tunnel", its REST API.
func serviceInfos(publicURL string) []map[string]any {
	return []map[string]any{{"serName": "mp-tunnel", "version": "1.0.0", "state": "ACTIVE", "serializer": "JSON",
		"serCategory":     map[string]any{"href": publicURL + api.Base, "id": "MP-TUNNEL", "name": "Multipath tunnel", "version": "v1"},
		"scopeOfLocality": "MEC_HOST", "consumedLocalOnly": true, "isLocal": true,
		"transportInfo": map[string]any{"id": "mp-tunnel-rest", "name": "tunnel REST API", "type": "REST_HTTP",
			"protocol": "HTTP", "version": "1.1", "endpoint": map[string]any{"uris": []string{publicURL + api.Base}},
			"security": map[string]any{}}}}
}
