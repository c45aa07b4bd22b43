// Package engine is the tunnel's data plane: IP packets read from the TUN wait in the
// ingress queue (FQ-CoDel or FIFO); a pump pulls them whenever a path's congestion window
// has room, the scheduler picks the path, and each goes out sealed as one UDP datagram on
// that path's socket. Received datagrams are authenticated, checked against replays, acked
// per path, put back in order and written to the TUN.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
	"mts.invalid/suite/services/common/go/tun"
	"mts.invalid/suite/tunnel/internal/path"
	"mts.invalid/suite/tunnel/internal/reorder"
	"mts.invalid/suite/tunnel/internal/sched"
	"mts.invalid/suite/tunnel/internal/wire"
)

// PathConfig is one path: a local UDP address and the peer's on the same access.
type PathConfig struct {
	ID        byte           `json:"id"`
	Local     netip.AddrPort `json:"local"`
	Remote    netip.AddrPort `json:"remote"`
	CwndBytes int            `json:"cwnd_bytes,omitempty"` // static cwnd (BDP); 0: the engine's default
	RnisUE    netip.Addr     `json:"rnis_ue,omitzero"`     // UE address whose RNIS reports are this path's radio
}

// Config of the engine.
type Config struct {
	Role           wire.Role
	PeerID         uint32
	PSK            []byte
	TUN            string // device name (created if absent)
	TUNRing        bool   // read it through io_uring where the kernel lets us (tun.OpenOffloadRing)
	MTU            int    // largest inner IP packet; larger ones are dropped at the ingress
	Paths          []PathConfig
	Queue          aqm.Params
	Scheduler      string
	CwndMode       string
	CwndBytes      int // default static cwnd / adaptive start
	CwndTarget     time.Duration
	ReorderTimeout time.Duration
	ProbeInterval  time.Duration
}

// Drop reasons of received datagrams, and of packets at the ingress.
const (
	DropMalformed   = "malformed"    // not a tunnel datagram of ours
	DropUnknownPath = "unknown_path" // a path id that is not configured
	DropNotPeer     = "not_peer"     // from an address or peer id that is not this path's peer
	DropAuth        = "auth"         // failed authentication
	DropReplay      = "replay"       // seen already, or from an older run of the peer
	DropOversize    = "oversize"     // inner packet larger than the MTU
	DropQueueLimit  = "queue_limit"  // the ingress queue was full
	DropAQM         = "aqm"          // CoDel dropped it
)

// DropReasons lists every reason.
var DropReasons = []string{DropMalformed, DropUnknownPath, DropNotPeer, DropAuth, DropReplay, DropOversize,
	DropQueueLimit, DropAQM}

const (
	ackSeqBit = uint64(1) << 63 // acks have path seqs of their own, with this bit set
	batch     = 64
	ackEvery  = 32 // datagrams an ack covers at most (its bitmap covers 64)
	tick      = time.Millisecond
	radioTTL  = time.Second // an RNIS report older than this is not used
)

type radio struct {
	capacityBps float64
	queueBytes  int
	at          time.Time
}

type pathIO struct {
	cfg   PathConfig
	index int // in the configuration's order: the reorder buffer's path index
	conn  *net.UDPConn
	tx    *path.Sender // under Engine.mu
	radio radio        // under Engine.mu
	batch *gsoBatch    // the pump's datagrams not yet sent
	gso   bool         // the pump may send segmented (cleared if the kernel refuses)
	// receive side, under Engine.rxMu
	rxData, rxAck path.Receiver
	ackSeq        atomic.Uint64
}

type peerKey struct {
	epoch uint64
	key   *wire.Key
}

