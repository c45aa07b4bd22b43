package reorder

import (
	"testing"
	"time"
)

func TestReorderAndTimeout(t *testing.T) {
	b := New(10*time.Millisecond, 2)
	var got []byte
	deliver := func(p []byte) { got = append(got, p[0]) }
	path := 0 // what path 0 carries; 2 and 5 are on path 1
	push := func(seq uint64, now int64) { b.Push(seq, path, []byte{byte(seq)}, now, deliver) }
	push(1, 0)
	push(3, 0)
	push(4, 0)
	if string(got) != "\x01" || b.Held() != 2 {
		t.Fatalf("delivered %v, held %d", got, b.Held())
	}
	path = 1
	push(2, 1)
	path = 0
	if string(got) != "\x01\x02\x03\x04" || b.Held() != 0 {
		t.Fatalf("delivered %v", got)
	}
	push(6, 2)                                   // 5 is lost, or late on path 1
	b.Expire(int64(5*time.Millisecond), deliver) // not yet
	if len(got) != 4 {
		t.Fatal("released before the timeout")
	}
	b.Expire(int64(13*time.Millisecond), deliver)
	if string(got) != "\x01\x02\x03\x04\x06" || b.Skipped != 1 {
		t.Fatalf("delivered %v, skipped %d", got, b.Skipped)
	}
	path = 1
	push(5, int64(14*time.Millisecond)) // late: delivered anyway
	path = 0
	push(7, int64(14*time.Millisecond))
	if b.Late != 1 || string(got[5:]) != "\x05\x07" {
		t.Fatalf("late %d, got %v", b.Late, got)
	}
}

func TestOrderingOff(t *testing.T) {
	b := New(0, 1)
	var got []byte
	for _, seq := range []uint64{1, 3, 2, 5} {
		b.Push(seq, 0, []byte{byte(seq)}, 0, func(p []byte) { got = append(got, p[0]) })
	}
	if string(got) != "\x01\x03\x02\x05" || b.Held() != 0 || b.Unordered != 4 {
		t.Fatalf("delivered %v, held %d, unordered %d", got, b.Held(), b.Unordered)
	}
}

func TestAGapEveryPathPassedIsLostAtOnce(t *testing.T) {
	b := New(time.Second, 2)
	var got []byte
	push := func(seq uint64, path int) {
		b.Push(seq, path, []byte{byte(seq)}, 0, func(p []byte) { got = append(got, p[0]) })
	}
	push(1, 0)
	push(3, 0) // 2 may still be on path 1
	push(5, 0)
	if string(got) != "\x01" || b.Held() != 2 {
		t.Fatalf("delivered %v, held %d", got, b.Held())
	}
	push(4, 1) // path 1 passed 2: lost (path 0 passed it too); 3, 4 and 5 go
	if string(got) != "\x01\x03\x04\x05" || b.Lost != 1 || b.Skipped != 1 || b.Held() != 0 {
		t.Fatalf("delivered %v, lost %d, held %d", got, b.Lost, b.Held())
	}
	push(8, 0) // 6 and 7 may be on path 1, which passed only 4
	if string(got[4:]) != "" || b.Held() != 1 {
		t.Fatalf("delivered %v early, held %d", got[4:], b.Held())
	}
	push(10, 1) // both passed 6 and 7: lost; 8 goes, 10 waits for 9 (path 0 passed only 8)
	if string(got[4:]) != "\x08" || b.Lost != 3 || b.Held() != 1 {
		t.Fatalf("delivered %v, lost %d, held %d", got[4:], b.Lost, b.Held())
	}
	push(9, 0)
	if string(got[4:]) != "\x08\x09\x0a" || b.Held() != 0 || b.Skipped != 3 {
		t.Fatalf("delivered %v, held %d, skipped %d", got[4:], b.Held(), b.Skipped)
	}
}

func TestEachGapWaitsItsOwnTimeout(t *testing.T) {
	b := New(10*time.Millisecond, 2)
	var got []byte
	push := func(seq uint64, path int, at time.Duration) {
		b.Push(seq, path, []byte{byte(seq)}, int64(at), func(p []byte) { got = append(got, p[0]) })
	}
	push(1, 0, 0)
	push(3, 0, 0)                  // 2 is on path 1
	push(2, 1, 8*time.Millisecond) // 3 goes with it; nothing held for a moment
	push(5, 0, 9*time.Millisecond) // a new gap: 4 on path 1
	push(7, 0, 12*time.Millisecond)
	push(4, 1, 15*time.Millisecond) // 5 goes; 6 is the next gap, waited for since 7 came at 12
	b.Expire(int64(20*time.Millisecond), func(p []byte) { got = append(got, p[0]) })
	if string(got) != "\x01\x02\x03\x04\x05" || b.Held() != 1 || b.Skipped != 0 {
		t.Fatalf("delivered %v, held %d, skipped %d: a gap 8 ms old was given up", got, b.Held(), b.Skipped)
	}
	b.Expire(int64(22*time.Millisecond), func(p []byte) { got = append(got, p[0]) })
	if string(got[5:]) != "\x07" || b.Skipped != 1 {
		t.Fatalf("delivered %v, skipped %d", got[5:], b.Skipped)
	}
}
