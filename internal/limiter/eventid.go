package limiter

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// newEventID returns a time-ordered UUID (version 7, RFC 9562), which keeps
// the archive's event_id index append-friendly: 48 bits of Unix time in
// milliseconds, then 12 bits of the millisecond's fraction (RFC 9562
// section 6.2, method 3), so that the ids of one process are strictly
// increasing, then 62 random bits. It costs one allocation, the string.
// The random bits come from the runtime's generator (math/rand/v2: ChaCha8
// seeded from the system's entropy, per thread, no system call), not
// crypto/rand, whose read was most of an id's cost on the leased path: they
// only tell apart the processes that may stamp the same instant (one
// process's stamps never repeat), and an id is no secret.
func (c *v7Clock) newEventID() string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[8:], rand.Uint64())
	stamp := c.next(time.Now())
	ms, frac := stamp>>12, stamp&0xfff
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6], u[7] = 0x70|byte(frac>>8), byte(frac) // version 7
	u[8] = 0x80 | u[8]&0x3f                     // variant 10
	return formatUUID(&u)
}

// v7Clock hands out strictly increasing UUIDv7 stamps; each Service has
// its own (the ids of one process are increasing per Service).
type v7Clock struct{ last atomic.Int64 }

// next returns now as Unix milliseconds << 12 | the millisecond's fraction
// in 4096ths, or one more than the last stamp returned when that is not
// larger (several ids in one 244 ns step, or a clock set back).
func (c *v7Clock) next(now time.Time) int64 {
	ns := now.UnixNano()
	stamp := ns/int64(time.Millisecond)<<12 | (ns%int64(time.Millisecond))<<12/int64(time.Millisecond)
	for {
		last := c.last.Load()
		next := max(stamp, last+1)
		if c.last.CompareAndSwap(last, next) {
			return next
		}
	}
}

// formatUUID returns u in the canonical form, 8-4-4-4-12 lowercase hex
// digits.
func formatUUID(u *[16]byte) string {
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0xf]
		j += 2
	}
	return string(b[:])
}
