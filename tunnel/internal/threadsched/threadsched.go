// Package threadsched sets how the kernel schedules every thread of this process: a
// shorter EEVDF slice (TUNNEL_SCHED_SLICE_US) or SCHED_FIFO (TUNNEL_SCHED_FIFO_PRIORITY).
// Since Linux 6.12 a SCHED_OTHER thread may request its slice with sched_setattr(2)'s
// sched_runtime (0.1-100 ms); EEVDF gives a waking thread the virtual deadline "eligible
// time + slice", so a shorter slice lets the tunnel's wake-ups (a TUN read, a path
// receive) preempt a running thread sooner. A SCHED_FIFO thread preempts every
// SCHED_OTHER one at once. Threads cloned later (Go starts them as it needs) inherit the
// attributes of the thread that clones them, so setting the threads there are at start
// covers the process.
package threadsched

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// MinSlice and MaxSlice are the kernel's bounds on a requested slice (it clamps to them).
const (
	MinSlice = 100 * time.Microsecond
	MaxSlice = 100 * time.Millisecond
)

// ApplySlice requests slice for every thread of the process, keeping each one's policy
// and nice value, and checks that the kernel took it (a kernel before 6.12 ignores
// sched_runtime for SCHED_OTHER). A slice of 0 returns the threads to the kernel's default.
func ApplySlice(slice time.Duration) error {
	if slice != 0 && (slice < MinSlice || slice > MaxSlice) {
		return fmt.Errorf("slice %v: must be 0 or %v..%v", slice, MinSlice, MaxSlice)
	}
	return eachThread(func(tid int, attr *unix.SchedAttr) error {
		if attr.Policy != unix.SCHED_NORMAL && attr.Policy != unix.SCHED_BATCH {
			return fmt.Errorf("thread %d: policy %d is not SCHED_OTHER or SCHED_BATCH: no slice to set", tid, attr.Policy)
		}
		attr.Runtime = uint64(slice)
		if err := set(tid, attr); err != nil || slice == 0 {
			return err
		}
		got, err := Of(tid)
		if err == nil && got.Runtime != uint64(slice) {
			err = fmt.Errorf("thread %d: the kernel kept a slice of %v, not %v (custom slices need Linux >= 6.12)", tid, time.Duration(got.Runtime), slice)
		}
		return err
	})
}

// ApplyFIFO puts every thread of the process in SCHED_FIFO at priority (1..99).
func ApplyFIFO(priority int) error {
	if priority < 1 || priority > 99 {
		return fmt.Errorf("SCHED_FIFO priority %d: must be 1..99", priority)
	}
	return eachThread(func(tid int, attr *unix.SchedAttr) error {
		attr.Policy, attr.Priority, attr.Nice, attr.Runtime = unix.SCHED_FIFO, uint32(priority), 0, 0
		return set(tid, attr)
	})
}

// eachThread calls fn with every thread's current attributes, again until a pass finds
// no thread it has not seen (one may be cloned meanwhile). A thread that exits is skipped.
func eachThread(fn func(tid int, attr *unix.SchedAttr) error) error {
	done := map[int]bool{}
	for {
		tids, err := Threads()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			done[tid], fresh = true, fresh+1
			attr, err := Of(tid)
			if err == unix.ESRCH {
				continue
			}
			if err == nil {
				err = fn(tid, attr)
			}
			if err != nil && err != unix.ESRCH {
				return err
			}
		}
		if fresh == 0 {
			return nil
		}
	}
}

func set(tid int, attr *unix.SchedAttr) error {
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil {
		if err == unix.ESRCH {
			return err
		}
		return fmt.Errorf("sched_setattr %d: %w", tid, err)
	}
	return nil
}

// Of is a thread's current scheduling attributes (sched_getattr(2); for SCHED_OTHER the
// slice in Runtime, Linux >= 6.12).
func Of(tid int) (*unix.SchedAttr, error) {
	return unix.SchedGetAttr(tid, 0)
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
