package engine

import (
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/tunnel/internal/threadsched"
)

// pollTimeout bounds a packet thread's wait in poll(2), so that it sees its context end.
const pollTimeout = 100 * time.Millisecond

// packetWait is how a packet reader (the TUN reader, a path's receiver) waits before a read:
// it returns false when nothing is to be read yet (the caller checks its context and waits
// again). Without PacketThreadPriority it returns true at once: the read waits in Go's
// poller, which wakes the reader through one of Go's threads.
type packetWait func(rc syscall.RawConn) bool

// packetThread makes the calling goroutine a real-time packet thread when
// PacketThreadPriority is set: locked to its OS thread, which goes into SCHED_FIFO and waits
// for its fd in poll(2) itself, so that the kernel wakes it directly and it preempts the
// normal threads at once. Go's own threads (idle, spinning, sysmon, GC) stay in the normal
// class; every thread of a process in SCHED_FIFO livelocked 3 of 8 starts (docs/tunnel.md).
// The thread is never unlocked: it exits with the goroutine instead of going back to Go's
// pool in SCHED_FIFO (Go clones new threads from a template thread, not from a locked one).
func (e *Engine) packetThread(what string) packetWait {
	prio := e.cfg.PacketThreadPriority
	if prio == 0 {
		return func(syscall.RawConn) bool { return true }
	}
	runtime.LockOSThread()
	if err := threadsched.SetFIFO(unix.Gettid(), prio); err != nil {
		e.log.Error("packet thread stays in the normal class", "reader", what, "err", err)
		return func(syscall.RawConn) bool { return true }
	}
	return pollReadable
}

// pollReadable blocks this thread in poll(2) until rc's fd is readable (or has an error for
// the read to report) or pollTimeout passes. A signal (Go preempts with SIGURG) is a false.
func pollReadable(rc syscall.RawConn) bool {
	ready := true // a closed fd: the read reports it
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(pollTimeout/time.Millisecond))
		ready = err == nil && n > 0
	})
	return ready
}
