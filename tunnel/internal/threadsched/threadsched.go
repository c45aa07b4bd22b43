// Package threadsched sets how the kernel schedules the tunnel's threads: a shorter EEVDF
// slice for every thread of this process (TUNNEL_SCHED_SLICE_US). Since Linux 6.12 a
// SCHED_OTHER thread may request its slice with sched_setattr(2)'s sched_runtime
// (0.1-100 ms); EEVDF gives a waking thread the virtual deadline "eligible time + slice", so
// a shorter slice lets the tunnel's wake-ups (a TUN read, a path receive) preempt a running
// CPU hog sooner. Threads cloned later (Go starts them as it needs) inherit the slice from
// the thread that clones them.
package threadsched

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Min and Max are the kernel's bounds on a requested slice (it clamps to them).
const (
	Min = 100 * time.Microsecond
	Max = 100 * time.Millisecond
)

// ApplySlice requests slice for every thread of the process, keeping each one's policy and nice
// value, and checks that the kernel took it (a kernel before 6.12 ignores sched_runtime for
// SCHED_OTHER). A slice of 0 returns the threads to the kernel's default.
func ApplySlice(slice time.Duration) error {
	if slice != 0 && (slice < Min || slice > Max) {
		return fmt.Errorf("slice %v: must be 0 or %v..%v", slice, Min, Max)
	}
	done := map[int]bool{}
	for { // again until a pass finds no thread it has not set: one may be cloned meanwhile
		tids, err := Threads()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			if err := set(tid, slice); err != nil {
				return err
			}
			done[tid], fresh = true, fresh+1
		}
		if fresh == 0 {
			return nil
		}
	}
}

func set(tid int, slice time.Duration) error {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err == unix.ESRCH {
		return nil // the thread has exited
	}
	if err != nil {
		return fmt.Errorf("sched_getattr %d: %w", tid, err)
	}
	if attr.Policy != unix.SCHED_NORMAL && attr.Policy != unix.SCHED_BATCH {
		return fmt.Errorf("thread %d: policy %d is not SCHED_OTHER or SCHED_BATCH: no slice to set", tid, attr.Policy)
	}
	attr.Runtime = uint64(slice)
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil && err != unix.ESRCH {
		return fmt.Errorf("sched_setattr %d: %w", tid, err)
	}
	if slice == 0 {
		return nil
	}
	got, err := Of(tid)
	if err == nil && got != slice {
		err = fmt.Errorf("thread %d: the kernel kept a slice of %v, not %v (custom slices need Linux >= 6.12)", tid, got, slice)
	}
	if err == unix.ESRCH {
		return nil
	}
	return err
}

// Of is a thread's current slice as sched_getattr(2) reports it (Linux >= 6.12).
func Of(tid int) (time.Duration, error) {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(attr.Runtime), nil
}

// Threads lists the process's thread ids (/proc/self/task).
func Threads() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