// Engine is one end of the tunnel.
type Engine struct {
	cfg   Config
	log   *slog.Logger
	start time.Time
	epoch uint64
	txKey *wire.Key
	dev   *tun.Device
	paths []*pathIO // in id order
	byID  [256]*pathIO

	mu          sync.Mutex
	queue       aqm.Queue
	fq          *aqm.FQCoDel // queue, when it is FQ-CoDel
	sched       sched.Scheduler
	nextDataSeq uint64
	flowDrops   map[int]uint64

	pumping, pumpWanted atomic.Bool
	out                 []outgoing   // the pump's, while it holds pumping
	cands               []sched.Path // the pump's

	peer      atomic.Pointer[peerKey]
	rxMu      sync.Mutex
	reorder   *reorder.Buffer
	toTUN     *tun.Coalescer  // under rxMu: what the reorder buffer delivers, written per batch
	deliverTo reorder.Deliver // e.deliver, made once
	delivered []echo          // under rxMu: traced echoes delivered, not yet written

	drops     map[string]*atomic.Uint64
	rxPackets atomic.Uint64
	rxBytes   atomic.Uint64
	txPackets atomic.Uint64
	tunBytes  atomic.Uint64 // read from the TUN and offered to the ingress queue

	badFrames uint64 // the TUN reader's: the TUN's invalid frames counted so far

	trace bool // log each ICMP echo's stages at both ends (debug level)
}

// New opens the TUN and the path sockets.
func New(cfg Config, log *slog.Logger) (*Engine, error) {
	e := &Engine{cfg: cfg, log: log, start: time.Now(), epoch: uint64(time.Now().UnixNano()),
		flowDrops: map[int]uint64{}, out: make([]outgoing, 0, batch), cands: make([]sched.Path, 0, 8), reorder: reorder.New(cfg.ReorderTimeout, len(cfg.Paths)),
		drops: map[string]*atomic.Uint64{}, trace: log.Enabled(context.Background(), slog.LevelDebug)}
	for _, r := range DropReasons {
		e.drops[r] = new(atomic.Uint64)
	}
	var err error
	if e.sched, err = sched.New(cfg.Scheduler); err != nil {
		return nil, err
	}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	cfg.Queue.Seed = binary.BigEndian.Uint32(seed[:])
	if e.queue, err = aqm.New(cfg.Queue, e.queueDropped); err != nil {
		return nil, err
	}
	e.fq, _ = e.queue.(*aqm.FQCoDel)
	if e.txKey, err = wire.NewKey(cfg.PSK, cfg.Role, e.epoch, cfg.PeerID); err != nil {
		return nil, err
	}
	for _, pc := range cfg.Paths {
		if err := e.addPath(pc); err != nil {
			e.Close()
			return nil, err
		}
	}
	if e.dev, err = openTUN(cfg, log); err != nil {
		e.Close()
		return nil, err
	}
	e.toTUN = tun.NewCoalescer(e.dev)
	e.deliverTo = e.deliver
	return e, nil
}

// openTUN opens the TUN with offloads (and the io_uring reader if asked), else without.
func openTUN(cfg Config, log *slog.Logger) (*tun.Device, error) {
	open := tun.OpenOffload
	if cfg.TUNRing {
		open = tun.OpenOffloadRing
	}
	dev, err := open("", cfg.TUN)
	if err != nil {
		log.Warn("TUN offloads unavailable: one packet per read and write", "err", err)
		return tun.Open("", cfg.TUN)
	}
	if reader, why := dev.Reader(); why != nil {
		log.Warn("TUN io_uring reader refused: plain reads", "reader", reader, "err", why)
	}
	return dev, nil
}

func (e *Engine) addPath(pc PathConfig) error {
	if e.byID[pc.ID] != nil {
		return fmt.Errorf("path id %d configured twice", pc.ID)
	}
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(pc.Local))
	if err != nil {
		return fmt.Errorf("path %d: %w", pc.ID, err)
	}
	_ = conn.SetReadBuffer(4 << 20)
	_ = conn.SetWriteBuffer(4 << 20)
	if pc.CwndBytes == 0 {
		pc.CwndBytes = e.cfg.CwndBytes
	}
	enableGRO(conn) // without it, one datagram per read
	p := &pathIO{cfg: pc, index: len(e.paths), conn: conn, tx: path.NewSender(path.Config{ID: pc.ID, MSS: e.cfg.MTU + wire.Overhead,
		CwndMode: e.cfg.CwndMode, CwndBytes: pc.CwndBytes, CwndTarget: e.cfg.CwndTarget}, e.now()), batch: newGSOBatch(), gso: true}
	e.paths = append(e.paths, p)
	e.byID[pc.ID] = p
	for i := len(e.paths) - 1; i > 0 && e.paths[i].cfg.ID < e.paths[i-1].cfg.ID; i-- {
		e.paths[i], e.paths[i-1] = e.paths[i-1], e.paths[i]
	}
	return nil
}

