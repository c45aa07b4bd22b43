// Package api serves /tunnel/v1 (paths, per-path state, the ingress queue's flows, the
// scheduler, the configuration, the counters) behind bearer tokens, and the Prometheus
// metrics of the engine. Errors are ETSI ProblemDetails.
package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"

	"mts.invalid/suite/services/common/go/auth"
	"mts.invalid/suite/services/common/go/svc"
	"mts.invalid/suite/tunnel/internal/engine"
	"mts.invalid/suite/tunnel/internal/sched"
)

// Base is the API's base path.
const Base = "/tunnel/v1"

// Server is the API.
type Server struct {
	eng     *engine.Engine
	config  map[string]any
	auth    []auth.Verifier
	openapi []byte
}

// New returns the API of eng; config is what GET /config shows.
func New(eng *engine.Engine, config map[string]any, verifiers []auth.Verifier, publicURL string) *Server {
	return &Server{eng: eng, config: config, auth: verifiers, openapi: OpenAPI(publicURL)}
}

// Routes registers the API on mux.
func (s *Server) Routes(mux *http.ServeMux) {
	a := func(h http.HandlerFunc) http.Handler { return svc.Authorized("tunnel", s.auth, h) }
	mux.Handle("GET "+Base+"/paths", a(s.listPaths))
	mux.Handle("GET "+Base+"/paths/{id}", a(s.getPath))
	mux.Handle("PATCH "+Base+"/paths/{id}", a(s.patchPath))
	mux.Handle("GET "+Base+"/queue", a(s.getQueue))
	mux.Handle("GET "+Base+"/scheduler", a(s.getScheduler))
	mux.Handle("PUT "+Base+"/scheduler", a(s.putScheduler))
	mux.Handle("GET "+Base+"/config", a(s.getConfig))
	mux.Handle("GET "+Base+"/stats", a(s.getStats))
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(s.openapi)
	})
	mux.Handle(Base+"/", a(func(w http.ResponseWriter, r *http.Request) {
		svc.Problem(w, r, http.StatusNotFound, "no such resource or method")
	}))
}

func (s *Server) listPaths(w http.ResponseWriter, _ *http.Request) {
	svc.WriteJSON(w, http.StatusOK, s.eng.Paths())
}

func pathID(w http.ResponseWriter, r *http.Request) (byte, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 8)
	if err != nil || id == 0 {
		svc.Problem(w, r, http.StatusBadRequest, "path id must be an integer 1..255")
		return 0, false
	}
	return byte(id), true
}

func (s *Server) getPath(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	st, err := s.eng.Path(id)
	if err != nil {
		svc.Problem(w, r, http.StatusNotFound, "no path "+strconv.Itoa(int(id)))
		return
	}
	svc.WriteJSON(w, http.StatusOK, st)
}

// PathPatch is the body of PATCH /paths/{id}.
type PathPatch struct {
	Enabled *bool `json:"enabled"`
}

func (s *Server) patchPath(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	var body PathPatch
	if !decode(w, r, &body) {
		return
	}
	if body.Enabled == nil {
		svc.Problem(w, r, http.StatusBadRequest, "enabled (boolean) is required")
		return
	}
	if err := s.eng.SetEnabled(id, *body.Enabled); errors.Is(err, engine.ErrNoPath) {
		svc.Problem(w, r, http.StatusNotFound, "no path "+strconv.Itoa(int(id)))
		return
	}
	s.getPath(w, r)
}

func (s *Server) getQueue(w http.ResponseWriter, _ *http.Request) {
	svc.WriteJSON(w, http.StatusOK, s.eng.Queue())
}

// SchedulerBody is the scheduler resource.
type SchedulerBody struct {
	Name      string   `json:"name"`
	Available []string `json:"available,omitempty"`
}

func (s *Server) getScheduler(w http.ResponseWriter, _ *http.Request) {
	svc.WriteJSON(w, http.StatusOK, SchedulerBody{Name: s.eng.Scheduler(), Available: sched.Names})
}

func (s *Server) putScheduler(w http.ResponseWriter, r *http.Request) {
	var body SchedulerBody
	if !decode(w, r, &body) {
		return
	}
	if err := s.eng.SetScheduler(body.Name); err != nil {
		svc.Problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	s.getScheduler(w, r)
}

func (s *Server) getConfig(w http.ResponseWriter, _ *http.Request) {
	svc.WriteJSON(w, http.StatusOK, s.config)
}

func (s *Server) getStats(w http.ResponseWriter, _ *http.Request) {
	svc.WriteJSON(w, http.StatusOK, s.eng.Stats())
}

// decode reads a JSON body strictly; a bad one is answered with 400 and false.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		svc.Problem(w, r, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return false
	}
	return true
}
