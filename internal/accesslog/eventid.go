package accesslog

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// EventID returns the event id of the line at src: a UUID (RFC 9562
// version 8, 36 bytes) made of the SHA-256 of the topic, partition and
// offset. A line delivered again at the same offset gets the same id, so
// the detector and the archiver count it once; the same line shipped twice
// (a shipper restarted mid-file) sits at two offsets and gets two.
func EventID(src Source) string {
	h := sha256.New()
	h.Write([]byte("ratewarden access log\x00"))
	h.Write([]byte(src.Topic))
	var b [1 + 8 + 8]byte // 0 ends the topic, which has no NUL
	binary.BigEndian.PutUint64(b[1:], uint64(int64(src.Partition)))
	binary.BigEndian.PutUint64(b[9:], uint64(src.Offset))
	h.Write(b[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	u := sum[:16]
	u[6] = u[6]&0x0f | 0x80 // version 8
	u[8] = u[8]&0x3f | 0x80 // variant 10
	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], u[10:16])
	return string(out[:])
}
