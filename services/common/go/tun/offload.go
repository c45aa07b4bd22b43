package tun

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/pkt"
)

// With offloads (OpenOffload) every frame on the TUN starts with a virtio_net_hdr: the
// kernel hands over TCP segments of up to 64 KiB (TSO) and, where it offers UDP
// segmentation (USO, Linux 6.2+), UDP super-packets of a sender that used UDP_SEGMENT,
// with their checksum left to us; and it takes such super-packets back (the receiving
// stack then routes one instead of dozens, and a UDP socket gets them cut up again).
// ReadBatch cuts a super-packet into ordinary packets (headers, sequence numbers, IP ids
// and checksums of each); a Coalescer merges consecutive packets of a TCP or UDP flow into one.

const (
	vnetHdrLen = 10
	maxFrame   = vnetHdrLen + 65535
	// offloads asked of the kernel: checksums and TCP segmentation over IPv4 and IPv6,
	// and UDP segmentation where the kernel has it (else the TCP ones alone).
	offloads    = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	udpOffloads = unix.TUN_F_USO4 | unix.TUN_F_USO6
	udpHdrLen   = 8
)

// vnetHdr is struct virtio_net_hdr (native byte order, as the TUN uses without TUNSETVNETBE).
type vnetHdr struct {
	flags      uint8
	gsoType    uint8
	hdrLen     uint16
	gsoSize    uint16
	csumStart  uint16
	csumOffset uint16
}

func parseVnetHdr(b []byte) vnetHdr {
	return vnetHdr{flags: b[0], gsoType: b[1], hdrLen: binary.NativeEndian.Uint16(b[2:]),
		gsoSize: binary.NativeEndian.Uint16(b[4:]), csumStart: binary.NativeEndian.Uint16(b[6:]),
		csumOffset: binary.NativeEndian.Uint16(b[8:])}
}

func (h vnetHdr) put(b []byte) {
	b[0], b[1] = h.flags, h.gsoType
	binary.NativeEndian.PutUint16(b[2:], h.hdrLen)
	binary.NativeEndian.PutUint16(b[4:], h.gsoSize)
	binary.NativeEndian.PutUint16(b[6:], h.csumStart)
	binary.NativeEndian.PutUint16(b[8:], h.csumOffset)
}

// OpenOffload is Open with the TUN's offloads on: ReadBatch then cuts TSO (and USO)
// super-packets into packets, and Write/Coalescer write with a virtio_net_hdr. An error
// means the kernel refused; the caller may fall back to Open.
func OpenOffload(netnsPath, name string) (*Device, error) {
	fd, err := attachIn(netnsPath, name, offloadFlags)
	if err != nil {
		return nil, err
	}
	return offloadDevice(fd, name, true)
}

const offloadFlags = unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR

func offloadDevice(fd int, name string, nonblock bool) (*Device, error) {
	// a kernel without USO refuses the whole set (EINVAL): then the TCP offloads alone
	uso := true
	if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offloads|udpOffloads); err != nil {
		uso = false
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, offloads); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("tun %s: TUNSETOFFLOAD: %w", name, err)
		}
	}
	d, err := newDevice(fd, name, nonblock)
	if err != nil {
		return nil, err
	}
	d.offload, d.uso, d.frame = true, uso, make([]byte, maxFrame)
	return d, nil
}

// Offload tells whether the device was opened with OpenOffload.
func (d *Device) Offload() bool { return d.offload }

// UDPOffload tells whether the kernel also takes and gives UDP super-packets (USO).
func (d *Device) UDPOffload() bool { return d.uso }

// segmenter walks one frame read from the TUN and yields its packets one by one.
type segmenter struct {
	frame   []byte // the IP packet (after the virtio header); nil when done
	hdr     vnetHdr
	ipLen   int  // IP header(s) up to the TCP/UDP header
	hdrLen  int  // IP + TCP/UDP headers
	udp     bool // a UDP super-packet (else TCP)
	off     int  // next payload offset
	index   int  // segments yielded
	invalid uint64
}

// start takes a frame (virtio header + packet) just read.
func (s *segmenter) start(b []byte) {
	s.hdr, s.frame, s.off, s.index = parseVnetHdr(b), b[vnetHdrLen:], 0, 0
	if s.hdr.gsoType == unix.VIRTIO_NET_HDR_GSO_NONE {
		return
	}
	gso := s.hdr.gsoType &^ unix.VIRTIO_NET_HDR_GSO_ECN
	s.ipLen, s.udp = int(s.hdr.csumStart), gso == unix.VIRTIO_NET_HDR_GSO_UDP_L4
	tcp := gso == unix.VIRTIO_NET_HDR_GSO_TCPV4 || gso == unix.VIRTIO_NET_HDR_GSO_TCPV6
	if (!tcp && !s.udp) || s.hdr.gsoSize == 0 || s.ipLen < 20 || s.ipLen+udpHdrLen > len(s.frame) ||
		(tcp && s.ipLen+20 > len(s.frame)) {
		s.drop()
		return
	}
	if s.udp {
		s.hdrLen = s.ipLen + udpHdrLen
	} else {
		s.hdrLen = s.ipLen + int(s.frame[s.ipLen+12]>>4)*4
	}
	v4 := s.frame[0]>>4 == 4
	if s.hdrLen < s.ipLen+udpHdrLen || s.hdrLen > len(s.frame) || s.hdrLen+int(s.hdr.gsoSize) > pkt.BufSize ||
		(tcp && (s.hdrLen < s.ipLen+20 || (gso == unix.VIRTIO_NET_HDR_GSO_TCPV4) != v4)) {
		s.drop()
		return
	}
	s.off = s.hdrLen
}

