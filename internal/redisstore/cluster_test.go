package redisstore

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/redistest"
)

// TestCluster runs the components of the package on one Redis Cluster of
// three primaries with a replica each, with keys spread over every
// primary. One cluster serves every subtest, since each costs seconds to
// build; subtests isolate themselves by key prefix. The failover subtest
// kills a primary, so it comes last.
func TestCluster(t *testing.T) {
	e := startClusterEnv(t, 1)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, *clusterEnv)
	}{
		{"decide", testClusterDecide},
		{"noscript", testClusterNoScript},
		{"blacklist", testClusterBlacklist},
		{"heartbeats", testClusterHeartbeats},
		{"rule changes", testClusterRuleChanges},
		{"windows", testClusterWindows},
		{"ledger", testClusterLedger},
		{"warm-up", testClusterWarmUp},
		{"failover", testClusterFailover},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, e) })
	}
}

// clusterEnv is the cluster the subtests of TestCluster share: a client
// and the primaries as they were at the start.
type clusterEnv struct {
	cluster   *redistest.Cluster
	client    *redis.ClusterClient
	primaries []*redistest.Node
}

// startClusterEnv starts a cluster of three primaries with replicas
// replicas each, stopped when tb ends.
func startClusterEnv(tb testing.TB, replicas int) *clusterEnv {
	tb.Helper()
	c := redistest.StartCluster(tb, 3, replicas)
	e := &clusterEnv{cluster: c, client: c.Client(tb), primaries: c.Primaries()}
	if len(e.primaries) != 3 {
		tb.Fatalf("%d primaries, want 3", len(e.primaries))
	}
	return e
}

// spread returns n subjects, the i-th chosen so that key(subject) is served
// by primary i mod 3: keys built from them cover every primary.
func (e *clusterEnv) spread(tb testing.TB, n int, key func(subject string) string) []string {
	tb.Helper()
	subjects := make([]string, 0, n)
	candidate := 0
	for i := range n {
		want := e.primaries[i%len(e.primaries)]
		for {
			if candidate > 100*(n+1) {
				tb.Fatalf("no subject among %d candidates lands on %s", candidate, want.Addr)
			}
			s := "s" + strconv.Itoa(candidate)
			candidate++
			if e.cluster.PrimaryOf(tb, key(s)) == want {
				subjects = append(subjects, s)
				break
			}
		}
	}
	return subjects
}

// requireSpread fails unless keys are served by all three primaries, as
// the live nodes see it: the premise of every cluster subtest.
func (e *clusterEnv) requireSpread(tb testing.TB, keys []string) {
	tb.Helper()
	var served []string
	for _, k := range keys {
		if addr := e.cluster.PrimaryOf(tb, k).Addr; !slices.Contains(served, addr) {
			served = append(served, addr)
		}
	}
	if len(served) != 3 {
		tb.Fatalf("keys %q are served by %d primaries (%v), want 3", keys, len(served), served)
	}
}

// primaryIndex returns the index in e.primaries of the primary serving key.
func (e *clusterEnv) primaryIndex(tb testing.TB, key string) int {
	tb.Helper()
	i := slices.Index(e.primaries, e.cluster.PrimaryOf(tb, key))
	if i < 0 {
		tb.Fatalf("key %q is served by a node that was not a primary at the start", key)
	}
	return i
}

// clusterKeys returns the keys under prefix on every primary: SCAN on a
// cluster client sees a single node.
func clusterKeys(tb testing.TB, client *redis.ClusterClient, prefix string) []string {
	tb.Helper()
	ctx := context.Background()
	var (
		mu   sync.Mutex
		keys []string
	)
	// ForEachMaster runs fn on goroutines of its own, where tb.Fatal is not
	// allowed: errors come back through it.
	err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var found []string
		for iter.Next(ctx) {
			found = append(found, iter.Val())
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan %s*: %w", prefix, err)
		}
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}

// eventually runs try (each run bounded by a second) until it succeeds,
// and fails the test with the last error when deadline passes first.
func eventually(t *testing.T, killed, deadline time.Time, try func(ctx context.Context) error) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := try(ctx)
		cancel()
		if err == nil {
			t.Logf("works %v after the kill", time.Since(killed).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing %v after the kill: %v", time.Since(killed).Round(time.Millisecond), err)
		}
		time.Sleep(100 * time.Millisecond)
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

// replicaOf returns the node replicating primary.
func replicaOf(tb testing.TB, c *redistest.Cluster, primary *redistest.Node) *redistest.Node {
	tb.Helper()
	_, port, _ := net.SplitHostPort(primary.Addr)
	for _, n := range c.Nodes {
		info, err := n.Client().Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r\n") {
			return n
		}
	}
	tb.Fatalf("no replica of %s", primary.Addr)
	return nil
}
