package redisstore

import (
	"context"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterReservations runs the reservation scenarios with keys spread
// over the three primaries, a call at a time, against the scenarios and
// the model: a reservation's record shares its state key's hash tag, so a
// take and its settle reach the same primary, and both keys expire.
func testClusterReservations(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	store := New(e.Client)
	if err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	scenarios := decidetest.ReserveScenarios()
	prefix := redistest.Prefix(t, e.Client)
	subjects := e.Spread(t, len(scenarios), stateKey)
	for n, s := range scenarios {
		t.Run(s.Name, func(t *testing.T) {
			stepScenario(t, s, decidetest.Keys(prefix, subjects[n]), decideOne(ctx, store))
		})
	}
	redistest.RequireExpiry(t, e.Client, prefix)
}
