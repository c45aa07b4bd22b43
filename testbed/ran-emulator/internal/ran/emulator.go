package ran

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/services/common/go/pkt"
	"mts.invalid/suite/services/common/go/tun"
)

// UE is one emulated terminal with a bearer per attached cell.
type UE struct {
	Cfg     UEConfig
	Index   int
	Bearers []*Bearer
}

// Emulator is the whole RAN: cells, UEs, the TTI clock and the packet I/O.
type Emulator struct {
	Cfg     *Config
	Cells   []*Cell
	UEs     []*UE
	Timing  Timing
	Started time.Time

	byIP      map[uint32]*Bearer
	tick      int64 // ns: the shortest TTI of all cells
	spin      int64
	epoch     time.Time
	epochMono int64
	dl        *tun.Device
	ulOut     *writer // uplink packets leave through the downlink TUN into the RAN namespace
	wan       []*WANDir
	devices   []*tun.Device
	writers   []*writer
	done      chan struct{}
	wg        sync.WaitGroup
	log       *slog.Logger

	// Truth labels every dropped packet with its cause (see truth.go).
	Truth *Truth

	UnknownDst   atomic.Uint64 // downlink packets for no UE
	WriteErrors  atomic.Uint64 // packets the kernel refused
	statsPeriod  atomic.Int64
	lastTickTime atomic.Int64
}

// New builds the emulator from a validated configuration; it opens no device yet.
func New(cfg *Config, log *slog.Logger) (*Emulator, error) {
	e := &Emulator{Cfg: cfg, byIP: map[uint32]*Bearer{}, done: make(chan struct{}), log: log,
		spin: int64(cfg.SpinUS) * 1000, Truth: NewTruth(DropLogSize)}
	cells := map[uint64]*Cell{}
	for i, cc := range cfg.Cells {
		c, err := newCell(cc, i)
		if err != nil {
			return nil, err
		}
		c.stats.set(statsConfDefault(cfg.StatsPeriodMS))
		e.Cells = append(e.Cells, c)
		cells[cc.BSID] = c
		if e.tick == 0 || c.ttiNs < e.tick {
			e.tick = c.ttiNs
		}
	}
	for i, uc := range cfg.UEs {
		ue := &UE{Cfg: uc, Index: i}
		for j, bc := range uc.Bearers {
			b, err := newBearer(ue, cells[bc.BSID], bc, cfg.Seed+uint64(1000*i+j))
			if err != nil {
				return nil, fmt.Errorf("ue %q: %w", uc.Name, err)
			}
			b.truth = e.Truth
			ue.Bearers = append(ue.Bearers, b)
			b.Cell.bearers = append(b.Cell.bearers, b)
			e.byIP[b.ip4] = b
		}
		e.UEs = append(e.UEs, ue)
	}
	for _, c := range e.Cells {
		if err := c.attachUplink(cfg.Seed); err != nil {
			return nil, fmt.Errorf("cell %d: %w", c.Cfg.BSID, err)
		}
	}
	return e, nil
}

func newBearer(ue *UE, cell *Cell, cfg BearerConfig, seed uint64) (*Bearer, error) {
	b := &Bearer{UE: ue, Cell: cell, Cfg: cfg, ip4: binary.BigEndian.Uint32(cfg.IP.AsSlice()),
		harq: make([]harqProc, cell.Cfg.HARQ.Processes), ch: newChannel(cfg.Channel, seed),
		rng: rand.New(rand.NewPCG(seed, 0x5eed)), inbox: pkt.NewSPSC(inboxSize), ulInbox: pkt.NewSPSC(inboxSize)}
	params := cfg.Queue.params()
	params.Seed = uint32(seed)
	q, err := aqm.New(params, b.dropped)
	if err != nil {
		return nil, err
	}
	b.queue = q
	return b, nil
}

// DropLogSize is how many labelled drops the event log keeps for readers (~5 MB).
const DropLogSize = 65536

// inboxSize bounds what readers may hand to the TTI thread between two ticks (packets).
const inboxSize = 8192

// Now is the emulator clock: CLOCK_MONOTONIC in ns (what clock_nanosleep uses), read
// through the runtime's vDSO clock.
func (e *Emulator) Now() int64 { return e.epochMono + int64(time.Since(e.epoch)) }

// Run opens the devices, starts readers and writers and runs the TTI clock until Stop.
func (e *Emulator) Run() error {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return err
	}
	e.epoch, e.epochMono = time.Now(), ts.Nano()
	e.Started = e.epoch
	if err := e.open(); err != nil {
		e.closeDevices()
		return err
	}
	e.runGrantFeeds()
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.clock()
	}()
	return nil
}

