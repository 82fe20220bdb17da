package redisstore

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterReservations runs the reservation scenarios with keys spread
// over the three primaries, a call at a time, against the scenarios and
// the model: a reservation's record shares its state key's hash tag, so a
// take and its settle reach the same primary, and both keys expire.
func testClusterReservations(t *testing.T, e *redistest.SharedCluster) {
	runClusterScenarios(t, e, decidetest.ReserveScenarios())
}
