package threadsched

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lockThreads parks n goroutines each on an OS thread of its own, so that Go has to start
// new threads for the rest; release lets them go.
func lockThreads(n int) (release func()) {
	var started, done sync.WaitGroup
	stop := make(chan struct{})
	started.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started.Done()
			<-stop
		}()
	}
	started.Wait()
	return func() { close(stop); done.Wait() }
}

func attrs(t *testing.T) map[int]unix.SchedAttr {
	t.Helper()
	tids, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]unix.SchedAttr{}
	for _, tid := range tids {
		if a, err := Of(tid); err == nil { // a thread may exit meanwhile
			out[tid] = *a
		}
	}
	return out
}

// applied runs apply between threads started before and after it, and checks with ok
// every thread, the threads cloned after apply among them.
func applied(t *testing.T, apply func() error, ok func(unix.SchedAttr) bool) {
	t.Helper()
	release := lockThreads(3)
	defer release()
	before := attrs(t)
	if err := apply(); err != nil {
		t.Fatal(err)
	}
	release2 := lockThreads(len(before) + 4) // more than Go has idle: new threads, cloned after apply
	defer release2()
	after := attrs(t)
	cloned := 0
	for tid, a := range after {
		if !ok(a) {
			t.Errorf("thread %d: %+v", tid, a)
		}
		if _, old := before[tid]; !old {
			cloned++
		}
	}
	if cloned < 4 {
		t.Fatalf("only %d threads started after apply (of %d): the inheritance is not tested", cloned, len(after))
	}
}

// Every thread has the slice, those that existed at ApplySlice and those Go started
// afterwards; ApplySlice(0) gives them the kernel's default back.
func TestApplySliceReachesEveryThreadAndItsClones(t *testing.T) {
	const want = 300 * time.Microsecond
	defer func() { _ = ApplySlice(0) }()
	applied(t, func() error { return ApplySlice(want) }, func(a unix.SchedAttr) bool {
		return a.Policy == unix.SCHED_NORMAL && a.Runtime == uint64(want)
	})
	if err := ApplySlice(0); err != nil {
		t.Fatal(err)
	}
	for tid, a := range attrs(t) {
		if a.Runtime == uint64(want) {
			t.Errorf("thread %d: still %v after ApplySlice(0)", tid, want)
		}
	}
}

func TestApplyFIFOReachesEveryThreadAndItsClones(t *testing.T) {
	defer func() { // back to SCHED_OTHER
		_ = eachThread(func(tid int, a *unix.SchedAttr) error {
			a.Policy, a.Priority = unix.SCHED_NORMAL, 0
			return set(tid, a)
		})
	}()
	applied(t, func() error {
		err := ApplyFIFO(1)
		if errors.Is(err, unix.EPERM) {
			t.Skip("SCHED_FIFO needs CAP_SYS_NICE (make test-tunnel runs as root)")
		}
		return err
	}, func(a unix.SchedAttr) bool { return a.Policy == unix.SCHED_FIFO && a.Priority == 1 })
}

func TestApplyRefusesValuesOutsideTheKernelsBounds(t *testing.T) {
	for _, s := range []time.Duration{-time.Microsecond, 50 * time.Microsecond, 101 * time.Millisecond} {
		if err := ApplySlice(s); err == nil {
			t.Errorf("ApplySlice(%v) accepted", s)
		}
	}
	for _, p := range []int{0, 100} {
		if err := ApplyFIFO(p); err == nil {
			t.Errorf("ApplyFIFO(%d) accepted", p)
		}
	}
}
