package api

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"mts.invalid/suite/services/common/go/threegpp"
	"mts.invalid/suite/testbed/ran-emulator/internal/ran"
)

// The mts-e2 stream (docs/e2.md): what our FlexRIC xApp (testbed/e2-xapp) forwards from
// OAI's MAC and RLC service models, here filled from the same snapshots the FlexRAN API
// serves, so that the RNIS adapter's two sources can be checked against one truth.
const (
	e2Stream  = "mts-e2"
	e2Version = 1
)

// E2Stream serves the mts-e2 stream to every client that presents one of the API tokens.
type E2Stream struct {
	emu    *ran.Emulator
	tokens [][]byte
	log    *slog.Logger
	conns  sync.WaitGroup
}

// NewE2Stream returns the stream server of emu.
func NewE2Stream(emu *ran.Emulator, tokens []string, log *slog.Logger) *E2Stream {
	s := &E2Stream{emu: emu, log: log}
	for _, t := range tokens {
		s.tokens = append(s.tokens, []byte(t))
	}
	return s
}

// Serve accepts clients until ctx ends.
func (s *E2Stream) Serve(ctx context.Context, ln net.Listener) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error("E2 stream listener stopped", "err", err)
			}
			s.conns.Wait()
			return
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			defer conn.Close()
			stopConn := context.AfterFunc(ctx, func() { conn.Close() })
			defer stopConn()
			if err := s.client(conn); err != nil {
				s.log.Info("E2 stream client gone", "peer", conn.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// client checks the client's first line, says hello and streams each cell's new snapshots.
func (s *E2Stream) client(conn net.Conn) error {
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReaderSize(conn, 4096).ReadSlice('\n')
	if err != nil {
		return err
	}
	var hi struct {
		Stream string `json:"stream"`
		V      int    `json:"v"`
		Token  string `json:"token"`
	}
	w := bufio.NewWriterSize(conn, 64<<10)
	if json.Unmarshal(line, &hi) != nil || hi.Stream != e2Stream || hi.V != e2Version {
		return refuse(w, "want {\"stream\":\"mts-e2\",\"v\":1,\"token\":...} as the first line")
	}
	if !s.valid(hi.Token) {
		return refuse(w, "a valid token is required")
	}
	_ = conn.SetDeadline(time.Time{})
	hello, _ := json.Marshal(map[string]any{"type": "hello", "stream": e2Stream, "v": e2Version,
		"source": "ran-emulator", "sm": []string{"mac", "rlc"}, "interval_ms": 1})
	if _, err := w.Write(append(hello, '\n')); err != nil {
		return err
	}
	last := make([]*ran.CellSnapshot, len(s.emu.Cells))
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var buf []byte
	for range tick.C {
		for i, c := range s.emu.Cells {
			snap := c.Snapshot()
			if snap == nil || snap == last[i] {
				continue
			}
			last[i] = snap
			buf = appendE2MAC(appendE2RLC(buf[:0], snap), snap) // RLC first: the adapter joins a MAC report with the RLC before it
			if _, err := w.Write(buf); err != nil {
				return err
			}
		}
		// a client that does not read for 2 s is dropped: the stream never waits for it
		_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func (s *E2Stream) valid(token string) bool {
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(token), t) == 1 {
			return true
		}
	}
	return false
}

func refuse(w *bufio.Writer, detail string) error {
	msg, _ := json.Marshal(map[string]string{"type": "error", "detail": detail})
	_, _ = w.Write(append(msg, '\n'))
	_ = w.Flush()
	return &refused{detail}
}

type refused struct{ detail string }

func (r *refused) Error() string { return "refused: " + r.detail }

// appendE2Head writes {"type":T,"node":{...},"cell":{...},"tstamp_us":N,"<list>":[ — the
// E2 node is the cell's base station (nb_id = bs_id), as the FlexRAN API reports it.
func appendE2Head(b []byte, typ, list string, s *ran.CellSnapshot) []byte {
	cfg := &s.Cell.Cfg
	ranType := "eNB"
	if cfg.RAT == "nr" {
		ranType = "gNB"
	}
	b = append(b, `{"type":"`+typ+`","node":{"ran":"`+ranType+`","mcc":`...)
	b = strconv.AppendInt(b, int64(cfg.MCC), 10)
	b = append(b, `,"mnc":`...)
	b = strconv.AppendInt(b, int64(cfg.MNC), 10)
	b = append(b, `,"mnc_digits":2,"nb_id":`...)
	b = strconv.AppendUint(b, cfg.BSID, 10)
	b = append(b, `,"cu_du_id":null},"cell":{"pci":`...)
	b = strconv.AppendInt(b, int64(cfg.PhyCellID), 10)
	b = append(b, `,"dl_prbs":`...)
	b = strconv.AppendInt(b, int64(cfg.PRB), 10)
	b = append(b, `,"slots_per_frame":`...)
	b = strconv.AppendInt(b, s.Cell.SlotsPerFrame(), 10)
	b = append(b, `,"harq_processes":`...)
	b = strconv.AppendInt(b, int64(cfg.HARQ.Processes), 10)
	if cfg.RAT == "nr" { // the allocation its NR transport blocks are computed on
		b = append(b, `,"pdsch_symbols":`...)
		b = strconv.AppendInt(b, int64(threegpp.DefaultNR.Symbols), 10)
	}
	b = append(b, `},"tstamp_us":`...)
	b = strconv.AppendInt(b, s.Wall.UnixMicro(), 10)
	return append(b, `,"`+list+`":[`...)
}

// appendEntry opens the i-th entry of a list with the UE's RNTI: [,]{"rnti":N
func appendEntry(b []byte, i int, u *ran.BearerSnapshot) []byte {
	if i > 0 {
		b = append(b, ',')
	}
	b = append(b, `{"rnti":`...)
	return strconv.AppendInt(b, int64(u.B.Cfg.RNTI), 10)
}

// appendE2MAC writes the MAC indication line (FlexRIC's mac_ue_stats_impl_t per UE). The
// emulator does not estimate a BLER: dl_bler is left out (not reported).
func appendE2MAC(b []byte, s *ran.CellSnapshot) []byte {
	b = appendE2Head(b, "mac", "ues", s)
	frame, slot := s.FrameSlot()
	for i := range s.Bearers {
		u := &s.Bearers[i]
		b = appendEntry(b, i, u)
		for _, f := range [...]struct {
			key string
			v   int64
		}{{"frame", frame}, {"slot", slot}, {"wb_cqi", int64(u.CQI)}, {"dl_mcs1", int64(u.MCS)},
			{"dl_curr_tbs", int64(u.TBS)}, {"ul_curr_tbs", int64(u.TBSUl)}, {"dl_sched_rb", int64(u.PRB)},
			{"bsr", int64(u.ULQueueBytes)}, {"phr", int64(u.B.Cfg.PHR)}} {
			b = append(b, `,"`+f.key+`":`...)
			b = strconv.AppendInt(b, f.v, 10)
		}
		b = append(b, `,"imsi":"`+u.B.UE.Cfg.IMSI+`","ue_ipv4":"`...)
		b = u.B.Cfg.IP.AppendTo(b)
		b = append(b, `"}`...)
	}
	return append(b, "]}\n"...)
}

// appendE2RLC writes the RLC indication line: one data radio bearer (rbid 1) per UE.
func appendE2RLC(b []byte, s *ran.CellSnapshot) []byte {
	b = appendE2Head(b, "rlc", "rbs", s)
	mode := int64(1) // UM
	if s.Cell.Cfg.RLC.Mode == "am" {
		mode = 0
	}
	for i := range s.Bearers {
		u := &s.Bearers[i]
		b = appendEntry(b, i, u)
		b = append(b, `,"rbid":1,"mode":`...)
		b = strconv.AppendInt(b, mode, 10)
		b = append(b, `,"txbuf_occ_bytes":`...)
		b = strconv.AppendInt(b, int64(u.QueueBytes), 10)
		b = append(b, `,"txsdu_wt_us":`...)
		b = strconv.AppendInt(b, int64(u.HOLms)*1000, 10) // the emulator keeps it in ms
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}
