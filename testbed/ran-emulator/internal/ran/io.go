package ran

import (
	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
	"mts.invalid/suite/services/common/go/tun"
)

// delayLine holds packets until their due time (kept in p.Born). Due times only grow,
// so a FIFO is enough. TTI thread only.
type delayLine struct {
	ring aqm.Ring
}

func (d *delayLine) push(p *pkt.Packet) { d.ring.Push(p) }

// popDue moves every packet due by now to w and tells how many it moved.
func (d *delayLine) popDue(now int64, w *writer, each func(*pkt.Packet)) int {
	n := 0
	for p := d.ring.Peek(); p != nil && p.Born <= now; p = d.ring.Peek() {
		p = d.ring.Pop()
		if each != nil {
			each(p)
		}
		w.add(p)
		n++
	}
	return n
}

// writer writes packets to one TUN device from its own goroutine, so that slow writes
// (the kernel processes the packet inside write) never delay the TTI clock.
type writer struct {
	dev     *tun.Device
	pending *pkt.SPSC
	wake    chan struct{}
	written func(p *pkt.Packet) // counts delivery; runs before the packet is recycled
	failed  func(n int)
}

func newWriter(dev *tun.Device, written func(*pkt.Packet), failed func(int)) *writer {
	return &writer{dev: dev, pending: pkt.NewSPSC(writerQueue), wake: make(chan struct{}, 1),
		written: written, failed: failed}
}

// writerQueue bounds the packets waiting for a writer; beyond it they are dropped and
// counted as write errors (the kernel side cannot keep up).
const writerQueue = 16384

func (w *writer) add(p *pkt.Packet) {
	if !w.pending.Push(p) {
		w.failed(1)
		pkt.Put(p)
	}
}

// kick wakes the writer if anything is pending.
func (w *writer) kick() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *writer) run(done <-chan struct{}) {
	batch := make([]*pkt.Packet, 0, 256)
	for {
		select {
		case <-done:
			return
		case <-w.wake:
		}
		for {
			batch = batch[:0]
			for p := w.pending.Pop(); p != nil; p = w.pending.Pop() {
				if batch = append(batch, p); len(batch) == cap(batch) {
					break
				}
			}
			if len(batch) == 0 {
				break
			}
			w.flush(batch)
		}
	}
}

func (w *writer) flush(batch []*pkt.Packet) {
	failed, err := w.dev.WriteBatch(batch)
	if err != nil {
		failed = len(batch) // the device is gone (shutdown)
	}
	if failed > 0 {
		w.failed(failed)
	}
	for i, p := range batch {
		if w.written != nil {
			w.written(p)
		}
		pkt.Put(p)
		batch[i] = nil
	}
}

// reader reads batches from a device and hands each packet to handle (which owns it).
func reader(dev *tun.Device, done <-chan struct{}, handle func(*pkt.Packet), onErr func(error)) {
	const batch = 64
	ps := make([]*pkt.Packet, batch)
	for i := range ps {
		ps[i] = pkt.Get()
	}
	for {
		n, err := dev.ReadBatch(ps)
		for i := 0; i < n; i++ {
			handle(ps[i])
			ps[i] = pkt.Get()
		}
		if err != nil {
			select {
			case <-done:
			default:
				onErr(err)
			}
			return
		}
	}
}

// rateStage serves a FIFO at a rate per tick (uplink, WAN): whole packets, with the
// unused credit carried over (at most one tick's worth, so idle time is not banked).
func serveRate(ring *aqm.Ring, credit *float64, perTick float64, unlimited bool, emit func(*pkt.Packet)) {
	if unlimited {
		for p := ring.Pop(); p != nil; p = ring.Pop() {
			emit(p)
		}
		return
	}
	*credit = min(*credit+perTick, 2*perTick+float64(pkt.BufSize))
	for p := ring.Peek(); p != nil && float64(p.N) <= *credit; p = ring.Peek() {
		*credit -= float64(p.N)
		emit(ring.Pop())
	}
	if ring.Len() == 0 {
		*credit = min(*credit, perTick)
	}
}
