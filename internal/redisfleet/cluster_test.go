package redisfleet

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestCluster runs the blacklist, the heartbeats and the rule changes on
// one Redis Cluster of three primaries with a replica each. One cluster
// serves every subtest, since each costs seconds to build; subtests
// isolate themselves by key prefix. The failover subtest kills a primary,
// so it comes last.
func TestCluster(t *testing.T) {
	e := redistest.StartSharedCluster(t, 1)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *redistest.SharedCluster)
	}{
		{"blacklist", testClusterBlacklist},
		{"heartbeats", testClusterHeartbeats},
		{"rule changes", testClusterRuleChanges},
		{"failover", testClusterFailover},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
}

// awaitChange reads ch until a value satisfies match or ctx ends.
func awaitChange[T any](ctx context.Context, ch <-chan T, match func(T) bool) error {
	for {
		select {
		case v := <-ch:
			if match(v) {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("published, not received: %w", ctx.Err())
		}
	}
}
