// Command ran-emulator is a TTI-level LTE/NR RAN emulator: it forwards IP packets between
// TUN devices through per-UE RLC queues served by a MAC scheduler with HARQ, and serves
// the FlexRAN controller's northbound statistics API from its live MAC state.
//
//	ran-emulator -config emulator.json
//
// Settings come from flags or EMU_* environment variables (flags win); see -help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"mts.invalid/suite/testbed/ran-emulator/internal/api"
	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func main() {
	fs := flag.NewFlagSet("ran-emulator", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: ran-emulator -config FILE [flags]\n\n"+
			"TTI-level LTE/NR RAN emulator with FlexRAN's northbound API (see docs/ran-emulator.md).\n\n")
		fs.PrintDefaults()
	}
	config := fs.String("config", env("EMU_CONFIG", ""), "emulator configuration (JSON) [EMU_CONFIG]")
	host := fs.String("http-host", env("EMU_HTTP_HOST", "0.0.0.0"), "API listen address [EMU_HTTP_HOST]")
	port := fs.String("http-port", env("EMU_HTTP_PORT", "9999"), "API port (FlexRAN's) [EMU_HTTP_PORT]")
	e2Port := fs.String("e2-port", env("EMU_E2_PORT", ""), "if set, serve the mts-e2 stream (docs/e2.md) on this port of http-host, to clients with an API token [EMU_E2_PORT]")
	tokens := fs.String("api-tokens", env("EMU_API_TOKENS", ""), "comma-separated bearer tokens; none: generate one [EMU_API_TOKENS]")
	stateDir := fs.String("state-dir", env("EMU_STATE_DIR", "/var/lib/mts"), "where a generated token is written [EMU_STATE_DIR]")
	level := fs.String("log-level", env("EMU_LOG_LEVEL", "info"), "debug, info, warn or error [EMU_LOG_LEVEL]")
	format := fs.String("log-format", env("EMU_LOG_FORMAT", "json"), "json or console [EMU_LOG_FORMAT]")
	rtRuntime := fs.Bool("rt-runtime", env("EMU_RT_RUNTIME", "true") == "true",
		"run every runtime thread at SCHED_FIFO 1 so that the TTI clock never waits for an ordinary thread [EMU_RT_RUNTIME]")
	memLimit := fs.Int("memory-limit-mb", atoiOr(env("EMU_MEMORY_LIMIT_MB", "512"), 512),
		"heap size at which Go collects garbage; below it the GC never runs, as a GC pause can stall the TTI clock [EMU_MEMORY_LIMIT_MB]")
	fs.Parse(os.Args[1:])

	log, err := newLogger(*level, *format)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ran-emulator:", err)
		os.Exit(2)
	}
	if *config == "" {
		fs.Usage()
		os.Exit(2)
	}
	// The packet path does not allocate; what does (API responses, snapshots) is little, so
	// collect only when the heap reaches the limit.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(int64(*memLimit) << 20)
	runtime.GOMAXPROCS(runtime.NumCPU() + 1) // the TTI clock keeps one P for itself
	e2Listen := ""
	if *e2Port != "" {
		e2Listen = net.JoinHostPort(*host, *e2Port)
	}
	if err := run(*config, net.JoinHostPort(*host, *port), e2Listen, *tokens, *stateDir, *rtRuntime, log); err != nil {
		log.Error("ran-emulator failed", "err", err)
		os.Exit(1)
	}
}

func run(configPath, listen, e2Listen, tokenList, stateDir string, rtRuntime bool, log *slog.Logger) error {
	cfg, err := ran.LoadConfig(configPath)
	if err != nil {
		return err
	}
	emu, err := ran.New(cfg, log)
	if err != nil {
		return err
	}
	if cfg.RTPriority > 0 && rtRuntime {
		if err := ran.RealtimeRuntime(); err != nil {
			log.Warn("runtime threads stay ordinary threads: the TTI clock may stall under load", "err", err)
		}
	}
	tokens, err := api.Tokens(tokenList, stateDir, log)
	if err != nil {
		return fmt.Errorf("api tokens: %w", err)
	}
	srv, err := api.NewServer(emu, tokens, listen, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	var e2ln net.Listener
	if e2Listen != "" {
		if e2ln, err = net.Listen("tcp", e2Listen); err != nil {
			ln.Close()
			return err
		}
	}
	if err := emu.Run(); err != nil {
		ln.Close()
		if e2ln != nil {
			e2ln.Close()
		}
		return err
	}
	ctx, cancelE2 := context.WithCancel(context.Background())
	defer cancelE2()
	if e2ln != nil {
		go api.NewE2Stream(emu, tokens, log).Serve(ctx, e2ln)
		log.Info("mts-e2 stream served", "listen", e2ln.Addr().String())
	}
	httpSrv := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	log.Info("ran-emulator running", "listen", listen, "cells", len(cfg.Cells), "ues", len(cfg.UEs),
		"tick_us", float64(emu.TickNs())/1000)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	log.Info("stopping")
	cancelE2()
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	httpSrv.Shutdown(shutdown)
	emu.Stop()
	return nil
}

func newLogger(level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "console":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or console", format)
}

func atoiOr(s string, def int) int {
	if v, err := strconv.Atoi(s); err == nil {
		return v
	}
	return def
}
