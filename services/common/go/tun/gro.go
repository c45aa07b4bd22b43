package tun

import (
	"bytes"
	"encoding/binary"

	"golang.org/x/sys/unix"
)

const (
	maxItems = 64 // packets and super-packets held before a write
	// UDP datagrams per super-packet: the kernel refuses more than UDP_MAX_SEGMENTS (64
	// before Linux 6.9, 128 since)
	maxUDPSegs = 64
	tcpACK     = 0x10
	tcpPSH     = 0x08
)

// Coalescer writes packets to a device. With offloads it merges the consecutive segments
// of a TCP flow (the same addresses, ports, ack, window, options and IP fields, each
// seq following the last, all but the last of one size) into one super-packet whose
// checksum the kernel completes; with UDP offloads (USO) also consecutive datagrams of a
// UDP flow (the same addresses, ports and IP fields, all but the last of one size), which
// the kernel cuts up again before a UDP socket gets them. Their checksums are not checked:
// the tunnel authenticated every packet. What it cannot merge goes out as it is, in order
// within a flow. Without offloads every packet is written at once. Not safe for
// concurrent use.
type Coalescer struct {
	dev    *Device
	items  []groItem
	used   int
	Failed uint64 // packets the kernel refused (e.g. no route)
	Writes uint64 // frames written (a super-packet is one)
}

type groItem struct {
	buf     []byte // virtio header, then the packet (or merged segments)
	ipLen   int    // offset of the TCP/UDP header in the packet; 0: not mergeable
	hdrLen  int    // IP + TCP/UDP headers
	proto   byte   // IPPROTO_TCP or IPPROTO_UDP
	segSize int    // payload of the first segment
	segs    int
	nextSeq uint32
	open    bool // more segments may join
}

// NewCoalescer writes to d.
func NewCoalescer(d *Device) *Coalescer { return &Coalescer{dev: d} }

// Add takes packet b (copied); it is written by Add itself or by the next Flush.
func (c *Coalescer) Add(b []byte) {
	if !c.dev.offload {
		c.Writes++
		if _, err := c.dev.Write(b); err != nil {
			c.Failed++
		}
		return
	}
	ipLen, hdrLen, proto, ok := mergeable(b, c.dev.uso)
	for i := c.used - 1; i >= 0; i-- {
		it := &c.items[i]
		if !it.open || !sameFlow(it.packet(), b, ipLen) {
			continue
		}
		if ok && it.merge(b, hdrLen) {
			return
		}
		it.open = false // order within the flow: b goes after it
		break
	}
	if c.used == maxItems {
		c.Flush()
	}
	if c.used == len(c.items) {
		c.items = append(c.items, groItem{})
	}
	it := &c.items[c.used]
	c.used++
	it.buf = append(append(it.buf[:0], noOffload[:]...), b...)
	it.segs, it.open = 1, ok
	if ok {
		it.ipLen, it.hdrLen, it.proto, it.segSize = ipLen, hdrLen, proto, len(b)-hdrLen
		if proto == unix.IPPROTO_TCP {
			it.nextSeq = binary.BigEndian.Uint32(b[ipLen+4:]) + uint32(it.segSize)
			it.open = b[ipLen+13]&tcpPSH == 0
		}
	}
}

func (it *groItem) packet() []byte { return it.buf[vnetHdrLen:] }

// merge appends segment (or datagram) b to the item if it continues it; false if not.
func (it *groItem) merge(b []byte, hdrLen int) bool {
	p := it.packet()
	payload := len(b) - hdrLen
	if hdrLen != it.hdrLen || payload > it.segSize || len(p)+payload > 65535-vnetHdrLen ||
		!sameHeaders(p, b, it.ipLen, hdrLen) {
		return false
	}
	tcp := it.proto == unix.IPPROTO_TCP
	if tcp && binary.BigEndian.Uint32(b[it.ipLen+4:]) != it.nextSeq {
		return false
	}
	it.buf = append(it.buf, b[hdrLen:]...)
	it.segs++
	if !tcp {
		it.open = payload == it.segSize && it.segs < maxUDPSegs
		return true
	}
	it.nextSeq += uint32(payload)
	if psh := b[it.ipLen+13] & tcpPSH; psh != 0 || payload < it.segSize {
		it.packet()[it.ipLen+13] |= psh
		it.open = false
	}
	return true
}

