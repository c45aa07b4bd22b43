package threadsched

import (
	"runtime"
	"sync"
	"testing"
	"time"
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

func slices(t *testing.T) map[int]time.Duration {
	t.Helper()
	tids, err := Threads()
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]time.Duration{}
	for _, tid := range tids {
		if s, err := Of(tid); err == nil { // a thread may exit meanwhile
			out[tid] = s
		}
	}
	return out
}

// Every thread has the slice, those that existed at ApplySlice and those Go started afterwards;
// ApplySlice(0) gives them the kernel's default back.
func TestApplyReachesEveryThreadAndItsClones(t *testing.T) {
	const want = 300 * time.Microsecond
	release := lockThreads(3)
	defer release()
	before := slices(t)
	if err := ApplySlice(want); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ApplySlice(0) }()
	release2 := lockThreads(len(before) + 4) // more than Go has idle: new threads, cloned after ApplySlice
	defer release2()
	after := slices(t)
	cloned := 0
	for tid, s := range after {
		if s != want {
			t.Errorf("thread %d: slice %v, want %v", tid, s, want)
		}
		if _, old := before[tid]; !old {
			cloned++
		}
	}
	if cloned < 4 {
		t.Fatalf("only %d threads started after ApplySlice (of %d): the inheritance is not tested", cloned, len(after))
	}
	if err := ApplySlice(0); err != nil {
		t.Fatal(err)
	}
	for tid, s := range slices(t) {
		if s == want {
			t.Errorf("thread %d: still %v after ApplySlice(0)", tid, s)
		}
	}
}

func TestApplyRefusesSlicesOutsideTheKernelsBounds(t *testing.T) {
	for _, s := range []time.Duration{-time.Microsecond, 50 * time.Microsecond, 101 * time.Millisecond} {
		if err := ApplySlice(s); err == nil {
			t.Errorf("ApplySlice(%v) accepted", s)
		}
	}
}
