package redisfleet

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/detect"
	"github.com/ratewarden/ratewarden/internal/detect/detecttest"
	"github.com/ratewarden/ratewarden/internal/event"
)

// detectT0 is the instant the tests count from: now, as for detecttest's
// scenarios. Expiries derived from a fixed date would be in the past once
// that date passed, and Redis would drop the keys at once.
var detectT0 = detecttest.T0

// banClaim is the detector's claim of a one-hour ban of scope and subject
// at ts, escalated ×2 for each earlier ban of the day (detecttest.Escalation).
func banClaim(scope, subject string, ts time.Time) detect.Claim {
	c := detecttest.BanClaim(detect.BanID(scope, subject, "scan", ts.Format(time.RFC3339Nano)), 0, 3600)
	c.Ban.TS, c.Ban.Scope, c.Ban.Subject = ts, scope, subject
	return c
}

func claim(tb testing.TB, l detect.Ledger, c detect.Claim) detect.Outcome {
	tb.Helper()
	out, err := l.Claim(context.Background(), c)
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return out
}

func settle(tb testing.TB, l detect.Ledger, b event.Ban, enforce bool) {
	tb.Helper()
	if err := l.Settle(context.Background(), b, enforce); err != nil {
		tb.Fatalf("settle: %v", err)
	}
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
