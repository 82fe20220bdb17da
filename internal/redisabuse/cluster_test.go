package redisabuse

import (
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestCluster runs the windows and the ledger on one Redis Cluster of
// three primaries with a replica each, with offenders spread over every
// primary. One cluster serves every subtest, since each costs seconds to
// build; subtests isolate themselves by key prefix. The failover subtest
// kills a primary, so it comes last.
func TestCluster(t *testing.T) {
	e := redistest.StartSharedCluster(t, 1)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *redistest.SharedCluster)
	}{
		{"windows", testClusterWindows},
		{"ledger", testClusterLedger},
		{"distinct", testClusterDistinct},
		{"noscript", testClusterNoScript},
		{"failover", testClusterFailover},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
}
