package redisstore

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/decide/decidetest"
	"github.com/ratewarden/ratewarden/internal/detect"
	"github.com/ratewarden/ratewarden/internal/detect/detecttest"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redistest"
)

// testClusterNoScript: every node has its own script cache. Decisions
// survive nodes that never had the scripts, Load fills every primary, and
// after SCRIPT FLUSH on one primary only the calls on that primary fall
// back to EVAL (single calls and pipelines across primaries alike), as do
// the detector's scripts.
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

	t.Run("one primary flushed, detector scripts", func(t *testing.T) {
		ips := e.Spread(t, 3, func(s string) string {
			return offenderTag("", detect.Offender{Scope: event.ScopeIP, Subject: s}) + ":v"
		})
		w, l := NewWindows(e.Client, prefix), NewLedger(e.Client, prefix, nil)
		mem := detecttest.NewMemoryWindows()
		// record sends, in one pipeline, a sighting of each offender and its
		// redelivery, then claims a ban of ips[0], on the victim.
		record := func(t *testing.T, round int) {
			t.Helper()
			var sightings []detect.Sighting
			for i, ip := range ips {
				s := sight(fmt.Sprintf("e%d-%s", round, ip), time.Duration(round*10+i)*time.Second, "/a", true)
				s.Offender.Subject = ip
				sightings = append(sightings, s, s)
			}
			got, err := w.Record(ctx, testSpec, sightings)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := mem.Record(ctx, testSpec, sightings)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round %d: tallies\n got %+v\nwant %+v", round, got, want)
			}
			c := claimAt(detectT0, event.ActionBan, ips[0], "scan", time.Duration(round)*24*time.Hour)
			if out, err := l.Claim(ctx, c); err != nil || !out.Publish {
				t.Errorf("round %d: claim on the victim: %+v, %v; want a new ban", round, out, err)
			}
		}
		record(t, 0) // caches both scripts where they are missing
		flush(t, victim)
		before := e.EvalCounts(t)
		record(t, 1)
		after := e.EvalCounts(t)
		// Two sightings and the claim on the victim; none elsewhere.
		if got, want := [3]int{after[0] - before[0], after[1] - before[1], after[2] - before[2]}, [3]int{3, 0, 0}; got != want {
			t.Errorf("EVAL ran %v times per primary, want %v", got, want)
		}
	})
}