// LocalAddr is the bound address of path id (to learn an ephemeral port).
func (e *Engine) LocalAddr(id byte) netip.AddrPort {
	return e.byID[id].conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Close releases the sockets and the TUN.
func (e *Engine) Close() {
	for _, p := range e.paths {
		p.conn.Close()
	}
	if e.dev != nil {
		e.dev.Close()
	}
}

func (e *Engine) now() int64 { return int64(time.Since(e.start)) }

// Run moves packets until ctx ends.
func (e *Engine) Run(ctx context.Context) {
	var wg sync.WaitGroup
	run := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	run(func() { e.readTUN(ctx) })
	run(func() { e.timers(ctx) })
	for _, p := range e.paths {
		run(func() { e.receive(ctx, p) })
	}
	<-ctx.Done()
	e.Close() // unblocks the readers
	wg.Wait()
}

func (e *Engine) drop(reason string) { e.drops[reason].Add(1) }

// queueDropped is the ingress queue's drop callback (under e.mu).
func (e *Engine) queueDropped(p *pkt.Packet, byAQM bool) {
	if byAQM {
		e.drop(DropAQM)
	} else {
		e.drop(DropQueueLimit)
	}
	if e.fq != nil {
		e.flowDrops[e.fq.FlowIndex(p)]++
	}
	pkt.Put(p)
}

// readTUN enqueues what the TUN gives into the ingress queue.
func (e *Engine) readTUN(ctx context.Context) {
	ps := make([]*pkt.Packet, batch)
	for ctx.Err() == nil {
		refill(ps)
		readFrom := e.now()
		n, err := e.dev.ReadBatch(ps)
		if n > 0 {
			e.ingress(ps[:n], readFrom)
		}
		if err != nil && ctx.Err() == nil {
			e.log.Error("TUN read failed", "err", err)
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func refill(ps []*pkt.Packet) {
	for i := range ps {
		if ps[i] == nil {
			ps[i] = pkt.Get()
		}
	}
}

// ingress enqueues packets the TUN reader read and pumps.
func (e *Engine) ingress(ps []*pkt.Packet, readFrom int64) {
	if bad := e.dev.Invalid(); bad != e.badFrames { // super-packets that cannot be cut up
		e.drops[DropOversize].Add(bad - e.badFrames)
		e.badFrames = bad
	}
	now := e.now()
	e.mu.Lock()
	for i, p := range ps {
		ps[i] = nil
		if p.N > e.cfg.MTU || p.Version() == 0 {
			e.drop(DropOversize)
			pkt.Put(p)
			continue
		}
		p.Born = now
		if x, ok := icmpEcho(p.Bytes()); ok && e.trace {
			e.traceEcho("read", x, "batch", len(ps), "read_us", (now-readFrom)/1e3)
		}
		e.tunBytes.Add(uint64(p.N))
		e.queue.Enqueue(p, now)
	}
	e.mu.Unlock()
	e.pump()
}

type outgoing struct {
	p    *pathIO
	pkt  *pkt.Packet
	hdr  wire.Header
	data uint64
}

// pump sends while a path has room and the queue has packets. Whoever made sending
// possible (the TUN reader after an enqueue, the receiver after an ack, the timers, the
// API) pumps in its own goroutine, so no hand-over to a sender goroutine is waited for;
// one pumps at a time (path seqs leave in order), and a call that finds another pumping
// leaves the work to it. What one pull takes leaves in one segmented send per path.
func (e *Engine) pump() {
	e.pumpWanted.Store(true)
	for e.pumpWanted.Load() {
		if !e.pumping.CompareAndSwap(false, true) {
			return // the one pumping sees pumpWanted after it stops
		}
		e.pumpWanted.Store(false)
		for {
			e.out = e.pull(e.out[:0], e.cands)
			if len(e.out) == 0 {
				break
			}
			now, traced := e.now(), echo{seq: -1}
			for _, o := range e.out {
				if x, ok := icmpEcho(o.pkt.Bytes()); ok && e.trace {
					traced = x
				}
				e.queueData(o)
				pkt.Put(o.pkt)
			}
			for _, p := range e.paths {
				e.flush(p)
			}
			if traced.seq >= 0 {
				e.traceEcho("sent", traced, "batch", len(e.out), "send_us", (e.now()-now)/1e3)
			}
		}
		e.pumping.Store(false)
	}
}

// queueData seals o into its path's batch, sending the batch first if o does not fit.
func (e *Engine) queueData(o outgoing) {
	size := wire.Overhead + o.pkt.N
	if !o.p.batch.fits(size) {
		e.flush(o.p)
	}
	e.seal(o.p.batch.room(size), o)
	o.p.batch.add(size)
}

// flush sends what p's batch holds (pump only).
func (e *Engine) flush(p *pathIO) {
	b := p.batch
	if b.count == 0 {
		return
	}
	err := b.send(p.conn, p.cfg.Remote, p.gso)
	if err == errGSOUnsupported {
		e.log.Warn("UDP GSO refused: sending datagrams one by one", "path", p.cfg.ID)
		p.gso = false
		err = b.send(p.conn, p.cfg.Remote, false)
	}
	if err != nil {
		e.sendFailed(p, err)
	} else {
		e.txPackets.Add(uint64(b.count))
	}
	b.reset()
}

func (e *Engine) sendFailed(p *pathIO, err error) {
	e.mu.Lock()
	wentDown := p.tx.SendFailed(e.now())
	e.mu.Unlock()
	if wentDown {
		e.log.Warn("path down: send failed", "path", p.cfg.ID, "err", err)
	}
}

// pull takes up to a batch of packets from the queue, each assigned to a path.
func (e *Engine) pull(out []outgoing, cands []sched.Path) []outgoing {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	mss := e.cfg.MTU + wire.Overhead
	for len(out) < cap(out) {
		cands = cands[:0]
		var ios [8]*pathIO
		for _, p := range e.paths {
			if p.tx.Usable() && p.tx.Room(mss) && len(cands) < len(ios) {
				ios[len(cands)] = p
				cands = append(cands, e.schedPath(p))
			}
		}
		if len(cands) == 0 {
			break
		}
		pk := e.queue.Dequeue(now)
		if pk == nil {
			break
		}
		p := ios[e.sched.Pick(cands, pk.N+wire.Overhead)]
		if x, ok := icmpEcho(pk.Bytes()); ok && e.trace {
			e.traceEcho("dequeued", x, "sojourn_us", (now-pk.Born)/1e3, "path", p.cfg.ID, "paths_with_room", len(cands))
		}
		e.nextDataSeq++
		seq := p.tx.OnSend(pk.N+wire.Overhead, now, false)
		out = append(out, outgoing{p: p, pkt: pk, data: e.nextDataSeq,
			hdr: wire.Header{Type: wire.TypeShortData, PathID: p.cfg.ID, PathSeq: seq}})
	}
	return out
}

func (e *Engine) schedPath(p *pathIO) sched.Path {
	sp := sched.Path{ID: p.cfg.ID, SRTT: p.tx.SRTT()}
	if !p.radio.at.IsZero() && time.Since(p.radio.at) < radioTTL {
		sp.RadioCapacityBps, sp.RadioQueueBytes = p.radio.capacityBps, p.radio.queueBytes
	}
	return sp
}

// seal writes o as a sealed data datagram into dst (a probe when o.pkt is nil); dst must
// hold o's header, the data body, the packet and the tag.
func (e *Engine) seal(dst []byte, o outgoing) []byte {
	wire.PutHeader(dst, o.hdr)
	hl, n := o.hdr.Len(), 0
	if o.pkt != nil {
		n = copy(dst[hl+wire.DataBodyLen:], o.pkt.Bytes())
	}
	wire.PutDataBody(dst[hl:], o.data)
	return e.txKey.Seal(dst, o.hdr, dst[hl:hl+wire.DataBodyLen+n])
}

// sendData seals and sends one data datagram on its own (probes).
func (e *Engine) sendData(buf []byte, o outgoing) {
	if _, err := o.p.conn.WriteToUDPAddrPort(e.seal(buf, o), o.p.cfg.Remote); err != nil {
		e.sendFailed(o.p, err)
		return
	}
	e.txPackets.Add(1)
}

// timers runs every tick: path timeouts and probes, delayed acks, the reorder timeout.
func (e *Engine) timers(ctx context.Context) {
	t := time.NewTicker(tick)
	defer t.Stop()
	buf := make([]byte, 256)
	var probes []outgoing
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := e.now()
		probes = probes[:0]
		e.mu.Lock()
		for _, p := range e.paths {
			if p.tx.Tick(now) {
				e.log.Warn("path down", "path", p.cfg.ID, "timeouts", p.tx.Timeouts)
			}
			if p.tx.NeedsProbe(now, e.cfg.ProbeInterval) {
				seq := p.tx.OnSend(wire.ProbeLen, now, true)
				probes = append(probes, outgoing{p: p, hdr: wire.Header{Type: wire.TypeData, PathID: p.cfg.ID,
					PeerID: e.cfg.PeerID, Epoch: e.epoch, PathSeq: seq}})
			}
		}
		e.mu.Unlock()
		for _, o := range probes {
			e.sendData(buf, o)
		}
		e.pump() // a timeout frees room in a window
		e.rxMu.Lock()
		for _, p := range e.paths {
			if p.rxData.Pending() > 0 {
				e.sendAck(buf, p, now)
			}
		}
		e.reorder.Expire(now, e.deliverTo)
		e.flushTUN()
		e.rxMu.Unlock()
	}
}

// sendAck acks what p received (under e.rxMu).
func (e *Engine) sendAck(buf []byte, p *pathIO, now int64) {
	h := wire.Header{Type: wire.TypeAck, PathID: p.cfg.ID, PeerID: e.cfg.PeerID, Epoch: e.epoch,
		PathSeq: p.ackSeq.Add(1) | ackSeqBit}
	wire.PutHeader(buf, h)
	wire.PutAck(buf[wire.HeaderLen:], p.rxData.Ack(now))
	d := e.txKey.Seal(buf, h, buf[wire.HeaderLen:wire.HeaderLen+wire.AckBodyLen])
	_, _ = p.conn.WriteToUDPAddrPort(d, p.cfg.Remote)
}

// receive reads path p's socket until it is closed. One read may return several datagrams
// (UDP GRO); they are acked together after the read (every ackEvery datagrams at most).
func (e *Engine) receive(ctx context.Context, p *pathIO) {
	buf := make([]byte, readBufSize)
	oob := make([]byte, unix.CmsgSpace(4))
	ackBuf := make([]byte, 256)
	for ctx.Err() == nil {
		n, oobn, _, from, err := p.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if ctx.Err() == nil {
				e.log.Error("path socket read failed", "path", p.cfg.ID, "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		seg := groSegmentSize(oob[:oobn])
		if seg <= 0 {
			seg = n
		}
		for off := 0; off < n; off += seg {
			if e.handle(p, buf[off:min(off+seg, n)], from) {
				e.rxMu.Lock()
				e.sendAck(ackBuf, p, e.now())
				e.rxMu.Unlock()
			}
		}
		e.rxMu.Lock()
		e.flushTUN()
		if p.rxData.Pending() >= 2 { // as one datagram in two when they come one by one
			e.sendAck(ackBuf, p, e.now())
		}
		e.rxMu.Unlock()
	}
}

// handle checks one datagram and acts on it; every rejection is counted by its reason.
// It returns whether an ack is due at once (a probe).
func (e *Engine) handle(p *pathIO, b []byte, from netip.AddrPort) (ackNow bool) {
	h, err := wire.ParseHeader(b)
	switch {
	case err != nil || (h.Type == wire.TypeAck) != (h.PathSeq&ackSeqBit != 0):
		e.drop(DropMalformed)
		return false
	case e.byID[h.PathID] == nil:
		e.drop(DropUnknownPath)
		return false
	case h.PathID != p.cfg.ID || from != p.cfg.Remote || (h.Full() && h.PeerID != e.cfg.PeerID):
		e.drop(DropNotPeer)
		return false
	}
	body, used, fresh, ok := e.open(h, b)
	if !ok {
		return false
	}
	now := e.now()
	if h.Type == wire.TypeAck {
		e.handleAck(p, h, body, used, fresh, now)
		return false
	}
	seq, packet, err := wire.ParseDataBody(body)
	if err != nil {
		e.drop(DropMalformed)
		return false
	}
	e.rxMu.Lock()
	defer e.rxMu.Unlock()
	if !e.current(used, fresh) || !p.rxData.Accept(h.PathSeq, now) {
		e.drop(DropReplay)
		return false
	}
	if len(packet) > 0 {
		e.rxPackets.Add(1)
		e.rxBytes.Add(uint64(len(packet)))
		if x, ok := icmpEcho(packet); ok && e.trace {
			e.traceEcho("received", x, "path", p.cfg.ID, "held", e.reorder.Held())
		}
		e.reorder.Push(seq, p.index, packet, now, e.deliverTo)
	}
	return len(packet) == 0 || p.rxData.Pending() >= ackEvery // probes at once
}

// open authenticates b: with the peer's current key (returned as used), or, for a full
// header of a newer epoch (the peer restarted), with a key derived for it (returned as
// fresh, adopted by the caller). A short header is opened with the current key only: a
// datagram of another run of the peer fails (auth), as does any before a full header made
// a run current.
func (e *Engine) open(h wire.Header, b []byte) (body []byte, used, fresh *peerKey, ok bool) {
	cur := e.peer.Load()
	key := (*wire.Key)(nil)
	switch {
	case !h.Full() && cur == nil:
		e.drop(DropAuth)
		return nil, nil, nil, false
	case !h.Full():
		key, used = cur.key, cur
	case cur != nil && h.Epoch < cur.epoch:
		e.drop(DropReplay)
		return nil, nil, nil, false
	case cur != nil && h.Epoch == cur.epoch:
		key, used = cur.key, cur
	default:
		peerRole := wire.RoleUE
		if e.cfg.Role == wire.RoleUE {
			peerRole = wire.RoleMEC
		}
		k, err := wire.NewKey(e.cfg.PSK, peerRole, h.Epoch, e.cfg.PeerID)
		if err != nil {
			e.drop(DropAuth)
			return nil, nil, nil, false
		}
		key, fresh = k, &peerKey{epoch: h.Epoch, key: k}
	}
	body, err := key.Open(b, h)
	if err != nil {
		e.drop(DropAuth)
		return nil, nil, nil, false
	}
	return body, used, fresh, true
}

// current tells whether the run whose key opened a datagram is still the peer's current
// one, adopting fresh if it is newer (under e.rxMu); a datagram of a run that another
// replaced meanwhile would otherwise meet replay windows reset for the new run.
func (e *Engine) current(used, fresh *peerKey) bool {
	if fresh != nil {
		return e.adopt(fresh)
	}
	return e.peer.Load() == used
}

// adopt makes a newer run of the peer current (under e.rxMu, takes e.mu); false if it is
// older.
func (e *Engine) adopt(k *peerKey) bool {
	cur := e.peer.Load()
	if cur != nil && k.epoch < cur.epoch {
		return false
	}
	if cur == nil || k.epoch > cur.epoch {
		e.peer.Store(k)
		for _, p := range e.paths {
			p.rxData.Reset()
			p.rxAck.Reset()
		}
		e.reorder.Reset()
		e.log.Info("peer authenticated", "peer", e.cfg.PeerID, "epoch", k.epoch)
	}
	if cur != nil && k.epoch > cur.epoch { // it cannot open our short headers: announce us again
		e.mu.Lock()
		for _, p := range e.paths {
			p.tx.PeerRestarted(e.now())
		}
		e.mu.Unlock()
	}
	return true
}

func (e *Engine) handleAck(p *pathIO, h wire.Header, body []byte, used, fresh *peerKey, now int64) {
	a, err := wire.ParseAck(body)
	if err != nil {
		e.drop(DropMalformed)
		return
	}
	e.rxMu.Lock()
	ok := e.current(used, fresh) && p.rxAck.Accept(h.PathSeq&^ackSeqBit, now)
	e.rxMu.Unlock()
	if !ok {
		e.drop(DropReplay)
		return
	}
	e.mu.Lock()
	if p.tx.OnAck(a, now) {
		e.log.Info("path up", "path", p.cfg.ID)
	}
	e.mu.Unlock()
	e.pump()
}