// Stop ends the clock, readers and writers and closes every device.
func (e *Emulator) Stop() {
	close(e.done)
	e.closeDevices()
	e.wg.Wait()
}

func (e *Emulator) closeDevices() {
	for _, d := range e.devices {
		d.Close()
	}
}

func (e *Emulator) openDev(ref TunRef) (*tun.Device, error) {
	d, err := tun.Open(ref.Netns, ref.Name)
	if err == nil {
		e.devices = append(e.devices, d)
	}
	return d, err
}

func (e *Emulator) open() error {
	dl, err := e.openDev(e.Cfg.DLTun)
	if err != nil {
		return err
	}
	e.dl = dl
	e.ulOut = e.startWriter(dl, nil)
	e.goReader(dl, e.onDownlink)
	for _, ue := range e.UEs {
		for _, b := range ue.Bearers {
			dev, err := e.openDev(b.Cfg.Tun)
			if err != nil {
				return err
			}
			b.writer = e.startWriter(dev, func(p *pkt.Packet) {
				b.C.DLDeliveredPkts.Add(1)
				b.C.DLDeliveredBytes.Add(uint64(p.N))
			})
			e.goReader(dev, func(p *pkt.Packet) { b.enqueueUL(p, e.Now()) })
		}
	}
	if e.Cfg.WAN != nil {
		return e.openWAN(e.Cfg.WAN)
	}
	return nil
}

func (e *Emulator) startWriter(dev *tun.Device, written func(*pkt.Packet)) *writer {
	w := newWriter(dev, written, func(n int) { e.WriteErrors.Add(uint64(n)) })
	e.writers = append(e.writers, w)
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		w.run(e.done)
	}()
	return w
}

func (e *Emulator) goReader(dev *tun.Device, handle func(*pkt.Packet)) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		reader(dev, e.done, handle, func(err error) {
			e.log.Error("tun read failed; interface lost", "dev", dev.Name, "err", err)
		})
	}()
}

// onDownlink routes a packet from the core side to its bearer by destination address.
func (e *Emulator) onDownlink(p *pkt.Packet) {
	b := e.byIP[p.Dst4()]
	if b == nil {
		e.UnknownDst.Add(1)
		pkt.Put(p)
		return
	}
	b.enqueueDL(p, e.Now(), b.Cell.TTI.Load())
}

// clock is the TTI loop on a dedicated OS thread: sleep to an absolute deadline with
// clock_nanosleep, spin the last few µs, run every cell whose TTI starts now, then move
// due packets to the writers.
func (e *Emulator) clock() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if e.Cfg.RTPriority > 0 {
		if err := setFIFO(0, e.Cfg.RTPriority); err != nil {
			e.log.Warn("TTI clock stays a normal thread: no real-time priority", "err", err)
		}
	}
	next := e.Now() + e.tick
	for tick := int64(0); ; tick++ {
		select {
		case <-e.done:
			return
		default:
		}
		e.sleepUntil(next)
		now := e.Now()
		e.Timing.record(now - next)
		if late := now - next; late > 100*e.tick {
			skipped := late / e.tick
			e.Timing.Skipped.Add(uint64(skipped))
			next += skipped * e.tick
			tick += skipped
		}
		for _, c := range e.Cells {
			if (tick*e.tick)%c.ttiNs == 0 {
				c.runCellTTI(next)
			}
		}
		e.moveDue(now)
		e.lastTickTime.Store(now)
		next += e.tick
	}
}

