package ran

import (
	"math/rand/v2"
	"sync/atomic"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
)

// WANDir is one direction of the WAN stage (server → MEC or MEC → server): a byte-limited
// FIFO served at the configured rate, then the one-way delay (which a reorder_pct share
// of the packets skips). The kernel here has no netem, so the emulator provides the WAN
// delay that makes an experiment's RTT.
type WANDir struct {
	Name        string
	inbox       *pkt.SPSC
	q           aqm.Ring
	aqm         *wanAQM // cfg.Queue "dualpi2": the bottleneck AQM instead of q (wan_aqm.go)
	credit      float64
	delay       delayLine
	out         *writer
	cfg         *WANConfig
	lost        func(p *pkt.Packet, now int64) // labels and frees a dropped packet
	rng         *rand.Rand                     // draws which packets skip the delay
	Pkts, Bytes atomic.Uint64
	Drops       atomic.Uint64
	DelivPkts   atomic.Uint64
	Reordered   atomic.Uint64 // packets that skipped the delay
	lastDue     int64         // with jitter: no packet is due before the one ahead of it
}

func (e *Emulator) openWAN(cfg *WANConfig) error {
	server, err := e.openDev(cfg.ServerTun)
	if err != nil {
		return err
	}
	mec, err := e.openDev(cfg.MECTun)
	if err != nil {
		return err
	}
	down := &WANDir{Name: "server_to_mec", cfg: cfg, out: e.startWriter(mec, nil), inbox: pkt.NewSPSC(inboxSize),
		lost: e.wanLost((*pkt.Packet).Dst4)}
	up := &WANDir{Name: "mec_to_server", cfg: cfg, out: e.startWriter(server, nil), inbox: pkt.NewSPSC(inboxSize),
		lost: e.wanLost((*pkt.Packet).Src4)}
	for i, d := range []*WANDir{down, up} {
		if err := d.setQueue(); err != nil {
			return err
		}
		seed := e.Cfg.Seed + uint64(i)
		d.rng = rand.New(rand.NewPCG(seed, seed^0x0fde7))
	}
	e.wan = []*WANDir{down, up}
	e.goReader(server, func(p *pkt.Packet) { down.enqueue(p, e.Now()) })
	e.goReader(mec, func(p *pkt.Packet) { up.enqueue(p, e.Now()) })
	return nil
}

// wanLost labels a WAN drop with the UE whose address ue(p) is ("" if none).
func (e *Emulator) wanLost(ue func(*pkt.Packet) uint32) func(*pkt.Packet, int64) {
	return func(p *pkt.Packet, now int64) {
		name := ""
		if b := e.byIP[ue(p)]; b != nil {
			name = b.UE.Cfg.Name
		}
		e.Truth.Record(now, name, CauseWAN, p)
		pkt.Put(p)
	}
}

func (w *WANDir) enqueue(p *pkt.Packet, now int64) {
	w.Pkts.Add(1)
	w.Bytes.Add(uint64(p.N))
	p.Born = now
	if !w.inbox.Push(p) {
		w.Drops.Add(1)
		w.lost(p, now)
	}
}

// serve runs once per tick: rate, then delay, then hand due packets to the writer.
func (w *WANDir) serve(now, tick int64) {
	perTick := w.cfg.RateMbps * 1e6 / 8 * float64(tick) / 1e9
	delay := int64(w.cfg.DelayMS * 1e6)
	if w.aqm != nil {
		w.serveAQM(now, tick, perTick, delay)
		return
	}
	for p := w.inbox.Pop(); p != nil; p = w.inbox.Pop() {
		if w.q.Bytes()+p.N > w.cfg.Limit {
			w.Drops.Add(1)
			w.lost(p, now)
			continue
		}
		w.q.Push(p)
	}
	serveRate(&w.q, &w.credit, perTick, w.cfg.RateMbps == 0, func(p *pkt.Packet) {
		w.toDelay(p, max(p.Born, now-tick)+delay) // arrival (or start of service) + delay
	})
	if n := w.delay.popDue(now+tick/2, w.out, nil); n > 0 { // nearest tick, as the uplink
		w.DelivPkts.Add(uint64(n))
		w.out.kick()
	}
}

// toDelay puts a served packet on the delay line, due at due; with probability
// reorder_pct it goes to the writer at once instead and overtakes the packets in the delay
// (netem's reorder: "sent immediately").
func (w *WANDir) toDelay(p *pkt.Packet, due int64) {
	if w.cfg.ReorderPct > 0 && w.rng.Float64()*100 < w.cfg.ReorderPct {
		w.Reordered.Add(1)
		w.DelivPkts.Add(1)
		w.out.add(p)
		w.out.kick()
		return
	}
	if j := w.cfg.JitterMS; j > 0 {
		due = max(due+int64((w.rng.Float64()*2-1)*j*1e6), w.lastDue)
		w.lastDue = due
	}
	p.Born = due
	w.delay.push(p)
}
