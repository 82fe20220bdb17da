package rules

import (
	"math"
	"regexp"
	"testing"
	"time"
)

// Every duration is written in the shortest form the rules file would use,
// and reads back as itself: parse(format(d)) == d.
func TestDurationString(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{time.Nanosecond, "1ns"},
		{1500 * time.Nanosecond, "1500ns"},
		{2 * time.Microsecond, "2us"},
		{500 * time.Millisecond, "500ms"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1.5s"},
		{time.Second + time.Nanosecond, "1.000000001s"},
		{30 * time.Second, "30s"},
		{time.Minute, "1m"},
		{90 * time.Second, "1m30s"},
		{time.Minute + 250*time.Millisecond, "1m250ms"},
		{5 * time.Minute, "5m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{time.Hour + 30*time.Second, "1h30s"},
		{24 * time.Hour, "24h"},
		{-time.Minute, "-1m"},
		{-1500 * time.Millisecond, "-1.5s"},
		{math.MaxInt64, "2562047h47m16.854775807s"},
		{math.MinInt64, "-2562047h47m16.854775808s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := Duration(tt.d).String(); got != tt.want {
				t.Errorf("Duration(%d).String() = %q, want %q", int64(tt.d), got, tt.want)
			}
			if back, err := parseDuration(tt.want); err != nil || back != Duration(tt.d) {
				t.Errorf("parse(%q) = %d (%v), want %d", tt.want, int64(back), err, int64(tt.d))
			}
		})
	}
}

// zeroUnit finds a unit of zero in a duration (the 0m of 1h0m30s).
var zeroUnit = regexp.MustCompile(`(^|[^0-9.])0[hmsun]`)

func FuzzDurationRoundTrip(f *testing.F) {
	for _, d := range []int64{0, 1, 1500, int64(time.Minute), int64(90 * time.Minute), -int64(time.Second), math.MaxInt64, math.MinInt64} {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, n int64) {
		s := Duration(n).String()
		back, err := parseDuration(s)
		if err != nil || int64(back) != n {
			t.Fatalf("%d written %q, read back %d (%v)", n, s, int64(back), err)
		}
		if s != "0s" && zeroUnit.MatchString(s) {
			t.Fatalf("%d written %q, with a zero unit", n, s)
		}
	})
}
