package tun

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/pkt"
)

// ipv4Frame is a frame (virtio header left zero) holding an IPv4 packet of protocol proto
// with l4 bytes after the IP header, the first four of them ports 5201 -> 40000; b and p
// are the frame and its packet.
func ipv4Frame(proto byte, l4 int) (b, p []byte) {
	b = make([]byte, vnetHdrLen+20+l4)
	p = b[vnetHdrLen:]
	p[0], p[6], p[8], p[9] = 0x45, 0x40, 64, proto
	binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
	binary.BigEndian.PutUint16(p[4:], 7)
	copy(p[12:], []byte{10, 92, 0, 2, 10, 92, 0, 1})
	binary.BigEndian.PutUint16(p[20:], 5201)
	binary.BigEndian.PutUint16(p[22:], 40000)
	return b, p
}

// superPacket is an IPv4 TCP super-packet as the kernel hands it over with TSO: one
// header, payload bytes of data, the TCP checksum field holding the pseudo-header sum.
func superPacket(payload, gsoSize int) []byte {
	b, p := ipv4Frame(unix.IPPROTO_TCP, 32+payload)
	t := p[20:]
	binary.BigEndian.PutUint32(t[4:], 1000)
	binary.BigEndian.PutUint32(t[8:], 555)
	t[12], t[13] = 8<<4, tcpACK|tcpPSH
	binary.BigEndian.PutUint16(t[14:], 512)
	copy(t[20:], []byte{1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 3}) // NOP NOP timestamps
	for i := range payload {
		t[32+i] = byte(i)
	}
	binary.BigEndian.PutUint16(t[16:], fold(pseudoHeader(p, len(t))))
	vnetHdr{flags: unix.VIRTIO_NET_HDR_F_NEEDS_CSUM, gsoType: unix.VIRTIO_NET_HDR_GSO_TCPV4, hdrLen: 52,
		gsoSize: uint16(gsoSize), csumStart: 20, csumOffset: 16}.put(b)
	return b
}

func valid(t *testing.T, p []byte) {
	t.Helper()
	if fold(sum(p[:20], 0)) != 0xffff {
		t.Fatal("IPv4 header checksum wrong")
	}
	if fold(sum(p[20:], pseudoHeader(p, len(p)-20))) != 0xffff {
		t.Fatal("TCP checksum wrong")
	}
	if int(binary.BigEndian.Uint16(p[2:])) != len(p) {
		t.Fatal("IPv4 total length wrong")
	}
}

func TestSegmentSuperPacket(t *testing.T) {
	var s segmenter
	s.start(superPacket(2500, 1000))
	var got []*pkt.Packet
	for {
		p := pkt.Get()
		if !s.next(p) {
			break
		}
		got = append(got, p)
	}
	if len(got) != 3 {
		t.Fatalf("%d segments, want 3", len(got))
	}
	for i, p := range got {
		b := p.Bytes()
		valid(t, b)
		if seq := binary.BigEndian.Uint32(b[24:]); seq != uint32(1000+1000*i) {
			t.Fatalf("segment %d: seq %d", i, seq)
		}
		if id := binary.BigEndian.Uint16(b[4:]); id != uint16(7+i) {
			t.Fatalf("segment %d: IP id %d", i, id)
		}
		if psh := b[33]&tcpPSH != 0; psh != (i == 2) {
			t.Fatalf("segment %d: PSH %v", i, psh)
		}
		if b[52] != byte(1000*i) {
			t.Fatalf("segment %d: payload starts with %d", i, b[52])
		}
	}
	if len(got[2].Bytes()) != 52+500 {
		t.Fatalf("last segment %d bytes", len(got[2].Bytes()))
	}
	s.start(superPacket(2500, 3000)) // gso size beyond a packet buffer: dropped, counted
	if s.next(pkt.Get()) || s.invalid != 1 {
		t.Fatal("an uncuttable super-packet was not refused")
	}
}

// seqpacketDevice is a Device on one end of a socket pair, which keeps frame boundaries.
func seqpacketDevice(t *testing.T) (*Device, int) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "pair")
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); unix.Close(fds[1]) })
	return &Device{f: f, rc: rc, offload: true}, fds[1]
}