func (s *segmenter) drop() { s.frame = nil; s.invalid++ }

// take writes the frame's next packets into ps from index n while it has room, and
// returns the new count.
func (s *segmenter) take(ps []*pkt.Packet, n int) int {
	for n < len(ps) && s.next(ps[n]) {
		n++
	}
	return n
}

// next writes the next packet of the frame into p; false when the frame is done.
func (s *segmenter) next(p *pkt.Packet) bool {
	if s.frame == nil {
		return false
	}
	if s.hdr.gsoType == unix.VIRTIO_NET_HDR_GSO_NONE {
		ok := len(s.frame) <= pkt.BufSize && s.finishChecksum()
		if ok {
			p.N = copy(p.Buf(), s.frame)
		} else {
			s.invalid++
		}
		s.frame = nil
		return ok
	}
	if s.off >= len(s.frame) {
		s.frame = nil
		return false
	}
	end := min(s.off+int(s.hdr.gsoSize), len(s.frame))
	b := p.Buf()
	copy(b, s.frame[:s.hdrLen])
	n := copy(b[s.hdrLen:], s.frame[s.off:end])
	p.N = s.hdrLen + n
	fixIP(b[:p.N], s.ipLen, s.index)
	if s.udp {
		fixUDP(b[:p.N], s.ipLen)
	} else {
		fixTCP(b[:p.N], s.ipLen, s.index, uint32(s.off-s.hdrLen), end == len(s.frame))
	}
	s.off = end
	s.index++
	return true
}

// finishChecksum completes a checksum the kernel left partial (VIRTIO_NET_HDR_F_NEEDS_CSUM).
func (s *segmenter) finishChecksum() bool {
	if s.hdr.flags&unix.VIRTIO_NET_HDR_F_NEEDS_CSUM == 0 {
		return true
	}
	start, at := int(s.hdr.csumStart), int(s.hdr.csumStart)+int(s.hdr.csumOffset)
	if at+2 > len(s.frame) || start > len(s.frame) {
		return false
	}
	binary.BigEndian.PutUint16(s.frame[at:], ^fold(sum(s.frame[start:], 0)))
	return true
}

// fixIP makes a copy of a super-packet's IP header right for segment index: its length,
// and for IPv4 its id (one more per segment, as the kernel's own segmentation) and checksum.
func fixIP(b []byte, ipLen, index int) {
	if b[0]>>4 == 4 {
		binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
		binary.BigEndian.PutUint16(b[4:], binary.BigEndian.Uint16(b[4:])+uint16(index))
		b[10], b[11] = 0, 0
		binary.BigEndian.PutUint16(b[10:], ^fold(sum(b[:ipLen], 0)))
	} else {
		binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	}
}

// fixUDP sets a UDP segment's length and full checksum.
func fixUDP(b []byte, ipLen int) {
	udp := b[ipLen:]
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	udp[6], udp[7] = 0, 0
	c := ^fold(sum(udp, pseudoHeader(b, len(udp))))
	if c == 0 {
		c = 0xffff // 0 would say "no checksum"
	}
	binary.BigEndian.PutUint16(udp[6:], c)
}

// fixTCP makes a copy of a super-packet's TCP header right for segment index whose
// payload starts at payloadOff: seq, flags, checksum.
func fixTCP(b []byte, ipLen, index int, payloadOff uint32, last bool) {
	tcp := b[ipLen:]
	binary.BigEndian.PutUint32(tcp[4:], binary.BigEndian.Uint32(tcp[4:])+payloadOff)
	const fin, psh, cwr = 0x01, 0x08, 0x80
	if !last {
		tcp[13] &^= fin | psh
	}
	if index > 0 {
		tcp[13] &^= cwr
	}
	tcp[16], tcp[17] = 0, 0
	binary.BigEndian.PutUint16(tcp[16:], ^fold(sum(tcp, pseudoHeader(b, len(tcp)))))
}

// pseudoHeader is the TCP/UDP pseudo-header's sum (addresses, protocol, length).
func pseudoHeader(ip []byte, l4Len int) uint64 {
	if ip[0]>>4 == 4 {
		return sum(ip[12:20], uint64(ip[9])+uint64(l4Len))
	}
	return sum(ip[8:40], uint64(ip[6])+uint64(l4Len))
}

// sum adds b as big-endian 16-bit words to acc (one's complement, folded later).
func sum(b []byte, acc uint64) uint64 {
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		acc += v >> 32
		acc += v & 0xffffffff
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

func fold(acc uint64) uint16 {
	for acc > 0xffff {
		acc = acc>>16 + acc&0xffff
	}
	return uint16(acc)
}
