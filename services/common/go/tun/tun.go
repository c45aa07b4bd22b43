// Package tun attaches to TUN devices, also in other network namespaces, and reads and
// writes packets in batches through Go's poller (one wake-up drains many packets).
package tun

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/pkt"
)

// Device is an open TUN queue.
type Device struct {
	Name string
	f    *os.File
	rc   syscall.RawConn
	fd   int

	offload bool      // frames carry a virtio_net_hdr (OpenOffload)
	uso     bool      // and UDP super-packets are allowed both ways
	frame   []byte    // the last frame read (offload)
	seg     segmenter // what of it is not yet handed out
	reads   atomic.Uint64

	ring    *ring        // the batched reader (OpenOffloadRing), nil without
	mode    atomic.Int32 // which reader runs: readPlain, readRing, readPolled
	ringErr atomic.Pointer[error]
}

// Open attaches to the TUN device name in the network namespace at netnsPath ("" = the
// caller's). The testbed creates the devices (`ip tuntap add`) so that addresses and
// routes exist before the data plane starts; a device that does not exist is created here
// (it then lives as long as the process).
func Open(netnsPath, name string) (*Device, error) {
	return open(netnsPath, name, unix.IFF_TUN|unix.IFF_NO_PI)
}

func open(netnsPath, name string, flags uint16) (*Device, error) {
	fd, err := attachIn(netnsPath, name, flags)
	if err != nil {
		return nil, err
	}
	return newDevice(fd, name, true)
}

func attachIn(netnsPath, name string, flags uint16) (int, error) {
	var fd int
	err := inNetns(netnsPath, func() error {
		var err error
		fd, err = attach(name, flags)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("tun %s (netns %q): %w", name, netnsPath, err)
	}
	return fd, nil
}

// newDevice wraps fd. A nonblocking fd is read through Go's poller; a blocking one (the
// ring reader's) is kept out of it, whose epoll would otherwise wake for every frame with
// no goroutine waiting.
func newDevice(fd int, name string, nonblock bool) (*Device, error) {
	if err := unix.SetNonblock(fd, nonblock); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Device{Name: name, f: f, rc: rc, fd: fd}, nil
}

func attach(name string, flags uint16) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF: %w", err)
	}
	return fd, nil
}

// inNetns runs fn on a thread switched into the namespace at path. If switching back
// fails the thread stays locked, so the runtime discards it instead of reusing it.
func inNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", path, err)
	}
	fnErr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		return errors.Join(fnErr, fmt.Errorf("setns back: %w", err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// ReadBatch waits until the device is readable, then reads packets into ps until the
// device is drained or ps is full. It returns how many it read. With offloads, a
// super-packet becomes several packets, and what does not fit into ps comes next call.
func (d *Device) ReadBatch(ps []*pkt.Packet) (int, error) {
	switch d.mode.Load() {
	case readRing:
		return d.readRing(ps)
	case readPolled:
		return d.readPolled(ps)
	}
	n := d.seg.take(ps, 0)
	if n > 0 {
		return n, nil
	}
	var rerr error
	err := d.rc.Read(func(fd uintptr) bool {
		var done bool
		n, done, rerr = d.drain(int(fd), ps)
		return done
	})
	if err != nil && n > 0 {
		return n, nil // the packets first; the error comes again next call
	}
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// drain reads packets into ps until the device has none (EAGAIN) or ps is full. done is
// false when it stopped at EAGAIN with nothing read (the caller may wait for data).
func (d *Device) drain(fd int, ps []*pkt.Packet) (n int, done bool, err error) {
	for n < len(ps) {
		buf := d.frame // with offloads a frame (virtio header, packet) may be a super-packet
		if !d.offload {
			buf = ps[n].Buf()
		}
		m, err := unix.Read(fd, buf)
		switch {
		case err == unix.EAGAIN:
			return n, n > 0, nil
		case err == unix.EINTR:
			continue
		case err != nil:
			return n, true, err
		}
		d.reads.Add(1)
		if !d.offload {
			ps[n].N = m
			n++
			continue
		}
		if m >= vnetHdrLen {
			d.seg.start(d.frame[:m])
		}
		n = d.seg.take(ps, n)
	}
	return n, true, nil
}

// WriteBatch writes every packet; a packet the kernel refuses (e.g. no route) is
// counted in the returned error count and skipped.
func (d *Device) WriteBatch(ps []*pkt.Packet) (failed int, err error) {
	i := 0
	werr := d.rc.Write(func(fd uintptr) bool {
		for i < len(ps) {
			var err error
			if d.offload {
				_, err = unix.Writev(int(fd), [][]byte{noOffload[:], ps[i].Bytes()})
			} else {
				_, err = unix.Write(int(fd), ps[i].Bytes())
			}
			switch err {
			case unix.EAGAIN:
				return false
			case unix.EINTR:
				continue
			case nil:
			default:
				failed++
			}
			i++
		}
		return true
	})
	return failed, werr
}

// Write writes one packet (safe for concurrent use).
func (d *Device) Write(b []byte) (int, error) {
	var n int
	var werr error
	err := d.rc.Write(func(fd uintptr) bool {
		for {
			if d.offload {
				n, werr = unix.Writev(int(fd), [][]byte{noOffload[:], b})
				n = max(n-vnetHdrLen, 0)
			} else {
				n, werr = unix.Write(int(fd), b)
			}
			if werr != unix.EINTR {
				return werr != unix.EAGAIN
			}
		}
	})
	if err != nil {
		return n, err
	}
	return n, werr
}

// noOffload is the virtio_net_hdr of a packet written as it is (checksums complete).
var noOffload [vnetHdrLen]byte

// Invalid counts the frames read that could not be cut into packets (offload); only
// the goroutine that calls ReadBatch may ask.
func (d *Device) Invalid() uint64 { return d.seg.invalid }

// Reads counts the frames read so far (a super-packet is one); safe for concurrent use.
func (d *Device) Reads() uint64 { return d.reads.Load() }

// Close closes the device (and wakes a ring reader, which releases its ring).
func (d *Device) Close() error {
	if d.ring != nil {
		d.ring.shutdown()
	}
	return d.f.Close()
}
