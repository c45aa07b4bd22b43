// Package wire is the tunnel's datagram format and its authentication.
//
// A datagram is a header sent in the clear and authenticated as associated data, followed
// by an AES-256-GCM sealed body (16-byte tag). There are two headers:
//
// The full header (24 bytes), on probes and acks: it names the sender's run, so a peer
// can derive its key and adopt it.
//
//	0  version<<4 | type   (version 2; type 1 probe or data, 2 ack)
//	1  path id
//	2  reserved (0, 2 bytes)
//	4  peer id  (uint32: which UE, i.e. which pre-shared key)
//	8  epoch    (uint64: the sender's start time in ns; a restarted sender has a larger one)
//	16 path seq (uint64: per path and per sender, from 1)
//
// The short header (8 bytes), on data datagrams that carry an IP packet: the receiver opens
// them with the key of the sender's run it has adopted from a full header, so the epoch and
// the peer id (both bound into that key) need not travel with every packet.
//
//	0  version<<4 | 3
//	1  path id
//	2  path seq (48 bits; a sender's run never reaches 2^48 datagrams on a path)
//
// The key of a sender is HMAC-SHA256(PSK, "mts-tunnel v2" | role | epoch | peer id), so each
// run of each end has keys of its own and the nonce (path id | path seq) is never reused
// under one key; both headers take their path seq from one sequence per path. A data body
// is data seq (8) | the IP packet (empty: a probe); an ack body is largest path seq (8) |
// bitmap of the 64 before it (8) | ack delay ns (8). The sender keeps each datagram's send
// time itself, so none travels.
package wire

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
)

// Datagram types.
const (
	TypeData      = 1 // full header: probes (and data, which senders send short)
	TypeAck       = 2
	TypeShortData = 3 // short header: data with an IP packet
)

const (
	version = 2
	// HeaderLen is the full clear header.
	HeaderLen = 24
	// ShortHeaderLen is the short clear header of data datagrams.
	ShortHeaderLen = 8
	// MaxShortSeq bounds the path seqs a short header carries.
	MaxShortSeq = 1<<48 - 1
	// TagLen is the AEAD tag.
	TagLen = 16
	// DataBodyLen is the data body before the IP packet.
	DataBodyLen = 8
	// AckBodyLen is an ack's body.
	AckBodyLen = 24
	// Overhead is what the tunnel adds to an IP packet (short header; without the
	// underlay's UDP/IP).
	Overhead = ShortHeaderLen + DataBodyLen + TagLen
	// ProbeLen is a probe's size (full header, empty data body).
	ProbeLen = HeaderLen + DataBodyLen + TagLen
)

// Role of an end; the two ends' keys differ by it.
type Role byte

const (
	RoleUE  Role = 'U'
	RoleMEC Role = 'M'
)

// Header is the clear part of a datagram (PeerID and Epoch only in a full header).
type Header struct {
	Type    byte
	PathID  byte
	PeerID  uint32
	Epoch   uint64
	PathSeq uint64
}

// Len is the header's size on the wire.
func (h Header) Len() int {
	if h.Type == TypeShortData {
		return ShortHeaderLen
	}
	return HeaderLen
}

// Full tells whether the header names the sender's run (epoch, peer id).
func (h Header) Full() bool { return h.Type != TypeShortData }

// ErrMalformed is a datagram that is not ours (too short, wrong version or type).
var ErrMalformed = errors.New("malformed datagram")

// ParseHeader reads the clear header; it does not authenticate anything.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < ShortHeaderLen+TagLen || b[0]>>4 != version {
		return Header{}, ErrMalformed
	}
	h := Header{Type: b[0] & 0x0f, PathID: b[1]}
	switch {
	case h.Type == TypeShortData:
		h.PathSeq = uint64(binary.BigEndian.Uint16(b[2:4]))<<32 | uint64(binary.BigEndian.Uint32(b[4:8]))
		return h, nil
	case h.Type != TypeData && h.Type != TypeAck, len(b) < HeaderLen+TagLen, b[2] != 0 || b[3] != 0:
		return Header{}, ErrMalformed
	}
	h.PeerID = binary.BigEndian.Uint32(b[4:8])
	h.Epoch = binary.BigEndian.Uint64(b[8:16])
	h.PathSeq = binary.BigEndian.Uint64(b[16:24])
	return h, nil
}

