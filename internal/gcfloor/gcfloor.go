// Package gcfloor lets the limiter's heap grow to a floor before Go's
// garbage collector runs, while the live heap is small.
//
// A limiter keeps a few MiB alive and allocates a few KiB per decision
// (most of it in gRPC's and kafka-go's code), so with Go's default
// (GOGC=100: collect when the heap has doubled) it collected many times a
// second: about a tenth of its CPU over gRPC. Start runs bytedance/gopkg's
// gctuner: after each collection GOGC is set so that the next one comes
// when the heap reaches Floor, between 100 and 500; once the heap in use
// passes half the floor it is 100, so large heaps (local-mode state, a
// full over-limit cache) cost no more memory than with the default. The
// detector and the archiver measured the same with and without the floor,
// so they run without.
package gcfloor

import "github.com/bytedance/gopkg/util/gctuner"

// Floor is the heap size below which the collector waits longer than
// GOGC=100 would.
const Floor = 64 << 20

// GOGC bounds of the tuner: never below Go's default, at most 5× the live
// heap.
const (
	minPercent = 100
	maxPercent = 500
)

// Start turns the floor on for this process unless the operator has set
// GOGC or GOMEMLIMIT (read through getenv), which then rule the collector
// alone. It reports whether it did.
func Start(getenv func(string) string) bool {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return false
	}
	gctuner.SetMinGCPercent(minPercent)
	gctuner.SetMaxGCPercent(maxPercent)
	gctuner.Tuning(Floor)
	return true
}

// Stop turns the floor off; GOGC stays where the tuner last put it.
func Stop() { gctuner.Tuning(0) }
