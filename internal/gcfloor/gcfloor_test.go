package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// gcPercent reads GOGC as the runtime has it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestStart(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() {
		Stop()
		debug.SetGCPercent(before)
	})

	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		if Start(func(k string) string {
			if k == v {
				return "200"
			}
			return ""
		}) {
			t.Fatalf("Start with %s set reported the floor on", v)
		}
		runtime.GC()
		runtime.GC()
		if got := gcPercent(); got != before {
			t.Fatalf("with %s set, GOGC = %d after a collection, want the runtime's %d untouched", v, got, before)
		}
	}

	// This test's live heap is a few MiB, far below the floor: the tuner
	// raises GOGC to its most once a collection has run its finalizer.
	if !Start(func(string) string { return "" }) {
		t.Fatal("Start without GOGC or GOMEMLIMIT reported the floor off")
	}
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != maxPercent {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d ten seconds after collections began, want %d for a heap far below %d bytes", gcPercent(), maxPercent, Floor)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
