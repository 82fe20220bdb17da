package accesslog

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/ratewarden/ratewarden/internal/event"
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
	return event.HashID(sum[:])
}
