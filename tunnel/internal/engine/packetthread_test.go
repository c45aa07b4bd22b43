package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/aqm"
	"mts.invalid/suite/tunnel/internal/path"
	"mts.invalid/suite/tunnel/internal/threadsched"
	"mts.invalid/suite/tunnel/internal/wire"
)

// fifoThreads lists this process's threads in SCHED_FIFO (but a parked main thread) and
// counts the others.
func fifoThreads(t *testing.T) (fifo []int, others int) {
	t.Helper()
	tids, err := threadsched.Threads()
	if err != nil {
		t.Fatal(err)
	}
	for _, tid := range tids {
		attr, err := unix.SchedGetAttr(tid, 0)
		switch {
		case err != nil: // the thread exited
		case attr.Policy == unix.SCHED_FIFO && !parkedMain(tid):
			fifo = append(fifo, tid)
		default:
			others++
		}
	}
	return fifo, others
}

// parkedMain tells whether tid is the main thread parked for good by an earlier engine in
// this process: a locked thread exits with its goroutine, but the main thread cannot, and
// Go parks it instead, so it never runs anything else.
func parkedMain(tid int) bool {
	if tid != os.Getpid() {
		return false
	}
	b, _ := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/syscall")
	return strings.HasPrefix(string(b), strconv.Itoa(unix.SYS_FUTEX)+" ")
}

// canSetFIFO tries SCHED_FIFO on this thread and puts it back.
func canSetFIFO() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := threadsched.SetFIFO(unix.Gettid(), 1); err != nil {
		return err
	}
	return unix.SchedSetAttr(0, &unix.SchedAttr{Policy: unix.SCHED_NORMAL}, 0)
}

func waitFor(cond func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// With PacketThreadPriority the TUN reader and each path's receiver run on SCHED_FIFO
// threads of their own, which still read (datagrams reach the receivers); Go's other
// threads, also those it starts meanwhile, stay in the normal class; the FIFO threads end
// with the engine.
func TestPacketThreadsAloneAreFIFO(t *testing.T) {
	if err := canSetFIFO(); err != nil {
		t.Skipf("cannot set SCHED_FIFO here (needs CAP_SYS_NICE and real-time runtime): %v", err)
	}
	if fifo, _ := fifoThreads(t); len(fifo) != 0 {
		t.Fatalf("threads %v in SCHED_FIFO before the engine", fifo)
	}
	q := aqm.Defaults()
	cfg := Config{Role: wire.RoleMEC, PeerID: 1, PSK: make([]byte, 16), TUN: "mtsrt" + strconv.Itoa(os.Getpid()%100000),
		MTU: 1400, Queue: q, Scheduler: "lowrtt", CwndMode: path.CwndStatic, CwndBytes: 50000,
		ReorderTimeout: 20 * time.Millisecond, ProbeInterval: 100 * time.Millisecond, PacketThreadPriority: 1}
	for id := range byte(2) {
		cfg.Paths = append(cfg.Paths, PathConfig{ID: id + 1, Local: netip.MustParseAddrPort("127.0.0.1:0"),
			Remote: netip.MustParseAddrPort("127.0.0.1:9")})
	}
	e, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Skipf("cannot open a TUN here (needs root and /dev/net/tun): %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { e.Run(ctx); close(ran) }()
	defer func() { cancel(); <-ran }()

	readers := 1 + len(cfg.Paths)
	if !waitFor(func() bool { fifo, _ := fifoThreads(t); return len(fifo) == readers }) {
		fifo, _ := fifoThreads(t)
		t.Fatalf("%d threads in SCHED_FIFO, want %d (the TUN reader and each path's receiver)", len(fifo), readers)
	}
	// and they wait in ppoll(2) themselves, not parked until Go's poller wakes them
	inPoll := func() bool {
		fifo, _ := fifoThreads(t)
		for _, tid := range fifo {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/syscall", tid))
			if !strings.HasPrefix(string(b), strconv.Itoa(unix.SYS_PPOLL)+" ") {
				return false
			}
		}
		return true
	}
	if !waitFor(inPoll) {
		t.Fatal("the SCHED_FIFO threads do not wait in ppoll(2)")
	}
	// the receivers still read: every datagram sent to a path is dropped as malformed there
	const sent = 20
	for i := range sent {
		to := net.UDPAddrFromAddrPort(e.LocalAddr(cfg.Paths[i%len(cfg.Paths)].ID))
		c, err := net.DialUDP("udp", nil, to)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = fmt.Fprintf(c, "not a tunnel datagram %d", i)
		c.Close()
	}
	if !waitFor(func() bool { return e.drops[DropMalformed].Load() == sent }) {
		t.Fatalf("%d of %d datagrams read by the FIFO receivers", e.drops[DropMalformed].Load(), sent)
	}
	release := lockThreads(8) // Go starts threads now: they must not inherit SCHED_FIFO
	fifo, others := fifoThreads(t)
	release()
	if len(fifo) != readers || others < 8 {
		t.Fatalf("%d threads in SCHED_FIFO (want %d), %d others (want >= 8)", len(fifo), readers, others)
	}
	cancel()
	<-ran
	if !waitFor(func() bool { fifo, _ := fifoThreads(t); return len(fifo) == 0 }) {
		fifo, _ := fifoThreads(t)
		t.Fatalf("threads %v still in SCHED_FIFO after the engine stopped", fifo)
	}
}

// lockThreads parks n goroutines each on an OS thread of its own; release lets them go.
func lockThreads(n int) (release func()) {
	stop, started := make(chan struct{}), make(chan struct{})
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started <- struct{}{}
			<-stop
		}()
	}
	for range n {
		<-started
	}
	return func() { close(stop) }
}