func TestCoalesceSegments(t *testing.T) {
	var s segmenter
	s.start(superPacket(2500, 1000))
	d, peer := seqpacketDevice(t)
	c := NewCoalescer(d)
	for p := pkt.Get(); s.next(p); p = pkt.Get() {
		c.Add(p.Bytes())
	}
	udp := []byte{0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0, 10, 92, 0, 2, 10, 92, 0, 1}
	udp = append(udp, make([]byte, 8)...)
	c.Add(udp)
	c.Flush()
	buf := make([]byte, maxFrame)
	n, err := unix.Read(peer, buf)
	if err != nil {
		t.Fatal(err)
	}
	h, p := parseVnetHdr(buf), buf[vnetHdrLen:n]
	if h.gsoType != unix.VIRTIO_NET_HDR_GSO_TCPV4 || h.gsoSize != 1000 || h.csumStart != 20 || h.csumOffset != 16 ||
		h.flags != unix.VIRTIO_NET_HDR_F_NEEDS_CSUM || h.hdrLen != 52 {
		t.Fatalf("virtio header %+v", h)
	}
	// the super-packet as the kernel took it: cut up again, it is the original one
	want := superPacket(2500, 1000)
	want[vnetHdrLen+4], want[vnetHdrLen+5] = 0, 7
	if !bytes.Equal(p[52:], want[vnetHdrLen+52:]) || len(p) != len(want)-vnetHdrLen {
		t.Fatalf("payload differs (%d bytes)", len(p))
	}
	if p[33]&tcpPSH == 0 {
		t.Fatal("the last segment's PSH was lost")
	}
	s.start(buf[:n])
	for p := pkt.Get(); s.next(p); p = pkt.Get() {
		valid(t, p.Bytes())
	}
	n, err = unix.Read(peer, buf)
	if err != nil || !bytes.Equal(buf[vnetHdrLen:n], udp) || parseVnetHdr(buf) != (vnetHdr{}) {
		t.Fatalf("the UDP packet: %v %x", err, buf[:n])
	}
}

// A segment that does not continue the flow's last one is not merged, and order holds.
func TestCoalesceKeepsGapsApart(t *testing.T) {
	var s segmenter
	s.start(superPacket(3000, 1000))
	var segs [][]byte
	for p := pkt.Get(); s.next(p); p = pkt.Get() {
		segs = append(segs, p.Bytes())
	}
	d, peer := seqpacketDevice(t)
	c := NewCoalescer(d)
	for _, i := range []int{0, 2, 1} {
		c.Add(segs[i])
	}
	c.Flush()
	buf := make([]byte, maxFrame)
	for _, want := range []uint32{1000, 3000, 2000} {
		n, err := unix.Read(peer, buf)
		if err != nil {
			t.Fatal(err)
		}
		if seq := binary.BigEndian.Uint32(buf[vnetHdrLen+24:]); seq != want || n != vnetHdrLen+52+1000 {
			t.Fatalf("frame seq %d (%d bytes), want seq %d alone", seq, n, want)
		}
	}
}

// udpSuperPacket is an IPv4 UDP super-packet as the kernel hands it over with USO (a
// sender's UDP_SEGMENT send): one header, the UDP checksum field holding the pseudo-header sum.
func udpSuperPacket(payload, gsoSize int) []byte {
	b, p := ipv4Frame(unix.IPPROTO_UDP, udpHdrLen+payload)
	u := p[20:]
	binary.BigEndian.PutUint16(u[4:], uint16(len(u)))
	for i := range payload {
		u[udpHdrLen+i] = byte(i)
	}
	binary.BigEndian.PutUint16(u[6:], fold(pseudoHeader(p, len(u))))
	vnetHdr{flags: unix.VIRTIO_NET_HDR_F_NEEDS_CSUM, gsoType: unix.VIRTIO_NET_HDR_GSO_UDP_L4, hdrLen: 28,
		gsoSize: uint16(gsoSize), csumStart: 20, csumOffset: 6}.put(b)
	return b
}

func cutAll(t *testing.T, frame []byte) [][]byte {
	t.Helper()
	var s segmenter
	s.start(frame)
	var out [][]byte
	for p := pkt.Get(); s.next(p); p = pkt.Get() {
		out = append(out, append([]byte(nil), p.Bytes()...))
	}
	if s.invalid != 0 {
		t.Fatalf("%d frames refused", s.invalid)
	}
	return out
}

