// Package gcfloor lets the limiter's heap grow to a floor before Go's
// garbage collector runs, while the live heap is small.
//
// A limiter keeps a few MiB alive and allocates a few KiB per decision
// (most of it in gRPC's and kafka-go's code), so with Go's default
// (GOGC=100: collect when the heap has doubled) it collected many times a
// second: about a tenth of its CPU over gRPC. After each collection the
// floor sets GOGC so that the next one comes when the heap reaches Floor,
// between 100 and 500 (Percent): a live heap under a sixth of the floor
// is collected at six times its size, and from half the floor GOGC is
// Go's default, so large heaps (local-mode state, a full over-limit cache)
// cost no more memory than with the default. The detector and the archiver measured the same
// with and without the floor, so they run without.
//
// The live heap is the runtime's own count of what the last collection
// marked (runtime/metrics /gc/heap/live:bytes). bytedance/gopkg's gctuner,
// used before, read MemStats.HeapInuse instead, which right after a
// collection still counts the spans not yet swept: under load that is
// about the whole heap, and the heap settled near √(Floor × live) (21 MiB
// for a 7 MiB live heap, collecting 11 times a second under gRPC load)
// instead of at Floor.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Floor is the heap size below which the collector waits longer than
// GOGC=100 would.
const Floor = 64 << 20

// GOGC bounds of the floor: never below Go's default, at most 5× the live
// heap.
const (
	minPercent = 100
	maxPercent = 500
)

// liveHeap is the runtime metric of the heap the last collection marked.
const liveHeap = "/gc/heap/live:bytes"

// Percent is the GOGC under which a heap whose live part is live bytes is
// next collected at Floor, within minPercent and maxPercent.
func Percent(live uint64) int {
	if live == 0 {
		return maxPercent
	}
	if live >= Floor {
		return minPercent
	}
	return int(min(max((Floor-live)*100/live, minPercent), maxPercent))
}

// Tuner sets GOGC after every collection while it runs.
type Tuner struct {
	stopped atomic.Bool
	sample  []metrics.Sample // only the cleanup of one sentinel at a time uses it
	percent int              // the GOGC last set
}

// Start turns the floor on for this process unless the operator has set
// GOGC or GOMEMLIMIT (read through getenv), which then rule the collector
// alone: then it returns nil.
func Start(getenv func(string) string) *Tuner {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return nil
	}
	t := &Tuner{sample: []metrics.Sample{{Name: liveHeap}}}
	t.arm()
	return t
}

// Stop turns the floor off; GOGC stays where it last put it.
func (t *Tuner) Stop() { t.stopped.Store(true) }

// sentinel is the object whose collection says a cycle has run. It holds
// a pointer so that it is never one of the tiny allocations the runtime
// packs together, which can outlive a cycle.
type sentinel struct{ _ *Tuner }

// arm asks for afterGC once the next collection finds a fresh sentinel
// unreachable.
func (t *Tuner) arm() {
	runtime.AddCleanup(&sentinel{}, (*Tuner).afterGC, t)
}

func (t *Tuner) afterGC() {
	if t.stopped.Load() {
		return
	}
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		if p := Percent(t.sample[0].Value.Uint64()); p != t.percent {
			debug.SetGCPercent(p)
			t.percent = p
		}
	}
	t.arm()
}
