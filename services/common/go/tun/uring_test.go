package tun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/pkt"
)

var netnsCount int

// A TUN "t0" (10.9.0.1/24, up) in a network namespace of its own; root only.
func tunNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (a TUN in a network namespace)")
	}
	netnsCount++
	name := fmt.Sprintf("mts-tun-%d-%d", os.Getpid()%100000, netnsCount)
	ip := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	ip("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "tuntap", "add", "mode", "tun", "name", "t0")
	ip("-n", name, "link", "set", "t0", "up")
	ip("-n", name, "addr", "add", "10.9.0.1/24", "dev", "t0")
	return "/run/netns/" + name
}

// sendUDP sends datagrams 0..n-1 (each its number in 4 bytes, then size-4 bytes) from a
// socket in the namespace towards 10.9.0.2 (routed into the TUN); with gso, in sends of
// 8 datagrams by UDP_SEGMENT (USO super-packets on the TUN).
func sendUDP(t *testing.T, ns string, n, size int, gso bool) {
	t.Helper()
	err := inNetns(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		to := &unix.SockaddrInet4{Port: 9, Addr: [4]byte{10, 9, 0, 2}}
		if gso {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, size); err != nil {
				return err
			}
		}
		per := map[bool]int{true: 8, false: 1}[gso]
		for i := 0; i < n; i += per {
			b := make([]byte, 0, per*size)
			for j := i; j < min(i+per, n); j++ {
				d := make([]byte, size)
				binary.BigEndian.PutUint32(d, uint32(j))
				b = append(b, d...)
			}
			if err := unix.Sendto(fd, b, 0, to); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readUDP reads until it has n datagrams to port 9 (the kernel's own packets on the link,
// e.g. IPv6 router solicitations, are skipped) and returns them in the order read.
func readUDP(t *testing.T, d *Device, n int) [][]byte {
	t.Helper()
	ps := make([]*pkt.Packet, 64)
	var got [][]byte
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		refillTest(ps)
		k, err := d.ReadBatch(ps)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps[:k] {
			b := p.Bytes()
			if b[0]>>4 == 4 && b[9] == unix.IPPROTO_UDP && binary.BigEndian.Uint16(b[22:]) == 9 {
				got = append(got, append([]byte(nil), b...))
			}
		}
	}
	if len(got) != n {
		name, _ := d.Reader()
		t.Fatalf("%s: read %d of %d datagrams", name, len(got), n)
	}
	return got
}

func refillTest(ps []*pkt.Packet) {
	for i := range ps {
		ps[i] = pkt.Get()
	}
}

// The ring reader gives what plain reads give, packet for packet and in order: single
// datagrams, more at once than it has buffers (its read ends and is armed again), and USO
// super-packets cut up; and it says it runs.
func TestRingReadsLikePlainReads(t *testing.T) {
	if err := ringWorks(); err != nil {
		t.Skipf("io_uring refused here: %v", err)
	}
	ns := tunNetns(t)
	for _, c := range []struct {
		n    int
		gso  bool
		name string
	}{{5, false, "few"}, {4*ringBufs + 3, false, "more than the buffers"}, {80, true, "USO"}} {
		var got [2][][]byte
		for i, open := range []func(string, string) (*Device, error){OpenOffload, OpenOffloadRing} {
			d := openRetry(t, open, ns)
			sendUDP(t, ns, c.n, 1300, c.gso)
			got[i] = readUDP(t, d, c.n)
			if name, why := d.Reader(); name != []string{"read", "io_uring"}[i] {
				t.Errorf("%s: reader %q (%v)", c.name, name, why)
			}
			d.Close()
		}
		for j := range got[0] {
			// the same datagram: its length and payload (the sockets' ports and IP ids differ)
			if string(got[0][j][2:4]) != string(got[1][j][2:4]) || string(got[0][j][28:]) != string(got[1][j][28:]) {
				t.Fatalf("%s: packet %d differs: plain %x.. ring %x..", c.name, j, got[0][j][:32], got[1][j][:32])
			}
			if seq := binary.BigEndian.Uint32(got[1][j][28:]); seq != uint32(j) {
				t.Fatalf("%s: packet %d carries datagram %d", c.name, j, seq)
			}
		}
	}
}

// openRetry opens t0, again while the previous device is still attached: the kernel drops
// a closed ring's hold on the TUN after Close, in a worker of its own.
func openRetry(t *testing.T, open func(string, string) (*Device, error), ns string) *Device {
	t.Helper()
	for range 100 {
		d, err := open(ns, "t0")
		if err == nil {
			waitOperUp(t, ns)
			return d
		}
		if !errors.Is(err, unix.EBUSY) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("t0 still attached")
	return nil
}

// waitOperUp waits until the kernel has activated t0's queue after the attach turned its
// carrier on (the link watcher does it, up to a second later when events come fast);
// until then what is sent to it is dropped.
func waitOperUp(t *testing.T, ns string) {
	t.Helper()
	for range 300 {
		out, _ := exec.Command("ip", "-n", strings.TrimPrefix(ns, "/run/netns/"), "-o", "link", "show", "t0").Output()
		if strings.Contains(string(out), "state UP") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("t0 not up")
}

// Close wakes a reader waiting in io_uring_enter.
func TestRingCloseWakesReader(t *testing.T) {
	if err := ringWorks(); err != nil {
		t.Skipf("io_uring refused here: %v", err)
	}
	d, err := OpenOffloadRing(tunNetns(t), "t0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ps := make([]*pkt.Packet, 8)
		refillTest(ps)
		for {
			if _, err := d.ReadBatch(ps); err != nil {
				done <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	d.Close()
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("reader ended with %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("reader still waiting after Close")
	}
}

// Where io_uring is refused (here: io_uring_setup as a seccomp profile refuses it), the
// device reads as before and says so.
func TestRingRefusedFallsBack(t *testing.T) {
	ns := tunNetns(t)
	uringSetupCall = func(uint32, *ringParams) (int, error) { return -1, unix.EPERM }
	defer func() { uringSetupCall = uringSetup }()
	d := openRetry(t, OpenOffloadRing, ns)
	defer d.Close()
	if name, why := d.Reader(); name != "read" || !errors.Is(why, unix.EPERM) {
		t.Fatalf("reader %q (%v), want read (EPERM)", name, why)
	}
	sendUDP(t, ns, 10, 1300, false)
	readUDP(t, d, 10)
}
