// Command flexran-source serves synthetic FlexRAN northbound statistics (GET /stats, the
// JSON shape of flexran-rtc v2.4 as in testdata/flexran/live-oai-rfsim) for N UEs in C
// cells, with values that change every refresh period. The adapter's tests and benchmark
// use it; the RAN emulator (testbed/ran-emulator) is the realistic source.
//
// Documents are built once per refresh, not per request. sfnSn is frame*10 + subframe, as
// OAI's agent writes it. Extension: "ueIpv4" per UE (as the RAN emulator). A small control API
// changes the population for tests:
//
//	POST /source/attach?ue=N   POST /source/detach?ue=N   POST /source/move?ue=N&cell=C
//	POST /source/rrc?ue=N&rsrp=DBM   POST /source/qci?ue=N&qci=Q (the data bearer's QCI)
//	POST /source/fail?status=CODE (0 = stop failing)
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type ue struct {
	id, cell, rnti int
	attached       bool
	rsrp, measID   int
	qci            int // of the data bearer (lcid 3)
	queue          int
	ip             string
	ipCell         int
}

type source struct {
	cells, prbs int
	mu          sync.Mutex
	ues         []*ue
	rng         *rand.Rand
	config      []byte // "eNB_config":[...], rebuilt when changed
	changed     bool
	docs        atomic.Pointer[docs]
	e2          *e2Stream // nil unless --e2-listen
	failStatus  atomic.Int32
	reportSF    atomic.Int32
}

// docs are the current documents: the statistics ({..."mac_stats":[...]}) and the
// configuration part ("eNB_config":[...]).
type docs struct{ mac, config []byte }

func main() {
	nUEs := flag.Int("ues", 1, "UEs per cell")
	cells := flag.Int("cells", 1, "cells (bs_id 10000, 10001, ...)")
	prbs := flag.Int("prbs", 25, "cell bandwidth in PRBs")
	refresh := flag.Duration("refresh", time.Millisecond, "how often the statistics change")
	listen := flag.String("listen", "127.0.0.1:9999", "address to serve on (port 0: any free port)")
	e2Listen := flag.String("e2-listen", "", "also serve the mts-e2 stream (docs/e2.md) of the same UEs here")
	e2Token := flag.String("e2-token", "", "the token an mts-e2 client must present (required with --e2-listen)")
	flag.Parse()
	s := &source{cells: *cells, prbs: *prbs, rng: rand.New(rand.NewPCG(1, 2))}
	for c := range *cells {
		for i := range *nUEs {
			id := c**nUEs + i
			s.ues = append(s.ues, &ue{id: id, cell: c, rnti: 1000 + id, attached: true, rsrp: -1, measID: -1, qci: 9})
		}
	}
	if *e2Listen != "" {
		if *e2Token == "" {
			log.Fatal("--e2-listen needs --e2-token")
		}
		eln, err := net.Listen("tcp", *e2Listen)
		if err != nil {
			log.Fatal(err)
		}
		s.e2 = serveE2(eln, *e2Token)
	}
	s.rebuild()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	_ = os.Stdout.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		t := time.NewTicker(*refresh)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				s.rebuild()
			}
		}
	}()
	server := &http.Server{Handler: s.routes(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	if err := server.Serve(ln); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

func (s *source) routes() http.Handler {
	mux := http.NewServeMux()
	stats := func(pick func(*docs) []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if code := s.failStatus.Load(); code != 0 {
				http.Error(w, `{"error":"failing on purpose"}`, int(code))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(pick(s.docs.Load()))
		}
	}
	configDoc := func(d *docs) []byte { return append(append([]byte("{"), d.config...), '}') }
	mux.HandleFunc("GET /stats", stats((*docs).all))
	mux.HandleFunc("GET /stats/all", stats((*docs).all))
	mux.HandleFunc("GET /stats/mac_stats", stats(func(d *docs) []byte { return d.mac }))
	mux.HandleFunc("GET /stats/enb_config", stats(configDoc))
	mux.HandleFunc("POST /stats/conf/enb/{id}", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Reports []struct{ SF int32 } `json:"reports"`
		}
		if err := decode(r, &body); err != nil || len(body.Reports) == 0 {
			http.Error(w, `{"error":"invalid configuration"}`, http.StatusBadRequest)
			return
		}
		s.reportSF.Store(body.Reports[0].SF)
		w.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stats/conf/enb/{id}", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"reports":[{"reportFrequency":"FLSRF_PERIODICAL","sf":%d}]}`, s.reportSF.Load())
	})
	mux.HandleFunc("POST /source/{action}", s.control)
	return mux
}

func (s *source) control(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if r.PathValue("action") == "fail" {
		code, _ := strconv.Atoi(q.Get("status"))
		s.failStatus.Store(int32(code))
		return
	}
	id, err := strconv.Atoi(q.Get("ue"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || id < 0 || id >= len(s.ues) {
		http.Error(w, "no such ue", http.StatusBadRequest)
		return
	}
	u := s.ues[id]
	s.changed = true
	switch r.PathValue("action") {
	case "attach":
		u.attached = true
	case "detach":
		u.attached = false
	case "move":
		c, err := strconv.Atoi(q.Get("cell"))
		if err != nil || c < 0 || c >= s.cells {
			http.Error(w, "no such cell", http.StatusBadRequest)
			return
		}
		u.cell, u.rnti = c, u.rnti+1 // a new cell gives a new C-RNTI
	case "rrc":
		u.rsrp, _ = strconv.Atoi(q.Get("rsrp"))
		u.measID++
	case "qci":
		qci, err := strconv.Atoi(q.Get("qci"))
		if err != nil || qci < 1 || qci > 255 {
			http.Error(w, "qci must be 1..255", http.StatusBadRequest)
			return
		}
		u.qci = qci
	default:
		http.Error(w, "unknown action", http.StatusNotFound)
	}
}

func decode(r *http.Request, v any) error {
	return jsonDecode(http.MaxBytesReader(nil, r.Body, 1<<16), v)
}
