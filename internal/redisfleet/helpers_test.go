package redisfleet

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// detectT0 is the instant the tests count from: now, as for abusetest's
// scenarios. Expiries derived from a fixed date would be in the past once
// that date passed, and Redis would drop the keys at once.
var detectT0 = abusetest.T0

// banClaim is the detector's claim of a one-hour ban of scope and subject
// at ts, escalated ×2 for each earlier ban of the day (abusetest.Escalation).
func banClaim(scope, subject string, ts time.Time) abuse.Claim {
	c := abusetest.BanClaim(abuse.BanID(scope, subject, "scan", ts.Format(time.RFC3339Nano)), 0, 3600)
	c.Ban.TS, c.Ban.Scope, c.Ban.Subject = ts, scope, subject
	return c
}

func wait[T any](tb testing.TB, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		tb.Fatalf("nothing received within 5 s")
		panic("unreachable")
	}
}
