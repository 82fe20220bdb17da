package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// gcPercent reads GOGC as the runtime has it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		name string
		live uint64
		want int
	}{
		{"before the first collection", 0, maxPercent},
		{"a small heap grows to six times its size", 4 << 20, maxPercent},
		{"a sixth of the floor", Floor / 6, maxPercent},
		{"between a sixth and a half: collected at the floor", 16 << 20, 300},
		{"half the floor", Floor / 2, minPercent},
		{"past the floor", 2 * Floor, minPercent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percent(c.live); got != c.want {
				t.Fatalf("Percent(%d) = %d, want %d", c.live, got, c.want)
			}
		})
	}
}

func TestStart(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })

	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		if Start(func(k string) string {
			if k == v {
				return "200"
			}
			return ""
		}) != nil {
			t.Fatalf("Start with %s set turned the floor on", v)
		}
		runtime.GC()
		runtime.GC()
		if got := gcPercent(); got != before {
			t.Fatalf("with %s set, GOGC = %d after a collection, want the runtime's %d untouched", v, got, before)
		}
	}
}

// keep holds the test's live heap where collections can see it.
var keep [][]byte

// TestFloorUnderChurn lets the collector run by itself, as it does under
// load, 4 MiB live and 1 GiB allocated. Collected at six times its live
// part (GOGC 500) or more (what the runtime counts as live includes what
// is allocated while it marks), the heap makes at least 20 MiB of room
// per collection; measured, 34 MiB. Reading the heap in use right after a
// collection, as gctuner did, counts the spans not yet swept: GOGC swung
// down to 100, and collections came every 13 to 15 MiB.
func TestFloorUnderChurn(t *testing.T) {
	before := gcPercent()
	keep = make([][]byte, 4<<10)
	for i := range keep {
		keep[i] = make([]byte, 1<<10)
	}
	tuner := Start(func(string) string { return "" })
	if tuner == nil {
		t.Fatal("Start without GOGC or GOMEMLIMIT left the floor off")
	}
	t.Cleanup(func() {
		tuner.Stop()
		keep = nil
		debug.SetGCPercent(before)
	})

	const allocated, room = 1 << 30, 24 << 20
	churn := func() uint32 {
		var stats runtime.MemStats
		runtime.ReadMemStats(&stats)
		first := stats.NumGC
		var b []byte
		for range allocated >> 10 {
			b = make([]byte, 1<<10)
		}
		_ = b
		runtime.ReadMemStats(&stats)
		return stats.NumGC - first
	}
	churn() // the floor's first collections
	if n := churn(); n > allocated/room {
		t.Fatalf("%d collections for 1 GiB allocated with 4 MiB live, want at most %d (one per 24 MiB)", n, allocated/room)
	}
}
