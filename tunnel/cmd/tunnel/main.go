// Command tunnel is one end of the suite's multipath tunnel: TUN on each end, one UDP
// socket per path, FQ-CoDel at the ingress, a path scheduler, REST /tunnel/v1.
// See docs/tunnel.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"mts.invalid/suite/services/common/go/mecapp"
	"mts.invalid/suite/services/common/go/svc"
	"mts.invalid/suite/tunnel/internal/api"
	"mts.invalid/suite/tunnel/internal/backlogfeed"
	"mts.invalid/suite/tunnel/internal/config"
	"mts.invalid/suite/tunnel/internal/engine"
	"mts.invalid/suite/tunnel/internal/rnisfeed"
	"mts.invalid/suite/tunnel/internal/threadsched"
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
	if cfg.SchedSliceUS != 0 { // before the engine's goroutines: threads started later inherit it
		if err := threadsched.ApplySlice(time.Duration(cfg.SchedSliceUS) * time.Microsecond); err != nil {
			return fmt.Errorf("%sSCHED_SLICE_US: %w", config.Prefix, err)
		}
	}
	engCfg, err := cfg.Engine()
	if err != nil {
		return err
	}
	backlogUE, publishBacklog, err := cfg.BacklogFeed(engCfg.Paths)
	if err != nil {
		return err
	}
	// any app on the platform may call with the tokens it issues
	app, err := mecapp.New(&cfg.Common, "tunnel", "", log)
	if err != nil {
		return err
	}
	defer app.Stop()
	eng, err := engine.New(engCfg, log)
	if err != nil {
		return err
	}
	app.Health.Set("data_plane", true, fmt.Sprintf("TUN %s, %d path(s)", engCfg.TUN, len(engCfg.Paths)), true)
	app.Mux.Handle("GET /metrics", api.Metrics(eng))
	api.New(eng, cfg.Public(), app.Verifiers(), cfg.PublicURL).Routes(app.Mux)
	listener, err := app.Listen()
	if err != nil {
		eng.Close()
		return err
	}
	log.Info("tunnel started", "role", cfg.Role, "peer", cfg.PeerID, "tun", engCfg.TUN, "paths", len(engCfg.Paths),
		"queue", cfg.Queue, "scheduler", cfg.Scheduler, "cwnd", cfg.CwndMode, "schedSliceUs", cfg.SchedSliceUS, "listen", listener.Addr().String())

	app.Go(eng.Run)
	if ues := eng.RadioUEs(); cfg.AMQPURL != "" && len(ues) > 0 {
		app.Go(func(ctx context.Context) {
			rnisfeed.Run(ctx, cfg.AMQPURL, cfg.RnisExchange, ues, eng.SetRadio, app.Health, log)
		})
	}
	if publishBacklog {
		app.Go(func(ctx context.Context) {
			backlogfeed.Run(ctx, cfg.AMQPURL, cfg.BacklogExchange, backlogUE, cfg.BacklogInterval, eng.Backlog, app.Health, log)
		})
	}
	if err := app.Serve(listener, serviceInfos(cfg.PublicURL)); err != nil {
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
