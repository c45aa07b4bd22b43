package tun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The batched TUN read (OpenOffloadRing): one multishot read of the TUN in an io_uring. The
// kernel reads every frame the TUN holds into buffers of a ring we give it and posts one
// completion per frame, in the order it read them, so that one io_uring_enter takes what
// plain reads take one system call each for (a sender that does not batch, as iperf3's UDP,
// gives the TUN one datagram per frame). DEFER_TASKRUN: the reads run in the reader's own
// thread when it enters the ring, none behind its back.

const (
	ringBufs  = 32           // frames the kernel may read ahead of us (a power of 2)
	ringCQ    = 4 * ringBufs // completions: one per frame, and error ones
	tagRead   = 1            // user_data of the multishot read
	tagWake   = 2            // of the poll on the eventfd that Close writes
	bufGroup  = 0
	sqeSize   = 64
	cqeSize   = 16
	offSQRing = 0
	offSQEs   = 0x10000000

	// IORING_SETUP_* flags of io_uring_setup, and the feature it must report
	setupCQSize, setupRDisabled, setupSubmitAll = 1 << 3, 1 << 6, 1 << 7
	setupSingleIssuer, setupDeferTaskrun        = 1 << 12, 1 << 13
	featSingleMmap                              = 1 << 0

	opNop           = 0
	opPollAdd       = 6
	opReadMultishot = 49 // Linux 6.7
	sqeBufferSelect = 1 << 5
	cqeFBuffer      = 1 << 0
	cqeFMore        = 1 << 1
	enterGetEvents  = 1 << 0

	regProbe       = 8
	regEnableRings = 12
	regPbufRing    = 22
)

// ringOffsets is struct io_sqring_offsets and io_cqring_offsets, which share a layout:
// fields 4-6 are flags, dropped, array (SQ) and overflow, cqes, flags (CQ).
type ringOffsets struct {
	head, tail, ringMask, ringEntries, f4, f5, f6, resv1 uint32
	userAddr                                             uint64
}

// ringParams is struct io_uring_params.
type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff, cqOff                                                           ringOffsets
}

// ring is the io_uring of one TUN's reader; only that goroutine uses it, but Close.
type ring struct {
	fd, efd, tun int
	mem, sqes    []byte // the SQ and CQ rings (one mapping), the SQEs
	bufRing      []byte // struct io_uring_buf entries and their tail
	bufs         []byte // ringBufs frames
	sq, cq       struct{ head, tail, mask, off uint32 }
	bufTail      uint16
	frame        int  // the buffer behind the segmenter's frame, -1 none
	rearm        bool // the multishot read ended: submit it again
	mu           sync.Mutex
	started      bool // enabled by the reader's thread
	busy         bool // the reader is in ReadBatch (enterRead)
	released     bool
	closed       atomic.Bool
}

type cqe struct {
	tag   uint64
	res   int32
	flags uint32
}

// uringSetupCall is io_uring_setup (a test refuses it as a seccomp profile would).
var uringSetupCall = uringSetup

func uringSetup(entries uint32, p *ringParams) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(p)), 0)
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func uringRegister(fd int, op uintptr, arg unsafe.Pointer, n uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), op, uintptr(arg), n, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// newRing sets up a ring for reading the TUN fd tun in frames of frameSize, disabled until
// the reader's thread enables it (SINGLE_ISSUER).
func newRing(tun, frameSize int) (r *ring, err error) {
	p := ringParams{cqEntries: ringCQ, flags: setupCQSize | setupRDisabled | setupSubmitAll |
		setupSingleIssuer | setupDeferTaskrun}
	fd, err := uringSetupCall(4, &p)
	if err != nil {
		return nil, fmt.Errorf("io_uring_setup: %w", err)
	}
	r = &ring{fd: fd, efd: -1, tun: tun, frame: -1}
	defer func() {
		if err != nil {
			r.release()
		}
	}()
	if p.features&featSingleMmap == 0 {
		return nil, errors.New("io_uring: no single mmap (kernel too old)")
	}
	if err := r.mapRings(&p); err != nil {
		return nil, err
	}
	if err := r.probe(); err != nil {
		return nil, err
	}
	if err := r.provide(frameSize); err != nil {
		return nil, err
	}
	if r.efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *ring) mapRings(p *ringParams) (err error) {
	size := max(p.sqOff.f6+p.sqEntries*4, p.cqOff.f5+p.cqEntries*cqeSize) // array, cqes
	if r.mem, err = unix.Mmap(r.fd, offSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring mmap: %w", err)
	}
	if r.sqes, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries*sqeSize), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("io_uring mmap: %w", err)
	}
	r.sq.head, r.sq.tail, r.sq.off = p.sqOff.head, p.sqOff.tail, p.sqOff.f6 // array
	r.sq.mask = *r.u32(p.sqOff.ringMask)
	r.cq.head, r.cq.tail, r.cq.off = p.cqOff.head, p.cqOff.tail, p.cqOff.f5 // cqes
	r.cq.mask = *r.u32(p.cqOff.ringMask)
	return nil
}

