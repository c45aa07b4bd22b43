package engine

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The path sockets cross the kernel in batches: UDP GSO on the send side (one sendmsg
// carries up to gsoMaxSegments datagrams of one size, which the kernel splits as late as
// it can, after the path's qdisc on a veth) and UDP GRO on the receive side (one read
// returns several datagrams of one sender back to back, with their size in a control
// message). Every datagram is still sealed, checked and counted on its own.

const (
	gsoMaxSegments = 64    // the kernel's UDP_MAX_SEGMENTS on older kernels
	gsoMaxBytes    = 65000 // one UDP payload below 64 KiB
	readBufSize    = 1 << 16
)

// enableGRO asks the kernel for coalesced reads on conn; false if it cannot (old kernel).
func enableGRO(conn *net.UDPConn) bool {
	rc, err := conn.SyscallConn()
	if err != nil {
		return false
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1)
	}); err != nil {
		return false
	}
	return serr == nil
}

// groSegmentSize is the size of the datagrams a coalesced read holds (0: one datagram).
func groSegmentSize(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_UDP && m.Header.Type == unix.UDP_GRO && len(m.Data) >= 4 {
			return int(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return 0
}

// gsoBatch gathers sealed datagrams of one path for one sendmsg: all of size seg but the
// last, which may be shorter (the kernel's rule for UDP_SEGMENT).
type gsoBatch struct {
	buf    []byte
	seg    int  // size of every datagram but maybe the last
	count  int  // datagrams in buf
	closed bool // the last datagram was shorter than seg: nothing more fits
	oob    []byte
}

func newGSOBatch() *gsoBatch {
	return &gsoBatch{buf: make([]byte, 0, gsoMaxBytes+readBufSize/16), oob: make([]byte, unix.CmsgSpace(2))}
}

// fits tells whether a datagram of size bytes can join the batch.
func (b *gsoBatch) fits(size int) bool {
	if b.count == 0 {
		return true
	}
	return !b.closed && size <= b.seg && b.count < gsoMaxSegments && len(b.buf)+size <= gsoMaxBytes
}

// room returns the space for the next datagram (at most max bytes), to seal into.
func (b *gsoBatch) room(max int) []byte { return b.buf[len(b.buf) : len(b.buf)+max] }

// add records a datagram of size bytes just written at room().
func (b *gsoBatch) add(size int) {
	if b.count == 0 {
		b.seg = size
	} else if size < b.seg {
		b.closed = true
	}
	b.buf = b.buf[:len(b.buf)+size]
	b.count++
}

func (b *gsoBatch) reset() { b.buf, b.count, b.closed = b.buf[:0], 0, false }

// errGSOUnsupported: the kernel or the device refused a segmented send; send one by one.
var errGSOUnsupported = errors.New("UDP GSO not supported")

// send writes the batch to remote: one sendmsg with UDP_SEGMENT, or one datagram.
func (b *gsoBatch) send(conn *net.UDPConn, remote netip.AddrPort, gso bool) error {
	if b.count == 1 {
		_, err := conn.WriteToUDPAddrPort(b.buf, remote)
		return err
	}
	if !gso {
		for off := 0; off < len(b.buf); off += b.seg {
			if _, err := conn.WriteToUDPAddrPort(b.buf[off:min(off+b.seg, len(b.buf))], remote); err != nil {
				return err
			}
		}
		return nil
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b.oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(b.oob[unix.CmsgLen(0):], uint16(b.seg))
	_, _, err := conn.WriteMsgUDPAddrPort(b.buf, b.oob, remote)
	var errno unix.Errno
	if errors.As(err, &errno) && (errno == unix.EIO || errno == unix.EINVAL || errno == unix.EOPNOTSUPP) {
		return errGSOUnsupported
	}
	return err
}
