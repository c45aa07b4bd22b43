package engine

import (
	"bytes"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestGSOBatchRules(t *testing.T) {
	b := newGSOBatch()
	if !b.fits(1456) {
		t.Fatal("an empty batch takes any datagram")
	}
	b.add(1456)
	if b.fits(1500) {
		t.Fatal("a datagram larger than the segment size joined")
	}
	if !b.fits(100) {
		t.Fatal("a shorter last datagram must fit")
	}
	b.add(100)
	if b.fits(100) {
		t.Fatal("nothing may follow a shorter datagram")
	}
	b.reset()
	for i := 0; i < gsoMaxSegments; i++ {
		if !b.fits(100) {
			t.Fatalf("datagram %d refused", i)
		}
		b.add(100)
	}
	if b.fits(100) {
		t.Fatal("more than gsoMaxSegments datagrams")
	}
}

// A segmented send and a coalescing read on loopback give back the datagrams one by one.
func TestGSOSendGROReceive(t *testing.T) {
	rx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if !enableGRO(rx) {
		t.Log("UDP_GRO not available: reads are one datagram each")
	}
	tx, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	var want [][]byte
	b := newGSOBatch()
	for i, size := range []int{300, 300, 300, 120} {
		d := bytes.Repeat([]byte{byte(i + 1)}, size)
		copy(b.room(size), d)
		b.add(size)
		want = append(want, d)
	}
	if err := b.send(tx, rx.LocalAddr().(*net.UDPAddr).AddrPort(), true); err != nil {
		t.Fatal(err)
	}
	_ = rx.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, oob := make([]byte, readBufSize), make([]byte, unix.CmsgSpace(4))
	var got [][]byte
	for len(got) < len(want) {
		n, oobn, _, from, err := rx.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		if from != tx.LocalAddr().(*net.UDPAddr).AddrPort() {
			t.Fatalf("from %v", from)
		}
		seg := groSegmentSize(oob[:oobn])
		if seg <= 0 {
			seg = n
		}
		for off := 0; off < n; off += seg {
			got = append(got, append([]byte(nil), buf[off:min(off+seg, n)]...))
		}
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("datagram %d: %d bytes of %d, first %d", i, len(got[i]), len(want[i]), got[i][0])
		}
	}
}
