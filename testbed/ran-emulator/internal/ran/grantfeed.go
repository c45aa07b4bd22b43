package ran

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"mts.invalid/suite/services/common/go/threegpp"
)

// The grant feed (issue 15): what a UE's modem driver gives SIGMA. Each TTI the uplink
// MAC writes the UE's Grant into the map `sigma_grant` of the SIGMA object loaded for
// that UE (ue/bpf/sigma.h, key: the UE's IPv4 address in network byte order), pinned
// in the directory the bearer's `grant_feed` names. The feed also fills the object's
// TBS table (`sigma_tbs`) from the 3GPP tables, the table a modem holds, so that SIGMA
// computes TBS(P_max, MCS) itself. The pins may appear after the emulator starts and
// be replaced when SIGMA is loaded again: a goroutine looks every GrantFeedRetry.

// GrantFeedRetry is how often the feed looks for (new) pinned maps.
const GrantFeedRetry = 200 * time.Millisecond

// Map layouts of ue/bpf/sigma.h (a Go test checks them against the built object's BTF).
const (
	grantValueSize = 48  // struct sigma_grant
	tbsMCSMax      = 28  // SIGMA_MCS_MAX
	tbsPRBMax      = 275 // SIGMA_PRB_MAX
	tbsEntries     = 2 * (tbsMCSMax + 1) * (tbsPRBMax + 1)
)

// TBSIndex is the key of TBS(mcs, nprb) in sigma_tbs (SIGMA_TBS_INDEX in sigma.h).
func TBSIndex(nr bool, mcs, nprb int) uint32 {
	rat := 0
	if nr {
		rat = 1
	}
	return uint32((rat*(tbsMCSMax+1)+mcs)*(tbsPRBMax+1) + nprb)
}

// EncodeGrant is struct sigma_grant for g (little-endian, as the kernel on x86/arm64).
func EncodeGrant(g Grant) [grantValueSize]byte {
	var v [grantValueSize]byte
	le := binary.LittleEndian
	le.PutUint64(v[0:], uint64(g.StartNs))
	le.PutUint64(v[8:], uint64(g.TTI))
	le.PutUint32(v[16:], uint32(g.TTINs))
	le.PutUint32(v[20:], uint32(g.PCell))
	le.PutUint32(v[24:], uint32(g.NUsers))
	le.PutUint32(v[28:], uint32(g.PUnused))
	le.PutUint32(v[32:], uint32(g.PCurrent))
	le.PutUint32(v[36:], uint32(g.MCS))
	if g.NR {
		le.PutUint32(v[40:], 1)
	}
	le.PutUint32(v[44:], uint32(min(g.BufferByte, 1<<32-1)))
	return v
}

// grantFeed is one UE's open grant map.
type grantFeed struct {
	fd    int
	id    uint32  // the map's kernel id: a new id at the same pin is a new SIGMA load
	key   [4]byte // the UE's IPv4 address, network byte order
	value [grantValueSize]byte

	Writes, Errors atomic.Uint64
}

// write stores g for the UE (TTI thread: a raw syscall keeps the thread's P).
func (f *grantFeed) write(g Grant) {
	f.value = EncodeGrant(g)
	if err := bpfUpdate(f.fd, unsafe.Pointer(&f.key[0]), unsafe.Pointer(&f.value[0]), true); err != nil {
		f.Errors.Add(1)
		return
	}
	f.Writes.Add(1)
}

// GrantFeedStats is what the control API reports about a UE's grant feed.
type GrantFeedStats struct {
	Pinned bool   `json:"pinned"` // the maps are open
	MapID  uint32 `json:"map_id"`
	Writes uint64 `json:"writes"`
	Errors uint64 `json:"errors"`
}

// GrantFeedStats reports the uplink bearer's grant feed.
func (b *Bearer) GrantFeedStats() GrantFeedStats {
	f := b.feed.Load()
	if f == nil {
		return GrantFeedStats{}
	}
	return GrantFeedStats{Pinned: true, MapID: f.id, Writes: f.Writes.Load(), Errors: f.Errors.Load()}
}

// runGrantFeeds opens (and reopens) the pinned maps of every UE that has a grant feed.
func (e *Emulator) runGrantFeeds() {
	var ups []*Bearer
	for _, b := range e.Bearers() {
		if b.up != nil && b.Cfg.GrantFeed != "" {
			ups = append(ups, b)
		}
	}
	if len(ups) == 0 {
		return
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(GrantFeedRetry)
		defer t.Stop()
		for {
			for _, b := range ups {
				if err := b.up.refreshFeed(b.Cfg.GrantFeed, b.ip4); err != nil {
					e.log.Warn("grant feed not written", "ue", b.UE.Cfg.Name, "err", err)
				}
			}
			select {
			case <-e.done:
				return
			case <-t.C:
			}
		}
	}()
}

