package ran

import (
	"encoding/binary"
	"log/slog"
	"testing"

	"mts.invalid/suite/services/common/go/pkt"
)

const ms = int64(1e6)

// testEmu builds an emulator (no devices) from JSON with the given cells and UEs.
func testEmu(t *testing.T, cfg string) *Emulator {
	t.Helper()
	c, err := ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	e, err := New(c, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("new: %v", err)
	}
	return e
}

// udp makes an IPv4 packet of n bytes to dst (10.30.0.x), with a sequence number.
func udp(dst byte, n int, seq uint32, srcPort uint16) *pkt.Packet {
	p := pkt.Get()
	b := p.Buf()
	clear(b[:n])
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:4], uint16(n))
	b[9] = 17
	copy(b[12:16], []byte{10, 20, 0, 1})
	copy(b[16:20], []byte{10, 30, 0, dst})
	binary.BigEndian.PutUint16(b[20:22], srcPort)
	binary.BigEndian.PutUint32(b[28:32], seq)
	p.N = n
	return p
}

func seqOf(p *pkt.Packet) uint32 { return binary.BigEndian.Uint32(p.Bytes()[28:32]) }

const oneUE = `{"dl_tun":{"name":"x"},"cells":[{"bs_id":10000,"prb":25%s}],
 "ues":[{"name":"ue1","imsi":"208930000000001","bearers":[{"bs_id":10000,"rnti":100,"ip":"10.30.0.1",
  "tun":{"name":"rf0"},"delay_ms":%d,"channel":%s}]}]}`
