package redisstore

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/detect/detecttest"
)

// detectT0 is the instant the detection tests count from: now, as for the
// shared scenarios. Expiries derived from a fixed date would be in the past
// once that date passed, and Redis would drop the keys at once.
var detectT0 = detecttest.T0

// forEachClock runs test with t0 at detectT0 and a year either side of it:
// the blacklist and the ledger take their clock from the detector or the
// admin API, which need not agree with Redis's, so what they hand Redis
// must hold whatever the offset (a year behind would expire every absolute
// instant at once; a year ahead would keep every key a year).
func forEachClock(t *testing.T, test func(t *testing.T, t0 time.Time)) {
	const year = 365 * 24 * time.Hour
	for _, c := range []struct {
		name   string
		offset time.Duration
	}{{"clock a year behind redis", -year}, {"clock in step with redis", 0}, {"clock a year ahead of redis", year}} {
		t.Run(c.name, func(t *testing.T) { test(t, detectT0.Add(c.offset)) })
	}
}