// sleepUntil sleeps with a raw clock_nanosleep: a normal syscall would hand this thread's
// P to other goroutines, and getting it back can take a scheduler time slice (ms), which
// is the lateness we are avoiding. The clock thread keeps its P (main sets GOMAXPROCS
// to one more than the CPUs for the other goroutines).
func (e *Emulator) sleepUntil(deadline int64) {
	if wake := deadline - e.spin; wake > e.Now() {
		ts := unix.NsecToTimespec(wake)
		for {
			_, _, errno := unix.RawSyscall6(unix.SYS_CLOCK_NANOSLEEP, unix.CLOCK_MONOTONIC,
				unix.TIMER_ABSTIME, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
			if errno != unix.EINTR {
				break
			}
		}
	}
	for e.Now() < deadline {
	}
}

// moveDue runs the uplink grant and every delay line.
func (e *Emulator) moveDue(now int64) {
	for _, ue := range e.UEs {
		for _, b := range ue.Bearers {
			b.dlDelay.popDue(now, b.writer, nil)
			if b.up != nil {
				e.deliverUplink(b, now)
			} else {
				e.serveUplink(b, now)
			}
			b.writer.kick()
		}
	}
	for _, w := range e.wan {
		w.serve(now, e.tick)
	}
	e.ulOut.kick()
}

// deliverUplink hands what the uplink MAC delivered (due by now) to the RAN namespace.
func (e *Emulator) deliverUplink(b *Bearer, now int64) {
	b.up.dlDelay.popDue(now, e.ulOut, b.countULDelivered)
}

// serveUplink grants the uplink its rate for this tick and starts the uplink delay
// (a bearer without an uplink MAC).
func (e *Emulator) serveUplink(b *Bearer, now int64) {
	perTick := b.Cfg.ULRateMbps * 1e6 / 8 * float64(e.tick) / 1e9
	delay := int64(b.Cfg.ULDelayMS * 1e6)
	b.drainULInbox()
	serveRate(&b.ul, &b.ulCarry, perTick, b.Cfg.ULRateMbps == 0, func(p *pkt.Packet) {
		p.Born = max(p.Born, now-e.tick) + delay // arrival (or start of service) + delay
		b.ulDelay.push(p)
		b.mac.ulTBS += p.N
	})
	// delay stages release at the tick nearest to the due time: releasing at the
	// next tick would add a whole tick to every stage chained on the same clock
	b.ulDelay.popDue(now+e.tick/2, e.ulOut, b.countULDelivered)
}

// Bearers lists every bearer in configuration order.
func (e *Emulator) Bearers() []*Bearer {
	var out []*Bearer
	for _, ue := range e.UEs {
		out = append(out, ue.Bearers...)
	}
	return out
}

// Uptime is the time since Run.
func (e *Emulator) Uptime() time.Duration { return time.Since(e.Started) }

// TickNs is the clock period: the shortest TTI of all cells.
func (e *Emulator) TickNs() int64 { return e.tick }

// WAN lists the WAN stage's two directions (none without a WAN stage).
func (e *Emulator) WAN() []*WANDir { return e.wan }

// setFIFO gives thread tid (0: the caller) SCHED_FIFO priority prio, so that a loaded
// machine does not delay the TTI clock (it sleeps most of each TTI; the kernel's RT
// throttling bounds it anyway).
func setFIFO(tid, prio int) error {
	param := struct{ priority int32 }{int32(prio)}
	_, _, errno := unix.RawSyscall(unix.SYS_SCHED_SETSCHEDULER, uintptr(tid), 1 /* SCHED_FIFO */, uintptr(unsafe.Pointer(&param)))
	if errno != 0 {
		return errno
	}
	return nil
}

// Offline use (unit tests, what-if runs): Inject hands a downlink packet to the emulator
// as the TUN reader would, and Step runs one TTI of every cell at time now (ns) without
// any device. Delivered packets stay in the bearers' delay lines (see Delivered).
func (e *Emulator) Inject(p *pkt.Packet, now int64) bool {
	b := e.byIP[p.Dst4()]
	if b == nil {
		pkt.Put(p)
		return false
	}
	b.enqueueDL(p, now, b.Cell.TTI.Load())
	return true
}

// Step runs one TTI of every cell starting at now (ns).
func (e *Emulator) Step(now int64) {
	for _, c := range e.Cells {
		c.runCellTTI(now)
	}
}

// Delivered pops the packets due by now from bearer b's delivery line (offline use).
func (b *Bearer) Delivered(now int64) []*pkt.Packet {
	var out []*pkt.Packet
	for p := b.dlDelay.ring.Peek(); p != nil && p.Born <= now; p = b.dlDelay.ring.Peek() {
		out = append(out, b.dlDelay.ring.Pop())
	}
	return out
}

// RealtimeRuntime puts every thread of the process at SCHED_FIFO priority 1 (threads the
// runtime starts later inherit it). The Go scheduler preempts a goroutine that ran 10 ms
// without yielding, and the TTI clock, locked to its thread, then waits for another
// runtime thread to reschedule it: if those threads are ordinary ones on a loaded
// machine, that wait is milliseconds to hundreds of milliseconds. Priority 1 is below
// the clock's and above every ordinary process; the emulator's threads sleep when there
// is no packet, and the kernel's RT throttling leaves ordinary processes 5 % in any case.
func RealtimeRuntime() error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := setFIFO(tid, 1); err != nil {
			return err
		}
	}
	return nil
}

// InjectUL hands an uplink packet to UE bearer b as its interface reader would (offline use).
func (e *Emulator) InjectUL(b *Bearer, p *pkt.Packet, now int64) { b.enqueueUL(p, now) }