func TestSegmentUDPSuperPacket(t *testing.T) {
	got := cutAll(t, udpSuperPacket(2500, 1000))
	if len(got) != 3 {
		t.Fatalf("%d datagrams, want 3", len(got))
	}
	for i, b := range got {
		if fold(sum(b[:20], 0)) != 0xffff || int(binary.BigEndian.Uint16(b[2:])) != len(b) {
			t.Fatalf("datagram %d: IPv4 header wrong", i)
		}
		if fold(sum(b[20:], pseudoHeader(b, len(b)-20))) != 0xffff {
			t.Fatalf("datagram %d: UDP checksum wrong", i)
		}
		if int(binary.BigEndian.Uint16(b[24:])) != len(b)-20 || binary.BigEndian.Uint16(b[20:]) != 5201 {
			t.Fatalf("datagram %d: UDP header %x", i, b[20:28])
		}
		if id := binary.BigEndian.Uint16(b[4:]); id != uint16(7+i) || b[28] != byte(1000*i) {
			t.Fatalf("datagram %d: IP id %d, payload starts with %d", i, id, b[28])
		}
	}
	if len(got[2]) != 28+500 {
		t.Fatalf("last datagram %d bytes", len(got[2]))
	}
}

// Datagrams of a UDP flow become one super-packet (with USO), cut up again into the same
// datagrams; a packet between the same addresses that cannot join (a ping) keeps its place.
func TestCoalesceUDPDatagrams(t *testing.T) {
	dgrams := cutAll(t, udpSuperPacket(3500, 1000)) // 1000, 1000, 1000, 500
	icmp := []byte{0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, unix.IPPROTO_ICMP, 0, 0, 10, 92, 0, 2, 10, 92, 0, 1}
	icmp = append(icmp, 8, 0, 0, 0, 0, 0, 0, 1)
	other := append([]byte(nil), dgrams[1]...) // another flow: source port 5202
	other[21]++
	d, peer := seqpacketDevice(t)
	d.uso = true
	c := NewCoalescer(d)
	for _, b := range [][]byte{dgrams[0], icmp, dgrams[1], other, dgrams[2], dgrams[3]} {
		c.Add(b)
	}
	c.Flush()
	buf := make([]byte, maxFrame)
	read := func() (vnetHdr, []byte) {
		n, err := unix.Read(peer, buf)
		if err != nil {
			t.Fatal(err)
		}
		return parseVnetHdr(buf), buf[vnetHdrLen:n]
	}
	for _, want := range [][]byte{dgrams[0], icmp} {
		if h, p := read(); h != (vnetHdr{}) || !bytes.Equal(p, want) {
			t.Fatalf("frame %+v %x, want %x as it is", h, p, want)
		}
	}
	h, p := read()
	if h.gsoType != unix.VIRTIO_NET_HDR_GSO_UDP_L4 || h.gsoSize != 1000 || h.csumStart != 20 || h.csumOffset != 6 ||
		h.flags != unix.VIRTIO_NET_HDR_F_NEEDS_CSUM || h.hdrLen != 28 {
		t.Fatalf("virtio header %+v", h)
	}
	again := cutAll(t, append([]byte(nil), buf[:vnetHdrLen+len(p)]...))
	if len(again) != 3 || !bytes.Equal(again[0], dgrams[1]) || !bytes.Equal(again[1], dgrams[2]) ||
		!bytes.Equal(again[2], dgrams[3]) {
		t.Fatalf("the super-packet cut up again is not the datagrams 1-3 (%d)", len(again))
	}
	if h, p := read(); h != (vnetHdr{}) || !bytes.Equal(p, other) {
		t.Fatal("the other flow's datagram was not written as it is")
	}
	if c.Writes != 4 {
		t.Fatalf("%d writes, want 4", c.Writes)
	}
	// without USO every datagram is written as it is
	d.uso = false
	for _, b := range dgrams {
		c.Add(b)
	}
	c.Flush()
	for i := range dgrams {
		if h, p := read(); h != (vnetHdr{}) || !bytes.Equal(p, dgrams[i]) {
			t.Fatalf("datagram %d merged without USO", i)
		}
	}
}