// probe checks that the kernel has the multishot read (io_uring_register PROBE).
func (r *ring) probe() error {
	const ops = 64
	var buf [16 + 8*ops]byte // struct io_uring_probe and its ops
	if err := uringRegister(r.fd, regProbe, unsafe.Pointer(&buf[0]), ops); err != nil {
		return fmt.Errorf("io_uring probe: %w", err)
	}
	op := buf[16+8*opReadMultishot:]
	if buf[1] <= opReadMultishot || binary.LittleEndian.Uint16(op[2:])&1 == 0 {
		return errors.New("io_uring: no multishot read (Linux < 6.7)")
	}
	return nil
}

// provide gives the kernel ringBufs buffers of frameSize (a provided-buffer ring; the
// memory is mapped, not Go's, so the kernel may write into it whatever the GC does).
func (r *ring) provide(frameSize int) (err error) {
	anon := unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	if r.bufRing, err = unix.Mmap(-1, 0, ringBufs*16, unix.PROT_READ|unix.PROT_WRITE, anon); err != nil {
		return err
	}
	if r.bufs, err = unix.Mmap(-1, 0, ringBufs*frameSize, unix.PROT_READ|unix.PROT_WRITE, anon); err != nil {
		return err
	}
	reg := struct { // struct io_uring_buf_reg
		ringAddr    uint64
		ringEntries uint32
		bgid, flags uint16
		resv        [3]uint64
	}{ringAddr: uint64(uintptr(unsafe.Pointer(&r.bufRing[0]))), ringEntries: ringBufs, bgid: bufGroup}
	if err := uringRegister(r.fd, regPbufRing, unsafe.Pointer(&reg), 1); err != nil {
		return fmt.Errorf("io_uring buffer ring: %w", err)
	}
	for b := range ringBufs {
		r.recycle(b)
	}
	return nil
}

func (r *ring) u32(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

func (r *ring) frameSize() int { return len(r.bufs) / ringBufs }

func (r *ring) buf(b int) []byte { return r.bufs[b*r.frameSize() : (b+1)*r.frameSize()] }

// recycle gives buffer b back to the kernel.
func (r *ring) recycle(b int) {
	e := r.bufRing[int(r.bufTail&(ringBufs-1))*16:]
	binary.LittleEndian.PutUint64(e, uint64(uintptr(unsafe.Pointer(&r.bufs[b*r.frameSize()]))))
	binary.LittleEndian.PutUint32(e[8:], uint32(r.frameSize()))
	binary.LittleEndian.PutUint16(e[12:], uint16(b))
	r.bufTail++
	// The ring's tail (u16 at byte 14) shares a 32-bit word with entry 0's id (bytes 12-13,
	// ours): one atomic store publishes the tail after the entry, as the kernel's acquire
	// load of it expects (little-endian, as Go's linux/amd64 and arm64).
	w := (*uint32)(unsafe.Pointer(&r.bufRing[12]))
	atomic.StoreUint32(w, uint32(r.bufTail)<<16|uint32(binary.LittleEndian.Uint16(r.bufRing[12:])))
}

// push queues one SQE (submitted by the next enter).
func (r *ring) push(op uint8, flags uint8, fd int, op32 uint32, tag uint64) {
	tail := atomic.LoadUint32(r.u32(r.sq.tail))
	i := tail & r.sq.mask
	s := r.sqes[i*sqeSize : (i+1)*sqeSize]
	clear(s)
	s[0], s[1] = op, flags
	binary.LittleEndian.PutUint32(s[4:], uint32(int32(fd)))
	binary.LittleEndian.PutUint32(s[28:], op32) // poll32_events
	binary.LittleEndian.PutUint64(s[32:], tag)
	binary.LittleEndian.PutUint16(s[40:], bufGroup)
	*r.u32(r.sq.off + 4*i) = i
	atomic.StoreUint32(r.u32(r.sq.tail), tail+1)
}

// start enables the ring from the reader's thread, which the reads then run in (locked to
// it for good: the kernel runs a DEFER_TASKRUN ring's work only in its submitter thread).
func (r *ring) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return os.ErrClosed
	}
	runtime.LockOSThread()
	r.started = true
	if err := uringRegister(r.fd, regEnableRings, nil, 0); err != nil {
		return fmt.Errorf("io_uring enable: %w", err)
	}
	r.push(opPollAdd, 0, r.efd, unix.POLLIN, tagWake)
	r.rearm = true
	return nil
}

