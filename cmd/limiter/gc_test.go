package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/bytedance/gopkg/util/gctuner"
)

// gcPercent reads GOGC as the runtime has it.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestTuneGC(t *testing.T) {
	before := gcPercent()
	t.Cleanup(func() {
		gctuner.Tuning(0) // stops the tuner
		debug.SetGCPercent(before)
	})

	for _, v := range []string{"GOGC", "GOMEMLIMIT"} {
		tuneGC(func(k string) string {
			if k == v {
				return "200"
			}
			return ""
		})
		runtime.GC()
		runtime.GC()
		if got := gcPercent(); got != before {
			t.Fatalf("with %s set, GOGC = %d after a collection, want the runtime's %d untouched", v, got, before)
		}
	}

	// This test's live heap is a few MiB, far below the floor: the tuner
	// raises GOGC to its most once a collection has run its finalizer.
	tuneGC(func(string) string { return "" })
	deadline := time.Now().Add(10 * time.Second)
	for gcPercent() != 500 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC = %d ten seconds after collections began, want 500 for a heap far below %d bytes", gcPercent(), gcHeapFloor)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
