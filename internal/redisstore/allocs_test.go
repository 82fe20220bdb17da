package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/decide/decidetest"
)

// TestCoalescerAllocations pins the allocations of one decision call sent
// alone through the coalescer to the real Redis, so that a change that adds
// some fails make test. A round trip of one call pays in full what calls
// sharing a pipeline share: go-redis checking the pooled connection (3),
// the slices of commands and of scripts (2). The call costs its command and
// its reply (2) and, of a lean script, the period of each limit boxed
// (appendLean: KEYS and the other ARGV go in as pointers into the call).
// Raise the bound only for a reason worth an allocation on every decision.
//
// Under the race detector sync.Pool drops objects at random, so the counts
// vary: make test runs this test again without it (make allocs).
func TestCoalescerAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocations are counted without the race detector (make allocs)")
	}
	client := newClient(t, redisAddr())
	co := NewCoalescer(New(client), CoalesceConfig{})
	defer co.Close()
	calls := []decide.Call{{
		Keys: decidetest.Keys(testPrefix(t, client), "allocs"), Algorithm: decide.SlidingWindow, Cost: 1,
		Limits: []decide.Limit{{Requests: 1_000_000, Per: time.Second}},
	}}
	results := make([]decide.Result, 1)
	ctx := context.Background()
	decideOnce := func() {
		if err := co.DecideInto(ctx, calls, results); err != nil || !results[0].Allowed {
			t.Fatalf("%+v, %v", results[0], err)
		}
	}
	decideOnce() // the script cached, the connection dialed
	const want = 8
	if got := testing.AllocsPerRun(500, decideOnce); got > want {
		t.Errorf("%v allocations per call alone in its round trip, want at most %v", got, want)
	} else {
		t.Logf("%v allocations per call alone in its round trip", got)
	}
}
