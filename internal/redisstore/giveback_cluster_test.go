package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterGiveBack decides a call of every algorithm and layout on the
// servers' clocks, with keys spread over the three primaries, and gives
// them all back in one Store.GiveBack (one pipeline across the primaries),
// on nodes whose script caches were flushed (the EVAL fallback): each key
// then admits its whole limit, as if the call had never been made.
func testClusterGiveBack(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	store := New(e.Client)
	window := []decide.Limit{{Requests: 5, Per: 24 * time.Hour}}
	bucket := []decide.Limit{{Rate: 1, Per: 24 * time.Hour, Burst: 5}}
	rules := map[string]decide.Call{
		"fixed window":   {Algorithm: decide.FixedWindow, Limits: window, Penalty: time.Minute},
		"counted":        {Algorithm: decide.FixedWindow, Limits: window},
		"sliding log":    {Algorithm: decide.SlidingWindow, Limits: window},
		"counter":        {Algorithm: decide.SlidingWindowCounter, Limits: window},
		"token bucket":   {Algorithm: decide.TokenBucket, Limits: bucket},
		"leased fixed":   {Algorithm: decide.FixedWindow, Limits: window, Leased: true},
		"leased counter": {Algorithm: decide.SlidingWindowCounter, Limits: window, Leased: true},
		"leased bucket":  {Algorithm: decide.TokenBucket, Limits: bucket, Leased: true},
	}
	subjects := e.Spread(t, len(rules), stateKey)
	prefix := redistest.Prefix(t, e.Client)
	for _, n := range e.Cluster.Nodes {
		if err := n.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("script flush on %s: %v", n.Addr, err)
		}
	}
	// A day's windows: none turns during the test unless it runs across
	// midnight, server time.
	if now, err := e.Client.Time(ctx).Result(); err == nil && 24*time.Hour-time.Duration(now.UnixMilli()%86_400_000)*time.Millisecond < time.Minute {
		time.Sleep(time.Minute)
	}
	var names []string
	var gs []decide.GiveBack
	i := 0
	for name, rule := range rules {
		rule.Keys, rule.Cost = decidetest.Keys(prefix, subjects[i]), 2
		i++
		if rule.Leased {
			rule.Lease.Ask = 2
		}
		r, err := store.Decide(ctx, []decide.Call{rule})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g, ok := decide.GiveBackOf(rule, r[0])
		if !ok || (rule.Leased && r[0].Granted == 0) {
			t.Fatalf("%s: %+v: nothing to give back, or nothing lent", name, r[0])
		}
		names, gs = append(names, name), append(gs, g)
	}
	units, errs := store.GiveBack(ctx, gs)
	if errs != nil {
		t.Fatalf("give-backs: %v", errs)
	}
	for j, g := range gs {
		if units[j] != g.Units() {
			t.Errorf("%s: gave back %d units of %d", names[j], units[j], g.Units())
		}
		c := g.Call
		c.Cost, c.Lease, c.NowMs = 1, decide.Lease{}, 0
		admitted := 0
		for admitted <= 10 {
			r, err := store.Decide(ctx, []decide.Call{c})
			if err != nil {
				t.Fatalf("%s: %v", names[j], err)
			}
			if !r[0].Allowed {
				break
			}
			admitted++
		}
		if admitted != 5 {
			t.Errorf("%s: %d admitted after the give-back, want the whole limit of 5", names[j], admitted)
		}
	}
}
