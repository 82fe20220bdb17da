package redisstore

import (
	"context"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterHolds runs the concurrency scenarios with keys spread over the
// three primaries, a call at a time, against the scenarios and the model;
// then TestHoldsExact's limiters (three cluster clients, each with a
// coalescer) on a key of each primary: a take and its release name one
// key, so they reach its primary wherever they are sent from.
func testClusterHolds(t *testing.T, e *redistest.SharedCluster) {
	prefix := runClusterScenarios(t, e, decidetest.HoldScenarios())

	var deciders []decider
	for range 3 {
		co := NewCoalescer(New(e.Cluster.Client(t)), CoalesceConfig{})
		t.Cleanup(co.Close)
		deciders = append(deciders, co.Decide)
	}
	for i, subject := range subjectsOn(t, e, prefix) {
		t.Run("exact on primary "+string(rune('0'+i)), func(t *testing.T) {
			holdsExact(t, deciders, decidetest.Keys(prefix, subject))
		})
	}
}

// runClusterScenarios runs scenarios with keys spread over the primaries,
// a call at a time, against the scenarios and the model, and requires
// every key left to expire. It returns the keys' prefix.
func runClusterScenarios(t *testing.T, e *redistest.SharedCluster, scenarios []decidetest.Scenario) string {
	ctx := context.Background()
	store := New(e.Client)
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t, e.Client)
	subjects := e.Spread(t, len(scenarios), stateKey)
	for n, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			stepScenario(t, s, decidetest.Keys(prefix, subjects[n]), decideOne(ctx, store))
		})
	}
	redistest.RequireExpiry(t, e.Client, prefix)
	return prefix
}
