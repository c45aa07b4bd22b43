// Command rnis-adapter turns FlexRAN statistics into the RNIS feed (AMQP) and the ETSI MEC 012
// Radio Network Information API. See docs/rnis-adapter.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/config"
	"mts.invalid/suite/rnis-adapter/internal/e2"
	"mts.invalid/suite/rnis-adapter/internal/feed"
	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/identity"
	"mts.invalid/suite/rnis-adapter/internal/ipmap"
	"mts.invalid/suite/rnis-adapter/internal/meas"
	"mts.invalid/suite/rnis-adapter/internal/mec012"
	"mts.invalid/suite/rnis-adapter/internal/obs"
	"mts.invalid/suite/rnis-adapter/internal/pipeline"
	"mts.invalid/suite/rnis-adapter/internal/poller"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
	"mts.invalid/suite/rnis-adapter/internal/uestate"
	"mts.invalid/suite/services/common/go/mecapp"
	"mts.invalid/suite/services/common/go/svc"
)

const usage = `rnis-adapter: FlexRAN statistics → RNIS feed (AMQP) and ETSI MEC 012 API

Usage:
  rnis-adapter serve [flags]        poll the RAN, publish, serve /rni/v2 (flags: serve -h)
  rnis-adapter parse [--ip-map F] FILE
                                    print the normalized measurements of one FlexRAN JSON
                                    document (FILE or - for stdin) as a JSON array; exit 2 if
                                    the document is not usable
  rnis-adapter e2-record [--addr A] [--token-file F] [--lines N] [--seconds S]
                                    copy an mts-e2 stream (docs/e2.md) to stdout as received,
                                    its hello first: how testdata/e2 is recorded
  rnis-adapter env                  print the settings table (Markdown)
  rnis-adapter version

Every serve flag can be set by its environment variable (RNIS_<FLAG>, e.g. RNIS_POLL_PERIOD).
`

var version = "0.1.0"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var code int
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "serve":
		code = serve(args)
	case "parse":
		code = parse(args, os.Stdin, os.Stdout, os.Stderr)
	case "e2-record":
		code = e2Record(args, os.Stdout, os.Stderr)
	case "env":
		fmt.Print(config.Markdown())
	case "version", "--version":
		fmt.Println("rnis-adapter", version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "rnis-adapter: unknown command %q\n\n%s", cmd, usage)
		code = 2
	}
	os.Exit(code)
}