// mergeable: b is a TCP segment with data and only ACK (and PSH) set, or (udp: the
// device takes UDP super-packets) a UDP datagram with data, in an unfragmented IPv4
// packet without options or an IPv6 packet without extension headers.
func mergeable(b []byte, udp bool) (ipLen, hdrLen int, proto byte, ok bool) {
	switch {
	case len(b) >= 20 && b[0] == 0x45 && binary.BigEndian.Uint16(b[6:])&0x3fff == 0 &&
		int(binary.BigEndian.Uint16(b[2:])) == len(b):
		ipLen, proto = 20, b[9]
	case len(b) >= 40 && b[0]>>4 == 6 && int(binary.BigEndian.Uint16(b[4:]))+40 == len(b):
		ipLen, proto = 40, b[6]
	default:
		return 0, 0, 0, false
	}
	switch {
	case proto == unix.IPPROTO_TCP && len(b) >= ipLen+20:
		hdrLen = ipLen + int(b[ipLen+12]>>4)*4
		flags := b[ipLen+13]
		if hdrLen >= ipLen+20 && len(b) > hdrLen && flags&^tcpPSH == tcpACK {
			return ipLen, hdrLen, proto, true
		}
	case proto == unix.IPPROTO_UDP && udp && len(b) > ipLen+udpHdrLen &&
		int(binary.BigEndian.Uint16(b[ipLen+4:])) == len(b)-ipLen:
		return ipLen, ipLen + udpHdrLen, proto, true
	}
	return 0, 0, 0, false
}

// sameFlow: b has p's addresses and, when mergeable, protocol and ports (ipLen 0: any
// packet between the same addresses counts, so nothing of that flow overtakes p).
func sameFlow(p, b []byte, ipLen int) bool {
	if len(b) < 20 || len(p) < 20 || p[0]>>4 != b[0]>>4 {
		return false
	}
	if p[0]>>4 == 4 {
		if !bytes.Equal(p[12:20], b[12:20]) || (ipLen != 0 && p[9] != b[9]) {
			return false
		}
	} else if len(b) < 40 || !bytes.Equal(p[8:40], b[8:40]) || (ipLen != 0 && p[6] != b[6]) {
		return false
	}
	return ipLen == 0 || bytes.Equal(p[ipLen:ipLen+4], b[ipLen:ipLen+4])
}

// sameHeaders: what the merged packet's single header says holds for b too.
func sameHeaders(p, b []byte, ipLen, hdrLen int) bool {
	if ipLen == 20 { // TOS, DF, TTL, protocol
		if p[1] != b[1] || p[6]&0x40 != b[6]&0x40 || p[8] != b[8] || p[9] != b[9] {
			return false
		}
	} else if !bytes.Equal(p[:4], b[:4]) || p[6] != b[6] || p[7] != b[7] { // traffic class, flow label, next header, hop limit
		return false
	}
	if hdrLen == ipLen+udpHdrLen {
		return true // UDP: ports in sameFlow; length and checksum are per datagram
	}
	tp, tb := p[ipLen:], b[ipLen:]
	return bytes.Equal(tp[8:12], tb[8:12]) && tp[13]&^tcpPSH == tb[13]&^tcpPSH && // ack, flags
		bytes.Equal(tp[14:16], tb[14:16]) && bytes.Equal(tp[20:hdrLen-ipLen], tb[20:hdrLen-ipLen]) // window, options
}

// Flush writes what Add holds.
func (c *Coalescer) Flush() {
	for i := range c.items[:c.used] {
		it := &c.items[i]
		if it.segs > 1 {
			it.finish()
		}
		if err := c.dev.writeFrame(it.buf); err != nil {
			c.Failed += uint64(it.segs)
		}
	}
	c.Writes += uint64(c.used)
	c.used = 0
}

// finish makes a merged item one super-packet: lengths, IPv4 checksum, the TCP or UDP
// pseudo-header sum for the kernel to complete, and the virtio header saying so.
func (it *groItem) finish() {
	p := it.packet()
	h := vnetHdr{flags: unix.VIRTIO_NET_HDR_F_NEEDS_CSUM, gsoType: unix.VIRTIO_NET_HDR_GSO_TCPV6,
		hdrLen: uint16(it.hdrLen), gsoSize: uint16(it.segSize), csumStart: uint16(it.ipLen), csumOffset: 16}
	if it.ipLen == 20 {
		h.gsoType = unix.VIRTIO_NET_HDR_GSO_TCPV4
		binary.BigEndian.PutUint16(p[2:], uint16(len(p)))
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:], ^fold(sum(p[:20], 0)))
	} else {
		binary.BigEndian.PutUint16(p[4:], uint16(len(p)-40))
	}
	if it.proto == unix.IPPROTO_UDP {
		h.gsoType, h.csumOffset = unix.VIRTIO_NET_HDR_GSO_UDP_L4, 6
		binary.BigEndian.PutUint16(p[it.ipLen+4:], uint16(len(p)-it.ipLen))
	}
	binary.BigEndian.PutUint16(p[it.ipLen+int(h.csumOffset):], fold(pseudoHeader(p, len(p)-it.ipLen)))
	h.put(it.buf)
}

// writeFrame writes a frame that starts with its virtio header.
func (d *Device) writeFrame(b []byte) error {
	var werr error
	err := d.rc.Write(func(fd uintptr) bool {
		for {
			_, werr = unix.Write(int(fd), b)
			if werr != unix.EINTR {
				return werr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return err
	}
	return werr
}