// refreshFeed opens dir's sigma_grant if it is not the map already in use, fills its
// TBS table and hands it to the TTI thread. A missing pin is not an error (not yet).
func (b *Bearer) refreshFeed(dir string, ip4 uint32) error {
	fd, err := bpfObjGet(dir + "/sigma_grant")
	if err != nil {
		return nil // SIGMA not loaded (yet): nothing to feed
	}
	info, err := bpfMapInfo(fd)
	old := b.feed.Load()
	if err != nil || (old != nil && old.id == info.id) {
		unix.Close(fd)
		return err
	}
	if info.keySize != 4 || info.valueSize != grantValueSize {
		unix.Close(fd)
		return fmt.Errorf("%s/sigma_grant holds %d B keys, %d B values; want 4 and %d (rebuild)",
			dir, info.keySize, info.valueSize, grantValueSize)
	}
	if err := fillTBSTable(dir + "/sigma_tbs"); err != nil {
		unix.Close(fd)
		return err
	}
	f := &grantFeed{fd: fd, id: info.id}
	binary.BigEndian.PutUint32(f.key[:], ip4)
	b.feed.Store(f)
	if old != nil { // the TTI thread may be inside a write with it: close it later
		time.AfterFunc(time.Second, func() { unix.Close(old.fd) })
	}
	return nil
}

// fillTBSTable writes every TBS(mcs, nprb) of both RATs into the pinned sigma_tbs.
func fillTBSTable(path string) error {
	fd, err := bpfObjGet(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	for _, nr := range []bool{false, true} {
		maxPRB := threegpp.MaxNRPRB
		if !nr {
			maxPRB = 110
		}
		for mcs := 0; mcs <= tbsMCSMax; mcs++ {
			for n := 1; n <= maxPRB; n++ {
				bytes, err := tbsTableBytes(nr, mcs, n)
				if err != nil {
					return err
				}
				key, val := TBSIndex(nr, mcs, n), uint32(bytes)
				if err := bpfUpdate(fd, unsafe.Pointer(&key), unsafe.Pointer(&val), false); err != nil {
					return fmt.Errorf("%s[%d]: %w", path, key, err)
				}
			}
		}
	}
	return nil
}

// ---- bpf(2), the few commands the feed needs -----------------------------------------

const (
	bpfMapLookupElem  = 1
	bpfMapUpdateElem  = 2
	bpfObjGetCmd      = 7
	bpfObjGetInfoByFD = 15
)

type bpfMapElemAttr struct {
	mapFD uint32
	_     uint32
	key   uint64
	value uint64
	flags uint64
}

// bpfUpdate stores value at key; raw keeps the calling thread's P (the TTI thread).
func bpfUpdate(fd int, key, value unsafe.Pointer, raw bool) error {
	attr := bpfMapElemAttr{mapFD: uint32(fd), key: uint64(uintptr(key)), value: uint64(uintptr(value))}
	call := unix.Syscall
	if raw {
		call = unix.RawSyscall
	}
	_, _, errno := call(unix.SYS_BPF, bpfMapUpdateElem, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}

// BPFLookup reads the value at key of the map pinned at path (tests, tools).
func BPFLookup(path string, key, value []byte) error {
	fd, err := bpfObjGet(path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	attr := bpfMapElemAttr{mapFD: uint32(fd), key: uint64(uintptr(unsafe.Pointer(&key[0]))),
		value: uint64(uintptr(unsafe.Pointer(&value[0])))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfMapLookupElem, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return errno
	}
	return nil
}

func bpfObjGet(path string) (int, error) {
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	attr := struct {
		pathname uint64
		fd       uint32
		flags    uint32
	}{pathname: uint64(uintptr(unsafe.Pointer(p)))}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetCmd, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

type mapInfo struct {
	typ, id, keySize, valueSize, maxEntries, flags uint32
	name                                           [16]byte
	_                                              [48]byte // rest of struct bpf_map_info
}

func bpfMapInfo(fd int) (mapInfo, error) {
	var info mapInfo
	attr := struct {
		fd      uint32
		infoLen uint32
		info    uint64
	}{fd: uint32(fd), infoLen: uint32(unsafe.Sizeof(info)), info: uint64(uintptr(unsafe.Pointer(&info)))}
	_, _, errno := unix.Syscall(unix.SYS_BPF, bpfObjGetInfoByFD, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return info, errno
	}
	return info, nil
}
