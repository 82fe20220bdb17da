package detector

import (
	"fmt"
	"testing"
	"time"
)

func TestLogThrottle(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	th := newLogThrottle(time.Minute, 3)
	steps := []struct {
		name           string
		key            string
		at             time.Duration
		ok             bool
		wantSuppressed int
	}{
		{"first line of a key", "a", 0, true, 0},
		{"same key within the interval", "a", 10 * time.Second, false, 0},
		{"again", "a", 59 * time.Second, false, 0},
		{"another key", "b", 59 * time.Second, true, 0},
		{"interval passed: says how many were held", "a", time.Minute, true, 2},
		{"third key", "c", time.Minute, true, 0},
		{"full, none quiet: the overflow line", "d", time.Minute, true, 0},
		{"full: another key shares it", "e", time.Minute, false, 0},
		{"b is quiet again and forgotten: f takes its place", "f", 2 * time.Minute, true, 0},
	}
	for _, s := range steps {
		ok, suppressed := th.allow(s.key, t0.Add(s.at))
		if ok != s.ok || suppressed != s.wantSuppressed {
			t.Errorf("%s: allow(%q) = %v, %d; want %v, %d", s.name, s.key, ok, suppressed, s.ok, s.wantSuppressed)
		}
	}
	for i := range 10_000 {
		th.allow(fmt.Sprint("k", i), t0.Add(3*time.Minute))
	}
	if n := len(th.keys); n > 4 {
		t.Errorf("%d keys tracked, want at most 3 and the overflow", n)
	}
}
