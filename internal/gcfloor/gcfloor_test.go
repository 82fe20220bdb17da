package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
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
		name       string
		live, scan uint64
		want       int
	}{
		{"before the first collection", 0, 0, maxPercent},
		{"a small heap grows to six times its size", 4 << 20, 0, maxPercent},
		{"a sixth of the floor", Floor / 6, 0, maxPercent},
		{"between a sixth and a half: collected at the floor", 16 << 20, 0, 300},
		{"half the floor", Floor / 2, 0, minPercent},
		{"past the floor", 2 * Floor, 0, minPercent},
		{"stacks count in the base", 16 << 20, 8 << 20, 200},
		{"stacks alone past the floor", 1 << 20, Floor, minPercent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percent(c.live, c.scan); got != c.want {
				t.Fatalf("Percent(%d, %d) = %d, want %d", c.live, c.scan, got, c.want)
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

// deepStack holds about depth KiB of its goroutine's stack until stop.
func deepStack(depth int, ready *sync.WaitGroup, stop <-chan struct{}) byte {
	var frame [1 << 10]byte
	if depth == 0 {
		ready.Done()
		<-stop
		return frame[0]
	}
	return deepStack(depth-1, ready, stop) + frame[depth]
}

// TestFloorCountsStacks: Go's heap goal scales the goroutine stacks and
// globals it scanned by GOGC as it does the live heap, so thousands of
// goroutines beside a small heap (a gateway's connections, each served
// by its own) must not multiply their stacks by 5. The tuner, run by hand
// after a collection, must leave the goal at the floor.
func TestFloorCountsStacks(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() { debug.SetGCPercent(before) })
	stop := make(chan struct{})
	defer close(stop)
	var ready sync.WaitGroup
	for range 2000 {
		ready.Add(1)
		go deepStack(16, &ready, stop)
	}
	ready.Wait()

	runtime.GC()
	newTuner().tune()
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: stackScan}}
	metrics.Read(s)
	goal, stacks := s[0].Value.Uint64(), s[1].Value.Uint64()
	if stacks < 16<<20 {
		t.Fatalf("%d MiB of stacks scanned, want the 2000 goroutines' 16 MiB or more", stacks>>20)
	}
	// A collection of the test's own between tune and the read may move
	// the goal by what it marked since: a little slack.
	if goal > Floor+Floor/8 {
		t.Fatalf("heap goal %d MiB beside %d MiB of stacks, want the floor, %d MiB", goal>>20, stacks>>20, Floor>>20)
	}
}