// parse prints the measurements of one document; exit 2 on an unusable document.
func parse(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("parse", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mapFile := fs.String("ip-map", "", "JSON file mapping IMSI or <bs_id>/<rnti> to UE IPv4")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: rnis-adapter parse [--ip-map FILE] FILE|-")
		return 2
	}
	var doc []byte
	var err error
	if name := fs.Arg(0); name == "-" {
		doc, err = io.ReadAll(stdin)
	} else {
		doc, err = os.ReadFile(name)
	}
	if err != nil {
		fmt.Fprintln(stderr, "rnis-adapter:", err)
		return 2
	}
	var ips meas.Resolver
	if *mapFile != "" {
		m, err := ipmap.Load(*mapFile)
		if err != nil {
			fmt.Fprintln(stderr, "rnis-adapter: --ip-map:", err)
			return 2
		}
		ips = m
	}
	var p flexran.Parser
	snaps, err := p.Parse(doc)
	if err != nil {
		fmt.Fprintf(stderr, "rnis-adapter: %s: %v\n", fs.Arg(0), err)
		return 2
	}
	out := []byte("[")
	n := 0
	now := time.Now()
	for i := range snaps {
		for _, skip := range snaps[i].Skipped {
			fmt.Fprintf(stderr, "rnis-adapter: sample %d, bs_id %d, UE entry %d skipped: %s\n", i, skip.BSID, skip.Index, skip.Reason)
		}
		// one document on its own: when it was measured is unknown (source_time_ns null)
		for _, m := range meas.Normalize(&snaps[i], now, ips, nil) {
			if n > 0 {
				out = append(out, ",\n "...)
			}
			out = m.AppendJSON(out)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintf(stderr, "rnis-adapter: %s: no UE statistics (mac_stats) in the document\n", fs.Arg(0))
	}
	out = append(out, "]\n"...)
	_, _ = stdout.Write(out)
	return 0
}

// e2Record copies an mts-e2 stream to stdout; exit 1 when it cannot be read.
func e2Record(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("e2-record", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:36430", "host:port of the stream")
	tokenFile := fs.String("token-file", "", "file holding the stream's token")
	lines := fs.Int("lines", 1000, "stop after this many lines (the hello included)")
	seconds := fs.Float64("seconds", 10, "stop after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := e2.Config{Addr: *addr}
	if *tokenFile != "" {
		raw, err := os.ReadFile(*tokenFile)
		if err != nil {
			fmt.Fprintln(stderr, "rnis-adapter:", err)
			return 2
		}
		cfg.Token = strings.TrimSpace(string(raw))
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "rnis-adapter:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*seconds*float64(time.Second)))
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := e2.New(cfg, e2.Discard{}, log).Record(ctx, stdout, *lines); err != nil {
		fmt.Fprintln(stderr, "rnis-adapter: e2-record:", err)
		return 1
	}
	return 0
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	cfg, err := config.Load(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "rnis-adapter:", err)
		return 2
	}
	log := svc.NewLogger(cfg.LogLevel, cfg.LogFormat)
	if os.Getenv("GOGC") == "" {
		// Each poll makes ~200 kB of short-lived garbage at 1 kHz on a heap of a few MB: fewer,
		// larger collections cost less CPU. GOGC in the environment still wins.
		debug.SetGCPercent(400)
	}
	if err := run(cfg, log); err != nil {
		log.Error("rnis-adapter stopped", "err", err)
		return 1
	}
	return 0
}

func run(cfg *config.Config, log *slog.Logger) error {
	format, err := ranclock.ParseSFNFormat(cfg.SFNFormat)
	if err != nil {
		return err
	}
	clock := ranclock.New(format)
	pcfg := poller.Config{BaseURL: strings.TrimSuffix(cfg.FlexRANURL, "/"), Path: cfg.FlexRANPath, Token: cfg.FlexRANToken, Split: cfg.Split,
		Period: cfg.PollPeriod, Timeout: cfg.PollTimeout, ConfigPeriod: cfg.ConfigPeriod, ReportSF: cfg.ReportSF,
		Clock: clock, StaleBound: cfg.StaleBound}
	ecfg := e2.Config{Addr: cfg.E2Addr, Token: cfg.E2Token}
	if cfg.Source == "e2" {
		err = ecfg.Validate()
	} else {
		err = pcfg.Validate()
	}
	if err != nil {
		return err
	}
	var static identity.Static // what the IP map says; the book learns the rest
	var ipm *ipmap.Map
	if cfg.IPMapFile != "" {
		m, err := ipmap.Load(cfg.IPMapFile)
		if err != nil {
			return err
		}
		static, ipm = m, m
	}
	// apps whose AppD requires "rnis", and the operator, may call with the platform's tokens
	app, err := mecapp.New(&cfg.Common, "rnis-adapter", "rnis", log)
	if err != nil {
		return err
	}
	defer app.Stop()
	metrics := obs.NewMetrics(app.Health)
	app.Health.Set("ran_source", false, "not polled yet", true)
	app.Health.Set("broker", false, "not connected yet", true)
	tracker := uestate.New(cfg.DetachAfter)
	pub := feed.New(feed.Config{URL: cfg.AMQPURL, Exchange: cfg.Exchange, MaxInFlight: cfg.MaxInFlight, MaxLag: cfg.MaxLag}, metrics, log)
	apiCfg := mec012.Config{PublicURL: cfg.PublicURL, NotifyTimeout: cfg.NotifyTimeout, MaxSubsPerApp: cfg.MaxSubsPerApp, Tokens: app.Tokens,
		SubscriptionsFile: filepath.Join(cfg.StateDir, "rnis-subscriptions.json"), AppInstanceID: cfg.AppInstanceID}
	if app.Platform != nil {
		apiCfg.Verifiers = append(apiCfg.Verifiers, app.Platform)
	}
	api, err := mec012.New(apiCfg, tracker, metrics, log)
	if err != nil {
		return err
	}
	book, err := identity.New(static, filepath.Join(cfg.StateDir, "rnis-ue-identity.json"), log)
	if err != nil {
		return err
	}
	pipe := &pipeline.Pipeline{UEs: book, Clock: clock, Tracker: tracker, Pub: pub, Sink: api, Metrics: metrics, Publish: cfg.Publish}

	app.Mux.Handle("GET /metrics", metrics.Handler())
	api.Routes(app.Mux)
	listener, err := app.Listen()
	if err != nil {
		return err
	}
	ranSource := pcfg.BaseURL + pcfg.Path
	if cfg.Source == "e2" {
		ranSource = "e2 stream " + ecfg.Addr
	}
	log.Info("rnis-adapter started", "version", version, "listen", listener.Addr().String(), "ran_source", ranSource,
		"poll_period", cfg.PollPeriod.String(), "exchange", cfg.Exchange, "publish", cfg.Publish)

	if cfg.DebugAddr != "" {
		go func() {
			log.Warn("pprof served without auth", "addr", cfg.DebugAddr)
			debugMux := http.NewServeMux()
			debugMux.HandleFunc("/debug/pprof/", pprof.Index)
			debugMux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			_ = http.ListenAndServe(cfg.DebugAddr, debugMux) //nolint:gosec // opt-in, for profiling
		}()
	}
	app.Go(pub.Run)
	app.Go(api.Run)
	handle := func(s *flexran.Snapshot, t time.Time) {
		if ipm != nil {
			_ = ipm.Reload() // cheap stat; a bad edit keeps the last good mapping
		}
		pipe.Handle(s, t)
	}
	if cfg.Source == "e2" {
		app.Go(func(ctx context.Context) { e2.New(ecfg, metrics, log).Run(ctx, handle) })
	} else {
		app.Go(func(ctx context.Context) { poller.New(pcfg, metrics, log).Run(ctx, handle) })
	}
	if err := app.Serve(listener, serviceInfos(cfg.PublicURL, cfg.AMQPURL, cfg.Exchange)); err != nil {
		return err
	}
	log.Info("rnis-adapter stopped")
	return nil
}
