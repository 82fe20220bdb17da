package evict

import (
	"maps"
	"testing"
)

func TestSampled(t *testing.T) {
	expiry := func(v int64) int64 { return v }
	tests := []struct {
		name  string
		m     map[string]int64
		now   int64
		freed int
		left  map[string]int64
	}{
		{"empty", map[string]int64{}, 10, 0, map[string]int64{}},
		{"expired go, live stay", map[string]int64{"a": 5, "b": 10, "c": 20}, 10, 2, map[string]int64{"c": 20}},
		{"else the soonest", map[string]int64{"a": 30, "b": 15, "c": 20}, 10, 1, map[string]int64{"a": 30, "c": 20}},
		{"one live entry", map[string]int64{"a": 30}, 10, 1, map[string]int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := maps.Clone(tt.m)
			if got := Sampled(m, tt.now, expiry); got != tt.freed || !maps.Equal(m, tt.left) {
				t.Errorf("Sampled = %d leaving %v; want %d leaving %v", got, m, tt.freed, tt.left)
			}
		})
	}
}

// TestSampledLooksAtAFewOnly: one eviction reads at most 8 entries, so it
// costs the same whatever the map's size; the soonest of those goes.
func TestSampledLooksAtAFewOnly(t *testing.T) {
	m := map[int]int64{}
	for i := range 10_000 {
		m[i] = int64(100 + i)
	}
	reads := 0
	if n := Sampled(m, 0, func(v int64) int64 { reads++; return v }); n != 1 || len(m) != 9_999 {
		t.Fatalf("Sampled removed %d, %d left", n, len(m))
	}
	if reads > samples {
		t.Errorf("read %d entries, want at most %d", reads, samples)
	}
}

// TestSampledNeverALiveOneWhileExpiredAreFound: of 10 entries, 5 expired,
// any sample of 8 holds at least 3 expired ones: those go, no live one.
func TestSampledNeverALiveOneWhileExpiredAreFound(t *testing.T) {
	for range 100 { // map order differs from run to run
		m := map[int]int64{0: -5, 1: -4, 2: -3, 3: -2, 4: -1, 5: 1, 6: 2, 7: 3, 8: 4, 9: 5}
		n := Sampled(m, 0, func(v int64) int64 { return v })
		for k := 5; k < 10; k++ {
			if _, ok := m[k]; !ok {
				t.Fatalf("live entry %d evicted while expired ones were there", k)
			}
		}
		if n < 3 || len(m) != 10-n {
			t.Fatalf("Sampled = %d, %d left; want at least 3 expired ones dropped", n, len(m))
		}
	}
}
