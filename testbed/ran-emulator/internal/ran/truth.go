package ran

import (
	"encoding/binary"
	"net/netip"
	"sync"

	"mts.invalid/suite/services/common/go/pkt"
)

// Cause is why the emulator dropped a packet: the ground truth a loss classifier (MELD)
// is measured against (issue 12).
type Cause uint8

const (
	// CauseRadio: residual radio loss after HARQ (RLC UM: a segment failed every HARQ
	// attempt, or the channel's configured residual loss).
	CauseRadio Cause = iota
	// CauseOverflow: the RLC buffer (or the reader's inbox in front of it) was full.
	CauseOverflow
	// CauseAQM: CoDel / FQ-CoDel dropped it at the head of the RLC queue.
	CauseAQM
	// CauseWAN: the WAN stage's queue (either direction) was full.
	CauseWAN
	numCauses
)

var causeNames = [numCauses]string{"radio", "overflow", "aqm", "wan"}

func (c Cause) String() string { return causeNames[c] }

// Flow is an IPv4 5-tuple (ports 0 for protocols other than TCP and UDP).
type Flow struct {
	Src, Dst     netip.Addr
	Proto        uint8
	Sport, Dport uint16
}

// Drop is one labelled drop.
type Drop struct {
	Seq    uint64 // 1, 2, ... in drop order: the event log's cursor
	TimeNs int64  // emulator clock (CLOCK_MONOTONIC)
	UE     string // "" when no UE's address is in the packet (WAN)
	Cause  Cause
	Flow   Flow
	Bytes  int
	TCPSeq uint32 // the TCP segment's sequence number (TCP only)
	TCPLen int    // its payload length (TCP only)
}

// CauseCounts counts drops per cause.
type CauseCounts [numCauses]uint64

// Map names the counts by cause.
func (c *CauseCounts) Map() map[string]uint64 {
	out := make(map[string]uint64, numCauses)
	for i, n := range c {
		out[Cause(i).String()] = n
	}
	return out
}

// maxFlows bounds the per-flow table; drops of further flows count in FlowsOverflow.
const maxFlows = 65536

// Truth labels every drop and keeps counters per UE and per flow and a bounded event log
// read with a cursor. Drops are rare next to packets, so one mutex serves the TTI thread,
// the readers and the WAN stage.
type Truth struct {
	mu            sync.Mutex
	ring          []Drop
	next          uint64 // sequence number of the next drop
	perUE         map[string]*CauseCounts
	perFlow       map[Flow]*CauseCounts
	total         CauseCounts
	flowsOverflow uint64
}

// NewTruth keeps the last size drops in its event log.
func NewTruth(size int) *Truth {
	return &Truth{ring: make([]Drop, max(size, 1)), next: 1, perUE: map[string]*CauseCounts{},
		perFlow: map[Flow]*CauseCounts{}}
}

// Record labels p (still valid: the caller frees it afterwards).
func (t *Truth) Record(now int64, ue string, cause Cause, p *pkt.Packet) {
	d := Drop{TimeNs: now, UE: ue, Cause: cause, Bytes: p.N}
	d.Flow, d.TCPSeq, d.TCPLen = parseFlow(p.Bytes())
	t.mu.Lock()
	defer t.mu.Unlock()
	d.Seq = t.next
	t.next++
	t.ring[d.Seq%uint64(len(t.ring))] = d
	t.total[cause]++
	c := t.perUE[ue]
	if c == nil {
		c = &CauseCounts{}
		t.perUE[ue] = c
	}
	c[cause]++
	f := t.perFlow[d.Flow]
	if f == nil {
		if len(t.perFlow) >= maxFlows {
			t.flowsOverflow++
			return
		}
		f = &CauseCounts{}
		t.perFlow[d.Flow] = f
	}
	f[cause]++
}

// Since returns up to limit drops with Seq > after, the cursor to pass next time, and how
// many drops after the cursor the log had already overwritten (lost to this reader).
func (t *Truth) Since(after uint64, limit int) (out []Drop, next uint64, lost uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	oldest := uint64(1)
	if n := uint64(len(t.ring)); t.next > n+1 {
		oldest = t.next - n
	}
	from := after + 1
	if from < oldest {
		lost = oldest - from
		from = oldest
	}
	for s := from; s < t.next && len(out) < limit; s++ {
		out = append(out, t.ring[s%uint64(len(t.ring))])
	}
	next = from - 1 + uint64(len(out))
	return out, next, lost
}

// TruthCounts is a snapshot of the counters.
type TruthCounts struct {
	Total         CauseCounts
	PerUE         map[string]CauseCounts
	PerFlow       map[Flow]CauseCounts
	FlowsOverflow uint64 // drops of flows beyond the table's bound (in Total and PerUE only)
	LastSeq       uint64
}

// Counts copies the counters.
func (t *Truth) Counts() TruthCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := TruthCounts{Total: t.total, PerUE: make(map[string]CauseCounts, len(t.perUE)),
		PerFlow: make(map[Flow]CauseCounts, len(t.perFlow)), FlowsOverflow: t.flowsOverflow, LastSeq: t.next - 1}
	for k, v := range t.perUE {
		out.PerUE[k] = *v
	}
	for k, v := range t.perFlow {
		out.PerFlow[k] = *v
	}
	return out
}

// parseFlow reads the 5-tuple of an IPv4 packet, and the TCP sequence number and payload
// length of a TCP segment (the join with a sender's loss events needs them).
func parseFlow(b []byte) (f Flow, tcpSeq uint32, tcpLen int) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return f, 0, 0
	}
	f.Src = netip.AddrFrom4([4]byte(b[12:16]))
	f.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	f.Proto = b[9]
	ihl := int(b[0]&0x0f) * 4
	if (f.Proto == 6 || f.Proto == 17) && len(b) >= ihl+4 {
		f.Sport = binary.BigEndian.Uint16(b[ihl:])
		f.Dport = binary.BigEndian.Uint16(b[ihl+2:])
	}
	if f.Proto == 6 && len(b) >= ihl+20 {
		tcpSeq = binary.BigEndian.Uint32(b[ihl+4:])
		total := int(binary.BigEndian.Uint16(b[2:4]))
		tcpLen = max(min(total, len(b))-ihl-int(b[ihl+12]>>4)*4, 0)
	}
	return f, tcpSeq, tcpLen
}
