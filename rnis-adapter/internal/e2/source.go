package e2

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
)

// Config of a Source.
type Config struct {
	Addr        string        // host:port of the stream (the xApp's or the emulator's)
	Token       string        // sent in the client's first line; the source refuses others
	DialTimeout time.Duration // also the time the source has to say hello
	IdleTimeout time.Duration // no line for this long: the connection counts as lost
	MaxBackoff  time.Duration
}

// Observer receives what the source sees (obs.Metrics).
type Observer interface {
	SourceUp(up bool, detail string)
	Polled(latency time.Duration, bytes int) // one indication line read
	PollFailed(reason string)
	Skipped(reason string)
}

// Discard is an Observer that keeps nothing (for Record).
type Discard struct{}

func (Discard) SourceUp(bool, string)     {}
func (Discard) Polled(time.Duration, int) {}
func (Discard) PollFailed(string)         {}
func (Discard) Skipped(string)            {}

// Handler processes one snapshot; observed is when its line arrived.
type Handler func(s *flexran.Snapshot, observed time.Time)

// MaxLine bounds one line: a MAC indication of 4096 UEs is ~1.5 MB.
const MaxLine = 4 << 20

// Source reads one mts-e2 stream and reconnects with backoff when it is lost.
type Source struct {
	cfg Config
	obs Observer
	log *slog.Logger
	asm Assembler
}

// New returns a source.
func New(cfg Config, obs Observer, log *slog.Logger) *Source {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 2 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 2 * time.Second
	}
	return &Source{cfg: cfg, obs: obs, log: log}
}

// Validate checks the address.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("E2 stream address %q: want host:port (%v)", c.Addr, err)
	}
	return nil
}

// Run reads the stream until ctx ends. A lost or refused connection is retried with capped
// exponential backoff (50 ms … MaxBackoff) and shown as ran_source down.
func (s *Source) Run(ctx context.Context, handle Handler) {
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		began := time.Now()
		err := s.session(ctx, handle)
		if ctx.Err() != nil {
			return
		}
		if time.Since(began) > 10*time.Second {
			backoff = 0 // it streamed for a while: the next loss starts the backoff again
		}
		backoff = min(max(2*backoff, 50*time.Millisecond), s.cfg.MaxBackoff)
		s.obs.SourceUp(false, fmt.Sprintf("E2 stream %s: %v", s.cfg.Addr, err))
		s.log.Warn("E2 stream lost", "addr", s.cfg.Addr, "err", err, "retry_in", backoff.String())
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// connect dials the source and shakes hands; the hello's raw line comes back too.
func (s *Source) connect(ctx context.Context) (net.Conn, *bufio.Reader, Hello, []byte, error) {
	d := net.Dialer{Timeout: s.cfg.DialTimeout, KeepAlive: 15 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		s.obs.PollFailed("unreachable")
		return nil, nil, Hello{}, nil, err
	}
	r := bufio.NewReaderSize(conn, 256<<10)
	hello, raw, err := s.handshake(conn, r)
	if err != nil {
		conn.Close()
		s.obs.PollFailed("handshake")
		return nil, nil, hello, nil, err
	}
	return conn, r, hello, raw, nil
}

// session connects, shakes hands and reads lines until the connection ends.
func (s *Source) session(ctx context.Context, handle Handler) error {
	conn, r, hello, _, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	detail := fmt.Sprintf("streaming from %s (%s, %s every %d ms)", s.cfg.Addr, hello.Source, strings.Join(hello.SM, "+"), hello.IntervalMs)
	s.log.Info("E2 stream connected", "addr", s.cfg.Addr, "source", hello.Source, "sm", hello.SM, "interval_ms", hello.IntervalMs)
	up := false
	for {
		_ = conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		line, err := readLine(r)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			s.obs.PollFailed("idle")
			return fmt.Errorf("no indication for %v: the xApp, the RIC or the E2 node stopped reporting", s.cfg.IdleTimeout)
		}
		if err != nil {
			s.obs.PollFailed("read")
			return err
		}
		observed := time.Now()
		if !up { // up once the first line arrives, not at the handshake
			s.obs.SourceUp(true, detail)
			up = true
		}
		s.obs.Polled(0, len(line))
		s.handleLine(line, observed, handle)
	}
}

// Record copies the stream as received, the hello first, to w until ctx ends or max lines
// (hello included) were written: how the fixtures in testdata/e2 are recorded.
func (s *Source) Record(ctx context.Context, w io.Writer, max int) error {
	conn, r, _, raw, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	line := raw
	for n := 0; n < max; n++ {
		if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(s.cfg.IdleTimeout))
		if line, err = readLine(r); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}

// handshake sends the client's line and reads the source's hello.
func (s *Source) handshake(conn net.Conn, r *bufio.Reader) (Hello, []byte, error) {
	var hello Hello
	client, _ := json.Marshal(map[string]any{"stream": StreamName, "v": Version, "token": s.cfg.Token})
	_ = conn.SetDeadline(time.Now().Add(s.cfg.DialTimeout))
	if _, err := conn.Write(append(client, '\n')); err != nil {
		return hello, nil, err
	}
	line, err := readLine(r)
	if err != nil {
		return hello, nil, fmt.Errorf("no hello: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	if err := json.Unmarshal(line, &hello); err != nil {
		return hello, nil, fmt.Errorf("hello is not JSON: %.200s", line)
	}
	switch {
	case hello.Type == "error":
		return hello, nil, fmt.Errorf("refused: %s", hello.Detail)
	case hello.Type != "hello" || hello.Stream != StreamName:
		return hello, nil, fmt.Errorf("not an %s stream: %.200s", StreamName, line)
	case hello.V != Version:
		return hello, nil, fmt.Errorf("%s v%d, this adapter reads v%d", StreamName, hello.V, Version)
	}
	return hello, append([]byte(nil), line...), nil
}

// handleLine decodes one line; what cannot be used is counted and skipped.
func (s *Source) handleLine(line []byte, observed time.Time, handle Handler) {
	ind, err := Decode(line)
	if err != nil {
		s.obs.Skipped(SkipBadLine)
		s.log.Debug("E2 line skipped", "err", err)
		return
	}
	if ind.Type != KindMAC && ind.Type != KindRLC {
		return // a kind this version does not read (v1 may add kinds)
	}
	snap, dropped := s.asm.Add(&ind, observed)
	for _, d := range dropped {
		s.obs.Skipped(d.Reason)
		s.log.Debug("E2 entry skipped", "reason", d.Reason, "detail", d.Detail)
	}
	if snap != nil {
		handle(snap, observed)
	}
}

var errTooLong = errors.New("line longer than MaxLine")

// readLine returns the next line without its newline (valid until the next read).
func readLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if line, err = r.ReadSlice('\n'); len(long)+len(line) > MaxLine {
				return nil, errTooLong
			}
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		return nil, err
	}
	return line[:len(line)-1], nil
}
