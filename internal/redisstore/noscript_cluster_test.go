package redisstore

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterNoScript: every node has its own script cache. Decisions
// survive nodes that never had the scripts, Load fills every primary, and
// after SCRIPT FLUSH on one primary only the calls on that primary fall
// back to EVAL (single calls and pipelines across primaries alike).
func testClusterNoScript(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	store := New(e.Client)
	prefix := redistest.Prefix(t, e.Client)
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	// Call i runs algorithm i mod 4 on primary i mod 3; 6 calls put 2 on
	// each primary.
	subjects := e.Spread(t, 6, stateKey)
	batch := make([]decide.Call, len(subjects))
	for i, s := range subjects {
		batch[i] = decide.Call{Keys: decidetest.Keys(prefix, s), Algorithm: algs[i%len(algs)], NowMs: 7_000_000, Cost: 1,
			Limits: []decide.Limit{{Requests: 10, Rate: 1, Burst: 10, Per: time.Hour}}}
		if batch[i].Counted() { // a penalty makes it a script's call
			batch[i].Penalty = time.Second
		}
	}
	model := decide.NewMemory()
	// run decides calls on the cluster and the model, and requires that
	// EVAL ran evals[p] times on primary p meanwhile: the fallback, exactly
	// where a script was missing.
	run := func(t *testing.T, calls []decide.Call, evals [3]int) {
		t.Helper()
		before := e.EvalCounts(t)
		got, err := store.Decide(ctx, calls)
		if err != nil {
			t.Fatal(err)
		}
		after := e.EvalCounts(t)
		for p := range after {
			if n := after[p] - before[p]; n != evals[p] {
				t.Errorf("primary %d (%s) ran EVAL %d times, want %d", p, e.Primaries[p].Addr, n, evals[p])
			}
		}
		for i, c := range calls {
			if ref := model.Decide(c, 0); got[i] != ref {
				t.Errorf("call %d (%s): redis %+v, model %+v", i, c.Algorithm, got[i], ref)
			}
		}
	}
	flush := func(t *testing.T, nodes ...*redistest.Node) {
		t.Helper()
		for _, n := range nodes {
			if err := n.Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("script flush on %s: %v", n.Addr, err)
			}
		}
	}

	t.Run("nodes that never had the scripts", func(t *testing.T) {
		flush(t, e.Cluster.Nodes...)
		run(t, batch, [3]int{2, 2, 2})
		run(t, batch, [3]int{}) // the fallback cached them
	})

	t.Run("load reaches every primary", func(t *testing.T) {
		flush(t, e.Cluster.Nodes...)
		if err := store.Load(ctx); err != nil {
			t.Fatal(err)
		}
		shas := digests(store)
		// Replicas get the scripts only when CLUSTER SLOTS lists them, which
		// Redis 7 does once they report a replication offset: not on a
		// cluster that has had no writes yet. The failover subtest covers a
		// promoted replica without them.
		for _, n := range e.Primaries {
			exist, err := n.Client().ScriptExists(ctx, shas...).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := slices.Repeat([]bool{true}, len(shas)); !reflect.DeepEqual(exist, want) {
				t.Errorf("primary %s has scripts %v, want %v", n.Addr, exist, want)
			}
		}
		run(t, batch, [3]int{})
	})

	victim := e.Primaries[0]
	t.Run("one primary flushed, single call", func(t *testing.T) {
		flush(t, victim)
		run(t, batch[:1], [3]int{1, 0, 0})
		run(t, batch[1:3], [3]int{}) // the other primaries kept theirs
	})

	t.Run("one primary flushed, pipeline across primaries", func(t *testing.T) {
		flush(t, victim)
		run(t, batch, [3]int{2, 0, 0})
		run(t, batch, [3]int{})
	})
}
