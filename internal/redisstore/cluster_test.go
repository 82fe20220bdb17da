package redisstore

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestCluster runs the components of the package on one Redis Cluster of
// three primaries with a replica each, with keys spread over every
// primary. One cluster serves every subtest, since each costs seconds to
// build; subtests isolate themselves by key prefix. The failover subtest
// kills a primary, so it comes last.
func TestCluster(t *testing.T) {
	e := redistest.StartSharedCluster(t, 1)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *redistest.SharedCluster)
	}{
		{"decide", testClusterDecide},
		{"give-back", testClusterGiveBack},
		{"holds", testClusterHolds},
		{"reservations", testClusterReservations},
		{"noscript", testClusterNoScript},
		{"warm-up", testClusterWarmUp},
		{"failover", testClusterFailover},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
}

// nodeDown reports whether err says a node did not answer.
func nodeDown(err error) bool {
	switch ClassifyError(err) {
	case "connection", "timeout":
		return true
	}
	return false
}
