package redisstore

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// stateKey is the key that places a subject's decision keys (they share its
// hash tag).
func stateKey(subject string) string { return decidetest.Keys("", subject).State }

// testClusterDecide runs every scenario of every algorithm with keys spread
// over the three primaries: one call at a time, then step i of every
// scenario in one Decide (one pipeline across every primary), then
// concurrent multi-node batches. Results must equal the scenarios' and the
// reference model's, as on a single server.
func testClusterDecide(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	store := New(e.Client)
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	scenarios := slices.DeleteFunc(decidetest.Scenarios(), countedBackwards)
	subjects := e.Spread(t, len(scenarios), stateKey)

	t.Run("one call at a time", func(t *testing.T) {
		prefix := redistest.Prefix(t, e.Client)
		for n, s := range scenarios {
			t.Run(s.Name, func(t *testing.T) {
				stepScenario(t, s, decidetest.Keys(prefix, subjects[n]), decideOne(ctx, store))
			})
		}
		written := redistest.Keys(t, e.Client, prefix)
		e.RequireSpread(t, written)
		if n := redistest.RequireExpiry(t, e.Client, prefix); n < len(scenarios) {
			t.Errorf("%d keys written for %d scenarios", n, len(scenarios))
		}
	})

	t.Run("one pipeline across primaries", func(t *testing.T) {
		prefix := redistest.Prefix(t, e.Client)
		models := make([]*decide.Memory, len(scenarios))
		for n := range models {
			models[n] = decide.NewMemory()
		}
		for i := 0; ; i++ {
			var calls []decide.Call
			var from []int // the scenario of each call
			for n, s := range scenarios {
				if i < len(s.Steps) {
					calls = append(calls, s.Call(decidetest.Keys(prefix, subjects[n]), i))
					from = append(from, n)
				}
			}
			if len(calls) == 0 {
				break
			}
			if i == 0 {
				states := make([]string, len(calls))
				for j, c := range calls {
					states[j] = c.Keys.State
				}
				e.RequireSpread(t, states)
			}
			got, err := store.Decide(ctx, calls)
			if err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			for j, c := range calls {
				s := scenarios[from[j]]
				if want := s.Steps[i].Want; got[j] != want {
					t.Errorf("%s step %d:\n got  %+v\n want %+v", s.Name, i, got[j], want)
				}
				if ref := models[from[j]].Decide(c, 0); got[j] != ref {
					t.Errorf("%s step %d: redis and model differ\n redis %+v\n model %+v", s.Name, i, got[j], ref)
				}
			}
		}
	})

	t.Run("concurrent batches across primaries", func(t *testing.T) {
		clusterExactUnderConcurrency(t, e, store)
	})
}

// clusterExactUnderConcurrency sends, from 100 goroutines, 3 Decide calls
// each carrying one call per algorithm, the four keys on three primaries:
// every key admits exactly its limit of 100, as no pipeline split across
// nodes may lose or repeat a call.
func clusterExactUnderConcurrency(t *testing.T, e *redistest.SharedCluster, store *Store) {
	prefix := redistest.Prefix(t, e.Client)
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	subjects := e.Spread(t, len(algs), stateKey)
	batch := make([]decide.Call, len(algs))
	states := make([]string, len(algs))
	for i, alg := range algs {
		// A fixed clock keeps every call in one window, whatever the time.
		batch[i] = decide.Call{Keys: decidetest.Keys(prefix, subjects[i]), Algorithm: alg, NowMs: 5_000_000, Cost: 1,
			Limits: []decide.Limit{{Requests: 100, Rate: 1, Burst: 100, Per: time.Hour}}}
		states[i] = batch[i].Keys.State
	}
	e.RequireSpread(t, states)
	admitted := make([]atomic.Int64, len(algs))
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			for range 3 {
				got, err := store.Decide(context.Background(), batch)
				if err != nil {
					failed.Add(1)
					continue
				}
				for i, r := range got {
					if r.Allowed {
						admitted[i].Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d batches failed", n)
	}
	for i, alg := range algs {
		if n := admitted[i].Load(); n != 100 {
			t.Errorf("%s: admitted %d of 300, want 100", alg, n)
		}
	}
}
