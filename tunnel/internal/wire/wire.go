// Package wire is the tunnel's datagram format and its authentication.
//
// Every datagram is a 24-byte header sent in the clear and authenticated, followed by an
// AES-256-GCM sealed body:
//
//	0  version<<4 | type   (version 1; type 1 data, 2 ack)
//	1  path id
//	2  reserved (0, 2 bytes)
//	4  peer id  (uint32: which UE, i.e. which pre-shared key)
//	8  epoch    (uint64: the sender's start time in ns; a restarted sender has a larger one)
//	16 path seq (uint64: per path and per sender, from 1)
//
// The key of a sender is HMAC-SHA256(PSK, "mts-tunnel v1" | role | epoch | peer id), so each
// run of each end has keys of its own and the nonce (path id | path seq) is never reused
// under one key. A data body is data seq (8) | send time (8) | the IP packet (empty: a
// probe); an ack body is largest path seq (8) | bitmap of the 64 before it (8) | the
// largest's send time (8) | ack delay ns (8).
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
	TypeData = 1
	TypeAck  = 2
)

const (
	version = 1
	// HeaderLen is the clear header.
	HeaderLen = 24
	// TagLen is the AEAD tag.
	TagLen = 16
	// DataBodyLen is the data body before the IP packet.
	DataBodyLen = 16
	// AckBodyLen is an ack's body.
	AckBodyLen = 32
	// Overhead is what the tunnel adds to an IP packet (without UDP/IP of the underlay).
	Overhead = HeaderLen + DataBodyLen + TagLen
)

// Role of an end; the two ends' keys differ by it.
type Role byte

const (
	RoleUE  Role = 'U'
	RoleMEC Role = 'M'
)

// Header is the clear part of a datagram.
type Header struct {
	Type    byte
	PathID  byte
	PeerID  uint32
	Epoch   uint64
	PathSeq uint64
}

// ErrMalformed is a datagram that is not ours (too short, wrong version or type).
var ErrMalformed = errors.New("malformed datagram")

// ParseHeader reads the clear header; it does not authenticate anything.
func ParseHeader(b []byte) (Header, error) {
	if len(b) < HeaderLen+TagLen || b[0]>>4 != version || b[2] != 0 || b[3] != 0 {
		return Header{}, ErrMalformed
	}
	h := Header{Type: b[0] & 0x0f, PathID: b[1], PeerID: binary.BigEndian.Uint32(b[4:8]),
		Epoch: binary.BigEndian.Uint64(b[8:16]), PathSeq: binary.BigEndian.Uint64(b[16:24])}
	if h.Type != TypeData && h.Type != TypeAck {
		return Header{}, ErrMalformed
	}
	return h, nil
}

// PutHeader writes h into b[:HeaderLen].
func PutHeader(b []byte, h Header) {
	b[0] = version<<4 | h.Type
	b[1] = h.PathID
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
	mac.Write([]byte("mts-tunnel v1"))
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

func nonce(h []byte) [12]byte {
	var n [12]byte
	n[3] = h[1] // path id
	copy(n[4:], h[16:24])
	return n
}

// Seal appends the sealed body to the header in dst[:HeaderLen] and returns the datagram.
// dst must have room for HeaderLen+len(body)+TagLen; body may alias dst[HeaderLen:].
func (k *Key) Seal(dst []byte, body []byte) []byte {
	n := nonce(dst)
	return k.aead.Seal(dst[:HeaderLen], n[:], body, dst[:HeaderLen])
}

// Open authenticates a datagram and decrypts its body in place.
func (k *Key) Open(b []byte) ([]byte, error) {
	n := nonce(b)
	return k.aead.Open(b[HeaderLen:HeaderLen], n[:], b[HeaderLen:], b[:HeaderLen])
}

// Ack is an ack body.
type Ack struct {
	Largest  uint64
	Bitmap   uint64 // bit i: Largest-1-i was received
	EchoTime int64  // the sender's send time of Largest
	Delay    int64  // ns between Largest's arrival and this ack
}

// PutAck writes a into b[:AckBodyLen].
func PutAck(b []byte, a Ack) {
	binary.BigEndian.PutUint64(b[0:8], a.Largest)
	binary.BigEndian.PutUint64(b[8:16], a.Bitmap)
	binary.BigEndian.PutUint64(b[16:24], uint64(a.EchoTime))
	binary.BigEndian.PutUint64(b[24:32], uint64(a.Delay))
}

// ParseAck reads an ack body.
func ParseAck(b []byte) (Ack, error) {
	if len(b) != AckBodyLen {
		return Ack{}, ErrMalformed
	}
	return Ack{Largest: binary.BigEndian.Uint64(b[0:8]), Bitmap: binary.BigEndian.Uint64(b[8:16]),
		EchoTime: int64(binary.BigEndian.Uint64(b[16:24])), Delay: int64(binary.BigEndian.Uint64(b[24:32]))}, nil
}

// PutDataBody writes a data body's fixed part into b[:DataBodyLen].
func PutDataBody(b []byte, dataSeq uint64, sent int64) {
	binary.BigEndian.PutUint64(b[0:8], dataSeq)
	binary.BigEndian.PutUint64(b[8:16], uint64(sent))
}

// ParseDataBody splits a data body.
func ParseDataBody(b []byte) (dataSeq uint64, sent int64, packet []byte, err error) {
	if len(b) < DataBodyLen {
		return 0, 0, nil, ErrMalformed
	}
	return binary.BigEndian.Uint64(b[0:8]), int64(binary.BigEndian.Uint64(b[8:16])), b[DataBodyLen:], nil
}
