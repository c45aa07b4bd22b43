package engine

import (
	"encoding/binary"
	"time"
)

// The ICMP trace (TUNNEL_LOG_LEVEL=DEBUG): every ICMP echo that crosses an end is logged
// at each stage, so a slow ping's delay can be placed stage by stage. Sending end: read
// from the TUN, taken from the ingress queue, its batch sent; receiving end: its datagram
// read from the path, written to the TUN. Each line carries age_us, the time since the
// ping was sent, read from the echo's own payload (iputils ping puts its gettimeofday
// there, and the reply carries it back): both ends and ping share the host's clock, so
// the ages of one echo at the stages of both ends line up without any clock exchange.

// echo is a traced ICMP echo: its sequence number and ping's send time (zero if its
// payload holds none).
type echo struct {
	seq    int
	reply  bool
	sentAt time.Time
}

// icmpEcho returns the echo an IPv4 ICMP echo request or reply is (the trace's marker).
func icmpEcho(b []byte) (echo, bool) {
	if len(b) < 28 || b[0]>>4 != 4 || b[9] != 1 || (b[20] != 0 && b[20] != 8) {
		return echo{}, false
	}
	ihl := int(b[0]&0x0f) * 4
	if len(b) < ihl+8 {
		return echo{}, false
	}
	e := echo{seq: int(binary.BigEndian.Uint16(b[ihl+6:])), reply: b[ihl] == 0}
	// iputils ping: a struct timeval (two native 64-bit words) first
	if ts := b[ihl+8:]; len(ts) >= 16 {
		sec, usec := int64(binary.NativeEndian.Uint64(ts)), int64(binary.NativeEndian.Uint64(ts[8:]))
		at := time.Unix(sec, usec*1000)
		if usec >= 0 && usec < 1e6 && time.Since(at).Abs() < time.Minute { // not another ping's payload
			e.sentAt = at
		}
	}
	return e, true
}

// ageUS is the echo's age in µs (-1 without a send time).
func (x echo) ageUS() int64 {
	if x.sentAt.IsZero() {
		return -1
	}
	return time.Since(x.sentAt).Microseconds()
}

func (x echo) kind() string {
	if x.reply {
		return "reply"
	}
	return "request"
}

// traceEcho logs one stage of an echo with its age and the stage's attributes.
func (e *Engine) traceEcho(stage string, x echo, attrs ...any) {
	e.log.Debug("trace: "+stage, append([]any{"icmp_seq", x.seq, "echo", x.kind(), "age_us", x.ageUS()}, attrs...)...)
}

// deliver is the reorder buffer's output (under rxMu): to the TUN, noting traced echoes
// until the write that carries them (traceWritten).
func (e *Engine) deliver(b []byte) {
	if e.trace {
		if x, ok := icmpEcho(b); ok {
			e.delivered = append(e.delivered, x)
		}
	}
	e.toTUN.Add(b)
}

// flushTUN writes what the reorder buffer delivered (under rxMu) and logs the echoes in it.
func (e *Engine) flushTUN() {
	e.toTUN.Flush()
	for _, x := range e.delivered {
		e.traceEcho("written", x)
	}
	e.delivered = e.delivered[:0]
}
