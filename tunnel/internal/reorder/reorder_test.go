package reorder

import (
	"testing"
	"time"
)

func TestReorderAndTimeout(t *testing.T) {
	b := New(10 * time.Millisecond)
	var got []byte
	deliver := func(p []byte) { got = append(got, p[0]) }
	push := func(seq uint64, now int64) { b.Push(seq, []byte{byte(seq)}, now, deliver) }
	push(1, 0)
	push(3, 0)
	push(4, 0)
	if string(got) != "\x01" || b.Held() != 2 {
		t.Fatalf("delivered %v, held %d", got, b.Held())
	}
	push(2, 1)
	if string(got) != "\x01\x02\x03\x04" || b.Held() != 0 {
		t.Fatalf("delivered %v", got)
	}
	push(6, 2)                                   // 5 is lost
	b.Expire(int64(5*time.Millisecond), deliver) // not yet
	if len(got) != 4 {
		t.Fatal("released before the timeout")
	}
	b.Expire(int64(13*time.Millisecond), deliver)
	if string(got) != "\x01\x02\x03\x04\x06" || b.Skipped != 1 {
		t.Fatalf("delivered %v, skipped %d", got, b.Skipped)
	}
	push(5, int64(14*time.Millisecond)) // late: delivered anyway
	push(7, int64(14*time.Millisecond))
	if b.Late != 1 || string(got[5:]) != "\x05\x07" {
		t.Fatalf("late %d, got %v", b.Late, got)
	}
}

func TestOrderingOff(t *testing.T) {
	b := New(0)
	var got []byte
	for _, seq := range []uint64{1, 3, 2, 5} {
		b.Push(seq, []byte{byte(seq)}, 0, func(p []byte) { got = append(got, p[0]) })
	}
	if string(got) != "\x01\x03\x02\x05" || b.Held() != 0 || b.Unordered != 4 {
		t.Fatalf("delivered %v, held %d, unordered %d", got, b.Held(), b.Unordered)
	}
}
