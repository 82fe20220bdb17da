package abuse

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"strconv"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// BanID derives the id of a ban or warning from what identifies one
// detection: the offender (scope, subject), the detection rule (reason) and
// the event that crossed the threshold (trigger, its event_id). The same
// detection, redelivered or replayed, always gets the same id, so consumers
// can deduplicate a republished message; the next ban of the offender by
// the same rule is triggered by a later event and gets an id of its own.
// (An id anchored on the start of the window gave a repeat ban within one
// window the id of the first: escalation, which counts ids, stalled, and
// the archiver dropped the later ban as a duplicate.) The id is the first
// 128 bits of a SHA-256 over the length-prefixed fields, formatted as an
// RFC 9562 version 8 (custom) UUID. The engine passes "warn/"+reason for
// warnings, so a warning never shares an id with a ban.
func BanID(scope, subject, reason, trigger string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range [...]string{scope, subject, reason, trigger} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return event.HashID(sum[:])
}

// ViolationReason is the reason of a violation ban or warning over a window
// of length within: "violations_" and the window in its largest whole unit
// ("violations_1h", "violations_5m", "violations_90s", "violations_500ms").
func ViolationReason(within time.Duration) string {
	return "violations_" + compactDuration(within)
}

// compactDuration writes d in its largest whole unit: 1h, 90m, 90s, 500ms.
func compactDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range [...]struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "us"}} {
		if d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// DurationMs is the escalated length in milliseconds of a ban whose base
// length is baseMs, for an offender with n earlier bans within the period:
// baseMs × Factor^n, at most Cap, computed in saturating integer
// arithmetic. A Factor below 1 counts as 1; a Cap of zero or less means no
// cap.
func (e Escalation) DurationMs(baseMs, n int64) int64 {
	capMs := e.Cap.Milliseconds()
	if capMs <= 0 {
		capMs = math.MaxInt64
	}
	d := max(baseMs, 0)
	for i := int64(0); i < n && e.Factor > 1 && d < capMs && d > 0; i++ {
		if d > math.MaxInt64/e.Factor {
			d = math.MaxInt64
			break
		}
		d *= e.Factor
	}
	return min(d, capMs)
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
