// Package svc is what every Go service of the suite shares around its API: health
// (/healthz in mec_common.health's shape), the logger, API tokens (deny by default), bearer
// authorization and ETSI ProblemDetails. Its Python twin is mec_common.
package svc

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"mts.invalid/suite/services/common/go/auth"
)

// NewLogger returns a slog logger at level (DEBUG, INFO, WARNING, ERROR) in format json or console.
func NewLogger(level, format string) *slog.Logger {
	var l slog.Level
	switch strings.ToUpper(level) {
	case "DEBUG":
		l = slog.LevelDebug
	case "WARNING", "WARN":
		l = slog.LevelWarn
	case "ERROR":
		l = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// APITokens returns the configured static tokens; with none, a generated one kept in
// <stateDir>/<service>.token (0600), so the service never runs open (docs/development.md).
func APITokens(configured []string, stateDir, service string, log *slog.Logger) ([]string, error) {
	if len(configured) > 0 {
		return configured, nil
	}
	path := filepath.Join(stateDir, service+".token")
	if raw, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(raw))) > 0 {
		return []string{strings.TrimSpace(string(raw))}, nil
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	buf := make([]byte, 32)
	_, _ = rand.Read(buf)
	token := base64.RawURLEncoding.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	log.Warn("no API token configured; generated one", "token_file", path)
	return []string{token}, nil
}

// Authorized serves h only to a request whose bearer token one of verifiers accepts;
// anything else gets 401 with a ProblemDetails.
func Authorized(realm string, verifiers []auth.Verifier, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !auth.Any(verifiers, strings.TrimSpace(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			Problem(w, r, http.StatusUnauthorized, "a valid bearer token is required")
			return
		}
		h(w, r)
	})
}

// Problem answers with an ETSI ProblemDetails body; instance is the absolute request URI
// at the service's public base URL (PublicBase).
func Problem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status),
		"status": status, "detail": detail, "instance": BaseURL(r) + r.URL.EscapedPath()})
}

// WriteJSON answers with v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Serve serves server on listener until ctx ends, then shuts it down (5 s grace).
func Serve(ctx context.Context, server *http.Server, listener net.Listener) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	err := server.Serve(listener)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