// PutHeader writes h into b[:h.Len()]. A short header's path seq must not exceed
// MaxShortSeq: it panics rather than let a truncated seq reuse a nonce.
func PutHeader(b []byte, h Header) {
	b[0] = version<<4 | h.Type
	b[1] = h.PathID
	if h.Type == TypeShortData {
		if h.PathSeq > MaxShortSeq {
			panic("wire: path seq beyond a short header's 48 bits")
		}
		binary.BigEndian.PutUint16(b[2:4], uint16(h.PathSeq>>32))
		binary.BigEndian.PutUint32(b[4:8], uint32(h.PathSeq))
		return
	}
	b[2], b[3] = 0, 0
	binary.BigEndian.PutUint32(b[4:8], h.PeerID)
	binary.BigEndian.PutUint64(b[8:16], h.Epoch)
	binary.BigEndian.PutUint64(b[16:24], h.PathSeq)
}

// Key seals or opens the datagrams of one sender run.
type Key struct{ aead cipher.AEAD }

// NewKey derives the key of the sender (role, epoch) of peer from the pre-shared key.
func NewKey(psk []byte, role Role, epoch uint64, peer uint32) (*Key, error) {
	mac := hmac.New(sha256.New, psk)
	var info [13]byte
	info[0] = byte(role)
	binary.BigEndian.PutUint64(info[1:9], epoch)
	binary.BigEndian.PutUint32(info[9:13], peer)
	mac.Write([]byte("mts-tunnel v2"))
	mac.Write(info[:])
	block, err := aes.NewCipher(mac.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Key{aead: aead}, nil
}

// nonce is the path id and the path seq: the same for both headers, so one sequence per
// path gives unique nonces across them.
func nonce(h Header) [12]byte {
	var n [12]byte
	n[3] = h.PathID
	binary.BigEndian.PutUint64(n[4:], h.PathSeq)
	return n
}

// Seal appends the sealed body to the header h in dst[:h.Len()] and returns the datagram.
// dst must have room for h.Len()+len(body)+TagLen; body may alias dst[h.Len():].
func (k *Key) Seal(dst []byte, h Header, body []byte) []byte {
	n, hl := nonce(h), h.Len()
	return k.aead.Seal(dst[:hl], n[:], body, dst[:hl])
}

// Open authenticates a datagram whose header is h and decrypts its body in place.
func (k *Key) Open(b []byte, h Header) ([]byte, error) {
	n, hl := nonce(h), h.Len()
	return k.aead.Open(b[hl:hl], n[:], b[hl:], b[:hl])
}

// Ack is an ack body.
type Ack struct {
	Largest uint64
	Bitmap  uint64 // bit i: Largest-1-i was received
	Delay   int64  // ns between Largest's arrival and this ack
}

// PutAck writes a into b[:AckBodyLen].
func PutAck(b []byte, a Ack) {
	binary.BigEndian.PutUint64(b[0:8], a.Largest)
	binary.BigEndian.PutUint64(b[8:16], a.Bitmap)
	binary.BigEndian.PutUint64(b[16:24], uint64(a.Delay))
}

// ParseAck reads an ack body.
func ParseAck(b []byte) (Ack, error) {
	if len(b) != AckBodyLen {
		return Ack{}, ErrMalformed
	}
	return Ack{Largest: binary.BigEndian.Uint64(b[0:8]), Bitmap: binary.BigEndian.Uint64(b[8:16]),
		Delay: int64(binary.BigEndian.Uint64(b[16:24]))}, nil
}

// PutDataBody writes a data body's fixed part into b[:DataBodyLen].
func PutDataBody(b []byte, dataSeq uint64) { binary.BigEndian.PutUint64(b[0:8], dataSeq) }

// ParseDataBody splits a data body.
func ParseDataBody(b []byte) (dataSeq uint64, packet []byte, err error) {
	if len(b) < DataBodyLen {
		return 0, nil, ErrMalformed
	}
	return binary.BigEndian.Uint64(b[0:8]), b[DataBodyLen:], nil
}
