package tun

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/pkt"
)

// Which reader a Device runs (Reader).
const (
	readPlain  = iota // Go's poller, then read(2) until the TUN is empty
	readRing          // the io_uring multishot read (uring.go)
	readPolled        // the ring failed after the device was opened for it: ppoll, then read(2)
)

// OpenOffloadRing is OpenOffload with the batched read where io_uring works (uring.go): the
// frames' packets, their cutting and their order are the same as with plain reads. Where
// io_uring is refused (a seccomp profile, a kernel before 6.7) it opens the device for
// plain reads instead; Reader says which runs and why.
func OpenOffloadRing(netnsPath, name string) (*Device, error) {
	fd, err := attachIn(netnsPath, name, offloadFlags)
	if err != nil {
		return nil, err
	}
	var r *ring
	rerr := ringWorks()
	if rerr == nil {
		r, rerr = newRing(fd, maxFrame)
	}
	d, err := offloadDevice(fd, name, rerr != nil) // with the ring: blocking, out of Go's poller
	if err != nil {
		if r != nil {
			r.release()
		}
		return nil, err
	}
	if rerr != nil {
		d.ringErr.Store(&rerr)
		return d, nil
	}
	d.ring = r
	d.mode.Store(readRing)
	return d, nil
}

// Reader names the reader in use ("io_uring" or "read") and, when io_uring was asked for
// but is not used, why.
func (d *Device) Reader() (string, error) {
	var why error
	if e := d.ringErr.Load(); e != nil {
		why = *e
	}
	if d.mode.Load() == readRing {
		return "io_uring", nil
	}
	return "read", why
}

// readRing is ReadBatch with the ring: the packets of the frame in hand, then of the frames
// the kernel has read meanwhile, waiting in io_uring_enter only when it has none.
func (d *Device) readRing(ps []*pkt.Packet) (int, error) {
	r := d.ring
	if !r.enterRead() {
		return 0, os.ErrClosed
	}
	defer r.leaveRead()
	n := d.takeRing(ps, 0)
	for n < len(ps) {
		c, ok := r.next()
		if !ok {
			if n > 0 {
				return n, nil
			}
			if err := d.ringWait(); err != nil {
				return 0, err
			}
			continue
		}
		if c.tag == tagWake {
			return n, os.ErrClosed
		}
		if c.flags&cqeFMore == 0 { // the multishot read ended (out of buffers, or an error)
			r.rearm = true
		}
		if c.res < 0 && c.res != -int32(unix.ENOBUFS) {
			if n > 0 {
				return n, nil // the packets first; the next read meets the error again
			}
			return 0, fmt.Errorf("TUN read (io_uring): %w", unix.Errno(-c.res))
		}
		if c.res >= 0 && c.flags&cqeFBuffer != 0 {
			n = d.startRing(c, ps, n)
		}
	}
	return n, nil
}

// startRing takes the frame of completion c (as drain takes one read).
func (d *Device) startRing(c cqe, ps []*pkt.Packet, n int) int {
	d.reads.Add(1)
	b := int(c.flags >> 16)
	if c.res < vnetHdrLen {
		d.ring.recycle(b)
		return n
	}
	d.ring.frame = b
	d.seg.start(d.ring.buf(b)[:c.res])
	return d.takeRing(ps, n)
}

// takeRing hands out the held frame's packets and gives its buffer back once it is done.
func (d *Device) takeRing(ps []*pkt.Packet, n int) int {
	n = d.seg.take(ps, n)
	if d.seg.frame == nil && d.ring.frame >= 0 {
		d.ring.recycle(d.ring.frame)
		d.ring.frame = -1
	}
	return n
}

// ringWait enables the ring on first use and waits for a completion; if the kernel refuses
// either (after ringWorks let it through), the device goes on with polled reads.
func (d *Device) ringWait() error {
	r := d.ring
	if r.closed.Load() {
		return os.ErrClosed
	}
	err := func() error {
		if !r.started {
			if err := r.start(); err != nil {
				return err
			}
		}
		return r.wait()
	}()
	if err == nil || err == os.ErrClosed {
		return err
	}
	d.ringErr.Store(&err)
	d.mode.Store(readPolled)
	return nil // the caller's next read is a polled one
}

// readPolled is ReadBatch after the ring failed: the fd is blocking and not in Go's poller,
// so wait in ppoll (for Close's eventfd too), then read while it stays readable.
func (d *Device) readPolled(ps []*pkt.Packet) (int, error) {
	if !d.ring.enterRead() {
		return 0, os.ErrClosed
	}
	defer d.ring.leaveRead()
	n := d.seg.take(ps, 0)
	timeout := -1 // wait for the first frame, not for more
	if n > 0 {
		timeout = 0
	}
	for n < len(ps) {
		fds := []unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLIN}, {Fd: int32(d.ring.efd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, timeout); err == unix.EINTR {
			continue
		} else if err != nil {
			return n, err
		}
		if fds[1].Revents != 0 || d.ring.closed.Load() {
			return n, os.ErrClosed
		}
		if fds[0].Revents == 0 {
			return n, nil // nothing more now
		}
		m, err := unix.Read(d.fd, d.frame)
		if err != nil {
			return n, err
		}
		d.reads.Add(1)
		if m >= vnetHdrLen {
			d.seg.start(d.frame[:m])
		}
		n = d.seg.take(ps, n)
		timeout = 0
	}
	return n, nil
}
