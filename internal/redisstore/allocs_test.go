package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestCoalescerAllocations pins the allocations of one decision call sent
// alone through the coalescer to the real Redis, so that a change that adds
// some fails make test. A round trip of one call pays in full what calls
// sharing a pipeline share: go-redis checking the pooled connection (3),
// the slice of commands (1; the calls' is pooled). The call costs its command and
// its reply (2) and, of a lean script, the period of each limit boxed
// (appendLean: KEYS and the other ARGV go in as pointers into the call).
// Raise the bound only for a reason worth an allocation on every decision.
//
// Under the race detector sync.Pool drops objects at random, so the counts
// vary: make test runs this test again without it (make allocs).
func TestCoalescerAllocations(t *testing.T) {
	if testkit.RaceDetector {
		t.Skip("allocations are counted without the race detector (make allocs)")
	}
	client := newClient(t, redisAddr())
	// As the limiter runs it: late replies read on and given back.
	co := NewCoalescer(New(client), CoalesceConfig{Timeout: time.Second, LateWait: time.Second})
	defer co.Close()
	prefix := testPrefix(t, client)
	for _, tc := range []struct {
		alg  decide.Algorithm
		want float64
	}{
		{decide.SlidingWindow, 7},
		// counted (no script): INCRBY, PEXPIRE and the window's key (3), and
		// alone a pipeline round trip rather than one command (the
		// pipeline's queue and go-redis's error check: 3 more, which calls
		// that share a round trip share)
		{decide.FixedWindow, 10},
	} {
		t.Run(string(tc.alg), func(t *testing.T) {
			calls := []decide.Call{{
				Keys: decidetest.Keys(prefix, "allocs"+string(tc.alg)), Algorithm: tc.alg, Cost: 1,
				Limits: []decide.Limit{{Requests: 1_000_000, Per: time.Second}},
			}}
			results := make([]decide.Result, 1)
			ctx := context.Background()
			decideOnce := func() {
				if err := co.DecideInto(ctx, calls, results); err != nil || !results[0].Allowed {
					t.Fatalf("%+v, %v", results[0], err)
				}
			}
			decideOnce() // the script cached, the connection dialed, the clock sampled
			if got := testing.AllocsPerRun(500, decideOnce); got > tc.want {
				t.Errorf("%v allocations per call alone in its round trip, want at most %v", got, tc.want)
			} else {
				t.Logf("%v allocations per call alone in its round trip", got)
			}
		})
	}
}
