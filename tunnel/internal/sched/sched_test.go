package sched

import (
	"testing"
	"time"
)

func TestSchedulers(t *testing.T) {
	paths := []Path{{ID: 1, SRTT: 20 * time.Millisecond}, {ID: 2, SRTT: 10 * time.Millisecond}, {ID: 4, SRTT: 30 * time.Millisecond}}
	rr, _ := New("rr")
	var order []byte
	for i := 0; i < 4; i++ {
		order = append(order, paths[rr.Pick(paths, 1400)].ID)
	}
	if string(order) != "\x01\x02\x04\x01" {
		t.Fatalf("round robin order %v", order)
	}
	if paths[LowRTT{}.Pick(paths, 1400)].ID != 2 {
		t.Fatal("lowrtt did not pick the lowest RTT")
	}
	// path 2's radio is slow and queued: 100 kB at 10 Mbit/s = 80 ms; path 1's is free at 50 Mbit/s
	paths[0].RadioCapacityBps, paths[1].RadioCapacityBps = 50e6, 10e6
	paths[1].RadioQueueBytes = 100_000
	if paths[RNIS{}.Pick(paths, 1400)].ID != 1 {
		t.Fatal("rnis did not avoid the queued radio")
	}
	if _, err := New("fastest"); err == nil {
		t.Fatal("unknown scheduler accepted")
	}
}
