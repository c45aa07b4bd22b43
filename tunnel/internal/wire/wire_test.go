package wire

import (
	"bytes"
	"testing"
)

func TestSealOpenAndTamper(t *testing.T) {
	psk := bytes.Repeat([]byte{7}, 16)
	k, _ := NewKey(psk, RoleUE, 42, 1)
	for _, sent := range []Header{
		{Type: TypeShortData, PathID: 2, PathSeq: 9<<40 | 9},
		{Type: TypeData, PathID: 2, PeerID: 1, Epoch: 42, PathSeq: 9},
	} {
		buf := make([]byte, 2048)
		PutHeader(buf, sent)
		hl := sent.Len()
		PutDataBody(buf[hl:], 5)
		n := copy(buf[hl+DataBodyLen:], "an IP packet")
		d := k.Seal(buf, sent, buf[hl:hl+DataBodyLen+n])
		if want := hl + DataBodyLen + TagLen + n; len(d) != want {
			t.Fatalf("datagram of %d bytes, want %d", len(d), want)
		}
		if sent.Type == TypeShortData && len(d) != Overhead+n {
			t.Fatalf("short datagram of %d bytes, want Overhead %d + %d", len(d), Overhead, n)
		}
		h, err := ParseHeader(d)
		if err != nil || h != sent {
			t.Fatalf("header %+v %v, want %+v", h, err, sent)
		}
		// the other end derives the same key from the same role, epoch and peer
		other, _ := NewKey(psk, RoleUE, 42, 1)
		body, err := other.Open(append([]byte(nil), d...), h)
		if err != nil {
			t.Fatal(err)
		}
		if seq, p, _ := ParseDataBody(body); seq != 5 || string(p) != "an IP packet" {
			t.Fatalf("body %d %q", seq, p)
		}
		for name, key := range map[string]func() *Key{
			"other role":  func() *Key { k, _ := NewKey(psk, RoleMEC, 42, 1); return k },
			"other epoch": func() *Key { k, _ := NewKey(psk, RoleUE, 43, 1); return k },
			"other peer":  func() *Key { k, _ := NewKey(psk, RoleUE, 42, 2); return k },
			"other psk":   func() *Key { k, _ := NewKey(bytes.Repeat([]byte{8}, 16), RoleUE, 42, 1); return k },
		} {
			if _, err := key().Open(append([]byte(nil), d...), h); err == nil {
				t.Errorf("%s opened the datagram", name)
			}
		}
		for i := range d { // any flipped bit, header included, fails
			bad := append([]byte(nil), d...)
			bad[i] ^= 0x40
			if bh, err := ParseHeader(bad); err == nil {
				if _, err := other.Open(bad, bh); err == nil {
					t.Fatalf("flipped byte %d went through", i)
				}
			}
		}
	}
}

func TestShortHeaderRefusesATruncatedSeq(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a path seq beyond 48 bits was written into a short header")
		}
	}()
	PutHeader(make([]byte, HeaderLen), Header{Type: TypeShortData, PathID: 1, PathSeq: MaxShortSeq + 1})
}

func TestParseRejects(t *testing.T) {
	good := make([]byte, HeaderLen+TagLen)
	PutHeader(good, Header{Type: TypeAck, PathID: 1})
	if _, err := ParseHeader(good); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"short":       good[:HeaderLen+TagLen-1],
		"short data":  append([]byte{0x23}, make([]byte, ShortHeaderLen+TagLen-2)...),
		"version":     append([]byte{0x12}, good[1:]...),
		"type":        append([]byte{0x24}, good[1:]...),
		"reserved":    append(append([]byte{}, good[:2]...), append([]byte{1}, good[3:]...)...),
		"old version": append([]byte{0x11}, good[1:]...),
	} {
		if _, err := ParseHeader(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseAck(make([]byte, AckBodyLen-1)); err == nil {
		t.Error("short ack accepted")
	}
}
