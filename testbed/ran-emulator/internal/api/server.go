package api

import (
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

//go:embed openapi.json
var openAPI []byte

// Server is the emulator's HTTP API.
type Server struct {
	emu    *ran.Emulator
	tokens [][]byte
	flex   *flexranJSON
	log    *slog.Logger
	mux    *http.ServeMux
}

// Tokens returns the static bearer tokens from a comma-separated list; with none, it
// reuses stateDir/ran-emulator.token, or generates one, logs it once and writes it there
// (0600): the API never runs open.
func Tokens(list, stateDir string, log *slog.Logger) ([]string, error) {
	var out []string
	for _, t := range strings.Split(list, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	path := filepath.Join(stateDir, "ran-emulator.token")
	if saved, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(saved))) >= 16 {
		log.Info("no EMU_API_TOKENS given: using the saved API token", "file", path)
		return []string{strings.TrimSpace(string(saved))}, nil
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	tok := hex.EncodeToString(raw)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return nil, err
	}
	log.Warn("no EMU_API_TOKENS given: generated an API token", "token", tok, "file", path)
	return []string{tok}, nil
}

// NewServer builds the API; listen is reported as the agent's ip_port in eNB_config.
func NewServer(emu *ran.Emulator, tokens []string, listen string, log *slog.Logger) (*Server, error) {
	flex, err := newFlexranJSON(emu, listen)
	if err != nil {
		return nil, err
	}
	s := &Server{emu: emu, flex: flex, log: log, mux: http.NewServeMux()}
	for _, t := range tokens {
		s.tokens = append(s.tokens, []byte(t))
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	open := map[string]http.HandlerFunc{
		"GET /healthz":      s.healthz,
		"GET /metrics":      s.metrics,
		"GET /openapi.json": s.openapi,
		"GET /docs":         s.docs,
	}
	for p, h := range open {
		s.mux.HandleFunc(p, h)
	}
	authed := map[string]http.HandlerFunc{
		"GET /stats":                                        s.statsAll,
		"GET /stats/{$}":                                    s.statsAll,
		"GET /stats/{type}":                                 s.statsAll,
		"GET /stats/enb/{id}":                               s.statsENB,
		"GET /stats/enb/{id}/{type}":                        s.statsENB,
		"GET /stats/ue/{ue}":                                s.statsUE,
		"GET /stats/enb/{id}/ue/{ue}":                       s.statsUE,
		"GET /stats/conf/enb":                               s.getStatsConf,
		"GET /stats/conf/enb/{id}":                          s.getStatsConf,
		"POST /stats/conf/enb":                              s.postStatsConf,
		"POST /stats/conf/enb/{id}":                         s.postStatsConf,
		"GET /emulator/v1/config":                           s.getConfig,
		"GET /emulator/v1/cells":                            s.getCells,
		"GET /emulator/v1/bearers":                          s.getBearers,
		"GET /emulator/v1/ues/{ue}/cells/{bs}":              s.getBearer,
		"PATCH /emulator/v1/ues/{ue}/cells/{bs}/channel":    s.patchChannel,
		"PATCH /emulator/v1/ues/{ue}/cells/{bs}/ul_channel": s.patchULChannel,
		"GET /emulator/v1/timing":                           s.getTiming,
		"POST /emulator/v1/timing/reset":                    s.resetTiming,
		"GET /emulator/v1/wan":                              s.getWAN,
		"GET /emulator/v1/drops":                            s.getDrops,
		"GET /emulator/v1/drops/counters":                   s.getDropCounters,
	}
	for p, h := range authed {
		s.mux.Handle(p, s.auth(h))
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, r, http.StatusNotFound, "Not Found", "no such resource: "+r.URL.Path)
	})
}

// ServeHTTP makes Server an http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*") // as the FlexRAN controller does
	s.mux.ServeHTTP(w, r)
}

// auth lets a request through only with one of the static bearer tokens.
func (s *Server) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok {
			for _, t := range s.tokens {
				if subtle.ConstantTimeCompare([]byte(got), t) == 1 {
					next(w, r)
					return
				}
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="ran-emulator"`)
		problem(w, r, http.StatusUnauthorized, "Unauthorized", "a valid bearer token is required")
	})
}

// problem writes an ETSI ProblemDetails body. "error" repeats detail so that clients of
// the real FlexRAN controller, whose errors are {"error": "..."}, read it too.
func problem(w http.ResponseWriter, r *http.Request, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": title, "status": status,
		"detail": detail, "instance": r.URL.Path, "error": detail})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeRaw(w http.ResponseWriter, doc []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(doc)
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	late := s.emu.Timing.Percentile(0.99)
	writeJSON(w, map[string]any{"status": "ok", "uptime_s": s.emu.Uptime().Seconds(),
		"checks": map[string]any{"tti_clock": map[string]any{"ok": s.emu.Timing.Ticks.Load() > 0,
			"detail": fmt.Sprintf("%d ticks, lateness p99 %d µs", s.emu.Timing.Ticks.Load(), late)}}})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) { writeRaw(w, openAPI) }

// docs renders the OpenAPI document as a plain page (offline: no external assets).
func (s *Server) docs(w http.ResponseWriter, r *http.Request) {
	var doc struct {
		Info  struct{ Title, Description string }
		Paths map[string]map[string]struct {
			Summary     string
			Description string
		}
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		problem(w, r, http.StatusInternalServerError, "Internal Server Error", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><title>%s</title><h1>%s</h1><p>%s</p><p><a href=\"/openapi.json\">openapi.json</a></p><dl>",
		esc(doc.Info.Title), esc(doc.Info.Title), esc(doc.Info.Description))
	for _, path := range sortedKeys(doc.Paths) {
		for _, m := range sortedKeys(doc.Paths[path]) {
			op := doc.Paths[path][m]
			fmt.Fprintf(w, "<dt><code>%s %s</code></dt><dd>%s %s</dd>", strings.ToUpper(m), esc(path),
				esc(op.Summary), esc(op.Description))
		}
	}
	fmt.Fprint(w, "</dl>")
}
