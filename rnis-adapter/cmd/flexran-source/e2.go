package main

import (
	"bufio"
	"encoding/json"
	"log"
	"net"
	"strconv"
	"sync"
	"time"
)

// e2Stream serves the mts-e2 stream v1 (docs/e2.md) of the same synthetic UEs: at every
// refresh, per cell an rlc and a mac line (the shape our FlexRIC xApp forwards), to each
// client that presented the token. For the E2 source's tests and benchmark.
type e2Stream struct {
	token   string
	mu      sync.Mutex
	clients map[chan []byte]bool
}

func serveE2(ln net.Listener, token string) *e2Stream {
	e := &e2Stream{token: token, clients: map[chan []byte]bool{}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				log.Printf("E2 listener: %v", err)
				return
			}
			go e.client(conn)
		}
	}()
	return e
}

func (e *e2Stream) client(conn net.Conn) {
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(conn).ReadSlice('\n')
	var hi struct {
		Stream string `json:"stream"`
		V      int    `json:"v"`
		Token  string `json:"token"`
	}
	if err != nil || json.Unmarshal(line, &hi) != nil || hi.Stream != "mts-e2" || hi.V != 1 || hi.Token != e.token {
		_, _ = conn.Write([]byte(`{"type":"error","detail":"a valid token is required"}` + "\n"))
		return
	}
	_, _ = conn.Write([]byte(`{"type":"hello","stream":"mts-e2","v":1,"source":"flexran-source","sm":["mac","rlc"],"interval_ms":1}` + "\n"))
	ch := make(chan []byte, 256)
	e.mu.Lock()
	e.clients[ch] = true
	e.mu.Unlock()
	defer func() { e.mu.Lock(); delete(e.clients, ch); e.mu.Unlock() }()
	for lines := range ch {
		_ = conn.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, err := conn.Write(lines); err != nil {
			return
		}
	}
}

// publish hands one refresh's lines to every client; a client 256 refreshes behind misses them.
func (e *e2Stream) publish(lines []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ch := range e.clients {
		select {
		case ch <- lines:
		default:
		}
	}
}

// appendE2 writes one cell's rlc and mac lines for this refresh (s.mu held).
func (s *source) appendE2(b []byte, cell int, now time.Time) []byte {
	head := func(typ, list string) {
		b = append(b, `{"type":"`+typ+`","node":{"ran":"eNB","mcc":208,"mnc":93,"mnc_digits":2,"nb_id":`...)
		b = strconv.AppendInt(b, int64(10000+cell), 10)
		b = append(b, `},"cell":{"pci":0,"dl_prbs":`...)
		b = strconv.AppendInt(b, int64(s.prbs), 10)
		b = append(b, `,"slots_per_frame":10,"harq_processes":8},"tstamp_us":`...)
		b = strconv.AppendInt(b, now.UnixMicro(), 10)
		b = append(b, `,"`+list+`":[`...)
	}
	var attached []*ue
	for _, u := range s.ues {
		if u.attached && u.cell == cell {
			attached = append(attached, u)
		}
	}
	head("rlc", "rbs")
	for i, u := range attached {
		u.queue = max(0, u.queue+s.rng.IntN(20000)-10000)
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"rnti":`...)
		b = strconv.AppendInt(b, int64(u.rnti), 10)
		b = append(b, `,"rbid":1,"mode":1,"txbuf_occ_bytes":`...)
		b = strconv.AppendInt(b, int64(u.queue), 10)
		b = append(b, `,"txsdu_wt_us":`...)
		b = strconv.AppendInt(b, int64(u.queue/2), 10)
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	head("mac", "ues")
	ms := now.UnixMilli()
	for i, u := range attached {
		cqi := 7 + s.rng.IntN(9)
		if i > 0 {
			b = append(b, ',')
		}
		for j, kv := range [...]struct {
			k string
			v int64
		}{{"rnti", int64(u.rnti)}, {"frame", ms / 10 % 1024}, {"slot", ms % 10}, {"wb_cqi", int64(cqi)},
			{"dl_mcs1", int64(mcsOfCQI[cqi])}, {"dl_curr_tbs", int64(100 + s.rng.IntN(2192))},
			{"dl_sched_rb", int64(s.prbs / max(1, len(attached)))}, {"phr", 40}} {
			if j == 0 {
				b = append(b, `{"`...)
			} else {
				b = append(b, `,"`...)
			}
			b = append(b, kv.k+`":`...)
			b = strconv.AppendInt(b, kv.v, 10)
		}
		b = append(b, `,"imsi":"`+imsi(u)+`","ue_ipv4":"`+ip(u)+`"}`...)
	}
	return append(b, "]}\n"...)
}