// wait submits what is queued (the read again if it ended) and waits for a completion.
func (r *ring) wait() error {
	if r.rearm {
		r.push(opReadMultishot, sqeBufferSelect, r.tun, 0, tagRead)
		r.rearm = false
	}
	for {
		queued := atomic.LoadUint32(r.u32(r.sq.tail)) - atomic.LoadUint32(r.u32(r.sq.head))
		_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(queued), 1,
			enterGetEvents, 0, 0)
		switch e {
		case 0:
			return nil
		case unix.EINTR, unix.EAGAIN, unix.EBUSY:
			if r.pending() { // EAGAIN/EBUSY: completions to reap first
				return nil
			}
		default:
			return fmt.Errorf("io_uring_enter: %w", e)
		}
	}
}

func (r *ring) pending() bool {
	return atomic.LoadUint32(r.u32(r.cq.head)) != atomic.LoadUint32(r.u32(r.cq.tail))
}

// next takes the oldest completion, if any.
func (r *ring) next() (cqe, bool) {
	head := atomic.LoadUint32(r.u32(r.cq.head))
	if head == atomic.LoadUint32(r.u32(r.cq.tail)) {
		return cqe{}, false
	}
	b := r.mem[r.cq.off+(head&r.cq.mask)*cqeSize:]
	c := cqe{tag: binary.LittleEndian.Uint64(b), res: int32(binary.LittleEndian.Uint32(b[8:])),
		flags: binary.LittleEndian.Uint32(b[12:])}
	atomic.StoreUint32(r.u32(r.cq.head), head+1)
	return c, true
}

// enterRead marks the reader inside the ring's memory for one ReadBatch; false once the
// device is closed (the ring is then released).
func (r *ring) enterRead() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		r.releaseLocked()
		return false
	}
	r.busy = true
	return true
}

// leaveRead ends it; a Close meanwhile left the release to the reader.
func (r *ring) leaveRead() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy = false
	if r.closed.Load() {
		r.releaseLocked()
	}
}

// shutdown (Close) releases the ring at once unless the reader is inside it: then it wakes
// the reader (waiting in io_uring_enter or ppoll), which releases it on its way out. The
// buffers are unmapped only when no read of the ring can be running.
func (r *ring) shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed.Store(true)
	if !r.busy {
		r.releaseLocked()
		return
	}
	var one [8]byte
	binary.NativeEndian.PutUint64(one[:], 1)
	_, _ = unix.Write(r.efd, one[:])
}

func (r *ring) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked()
}

// releaseLocked closes the ring and its eventfd and unmaps its memory.
func (r *ring) releaseLocked() {
	if r.released {
		return
	}
	r.released = true
	unix.Close(r.fd)
	for _, m := range [][]byte{r.mem, r.sqes, r.bufRing, r.bufs} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	if r.efd >= 0 {
		unix.Close(r.efd)
	}
}

// ringWorks tells whether this process may use io_uring as the reader needs (a container's
// seccomp profile often refuses it): a throwaway ring with the same flags runs one no-op
// through all three of its system calls.
func ringWorks() error {
	runtime.LockOSThread() // SINGLE_ISSUER: setup and enter from one thread
	defer runtime.UnlockOSThread()
	p := ringParams{flags: setupSingleIssuer | setupDeferTaskrun}
	fd, err := uringSetupCall(2, &p)
	if err != nil {
		return fmt.Errorf("io_uring_setup: %w", err)
	}
	r := &ring{fd: fd, efd: -1, frame: -1}
	defer r.release()
	if err := r.mapRings(&p); err != nil {
		return err
	}
	if err := r.probe(); err != nil {
		return err
	}
	r.push(opNop, 0, -1, 0, 0)
	queued := uintptr(1)
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(fd), queued, 1, enterGetEvents, 0, 0); e != 0 {
		return fmt.Errorf("io_uring_enter: %w", e)
	}
	if c, ok := r.next(); !ok || c.res != 0 {
		return fmt.Errorf("io_uring: no-op gave %+v", c)
	}
	return nil
}
