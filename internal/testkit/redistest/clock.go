package redistest

import (
	"testing"
	"time"
)

// ForEachClock runs test with t0 and with t0 a year either side of it: an
// adapter that takes its clock from its caller (the detector, the admin
// API), which need not agree with Redis's, must hand Redis what holds
// whatever the offset (a year behind would expire every absolute instant
// at once; a year ahead would keep every key a year).
func ForEachClock(t *testing.T, t0 time.Time, test func(t *testing.T, t0 time.Time)) {
	const year = 365 * 24 * time.Hour
	for _, c := range []struct {
		name   string
		offset time.Duration
	}{{"clock a year behind redis", -year}, {"clock in step with redis", 0}, {"clock a year ahead of redis", year}} {
		t.Run(c.name, func(t *testing.T) { test(t, t0.Add(c.offset)) })
	}
}
