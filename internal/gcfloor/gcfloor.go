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
//
// Go scales by GOGC the goroutine stacks and globals the collection
// scanned as well as the live heap, so they count in GOGC's base: without
// them, thousands of goroutines beside a small heap (35 MiB of stacks,
// 1 MiB live) set a heap goal of 183 MiB, five times the stacks, where
// Go's default sets 37 MiB.
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

// The runtime metrics of the heap the last collection marked and of the
// other memory it scanned, which GOGC scales with it.
const (
	liveHeap    = "/gc/heap/live:bytes"
	stackScan   = "/gc/scan/stack:bytes"
	globalsScan = "/gc/scan/globals:bytes"
)

// Percent is the GOGC under which a heap whose live part is live bytes,
// beside scan bytes of stacks and globals, is next collected at Floor,
// within minPercent and maxPercent: Go's heap goal is
// live + (live + scan) × GOGC / 100.
func Percent(live, scan uint64) int {
	if live+scan == 0 {
		return maxPercent
	}
	if live >= Floor {
		return minPercent
	}
	return int(min(max((Floor-live)*100/(live+scan), minPercent), maxPercent))
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
	t := newTuner()
	t.arm()
	return t
}

func newTuner() *Tuner {
	return &Tuner{sample: []metrics.Sample{{Name: liveHeap}, {Name: stackScan}, {Name: globalsScan}}}
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
	t.tune()
	t.arm()
}

// tune sets GOGC from what the last collection marked.
func (t *Tuner) tune() {
	metrics.Read(t.sample)
	var v [3]uint64
	for i, s := range t.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return // a runtime without the metric: GOGC stays
		}
		v[i] = s.Value.Uint64()
	}
	if p := Percent(v[0], v[1]+v[2]); p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}
