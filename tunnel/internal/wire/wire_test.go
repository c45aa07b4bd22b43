package wire

import (
	"bytes"
	"testing"
)

func TestSealOpenAndTamper(t *testing.T) {
	psk := bytes.Repeat([]byte{7}, 16)
	k, _ := NewKey(psk, RoleUE, 42, 1)
	buf := make([]byte, 2048)
	PutHeader(buf, Header{Type: TypeData, PathID: 2, PeerID: 1, Epoch: 42, PathSeq: 9})
	PutDataBody(buf[HeaderLen:], 5, 123)
	n := copy(buf[HeaderLen+DataBodyLen:], "an IP packet")
	d := k.Seal(buf, buf[HeaderLen:HeaderLen+DataBodyLen+n])
	if len(d) != Overhead+n {
		t.Fatalf("datagram of %d bytes, want %d", len(d), Overhead+n)
	}
	h, err := ParseHeader(d)
	if err != nil || h.PathID != 2 || h.PathSeq != 9 || h.Epoch != 42 {
		t.Fatalf("header %+v %v", h, err)
	}
	// the other end derives the same key from the same role, epoch and peer
	other, _ := NewKey(psk, RoleUE, 42, 1)
	body, err := other.Open(append([]byte(nil), d...))
	if err != nil {
		t.Fatal(err)
	}
	if seq, sent, p, _ := ParseDataBody(body); seq != 5 || sent != 123 || string(p) != "an IP packet" {
		t.Fatalf("body %d %d %q", seq, sent, p)
	}
	for name, key := range map[string]func() *Key{
		"other role":  func() *Key { k, _ := NewKey(psk, RoleMEC, 42, 1); return k },
		"other epoch": func() *Key { k, _ := NewKey(psk, RoleUE, 43, 1); return k },
		"other psk":   func() *Key { k, _ := NewKey(bytes.Repeat([]byte{8}, 16), RoleUE, 42, 1); return k },
	} {
		if _, err := key().Open(append([]byte(nil), d...)); err == nil {
			t.Errorf("%s opened the datagram", name)
		}
	}
	for i := range d { // any flipped bit, header included, fails
		bad := append([]byte(nil), d...)
		bad[i] ^= 0x40
		if _, err := other.Open(bad); err == nil {
			t.Fatalf("flipped byte %d went through", i)
		}
	}
}

func TestParseRejects(t *testing.T) {
	good := make([]byte, HeaderLen+TagLen)
	PutHeader(good, Header{Type: TypeAck, PathID: 1})
	if _, err := ParseHeader(good); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"short":    good[:HeaderLen+TagLen-1],
		"version":  append([]byte{0x21}, good[1:]...),
		"type":     append([]byte{0x13}, good[1:]...),
		"reserved": append(append([]byte{}, good[:2]...), append([]byte{1}, good[3:]...)...),
	} {
		if _, err := ParseHeader(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseAck(make([]byte, AckBodyLen-1)); err == nil {
		t.Error("short ack accepted")
	}
}
