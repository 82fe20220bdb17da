package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testClusterWarmUp: a new client warmed up on nodes without scripts leaves
// them on every primary, has the connections asked for open to every
// primary, which pipelined decisions then use, and routes its first single
// call without fetching go-redis's command table.
func testClusterWarmUp(t *testing.T, e *redistest.SharedCluster) {
	ctx := context.Background()
	for _, n := range e.Cluster.Nodes {
		if err := n.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("script flush on %s: %v", n.Addr, err)
		}
	}
	client, err := Connect(ClientConfig{ClusterAddrs: e.Cluster.Addrs(), Timeout: time.Second, PoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := New(client)
	if err := store.WarmUp(ctx, 6); err != nil {
		t.Fatal(err)
	}
	for _, n := range e.Primaries {
		requireScripts(t, n.Client(), store)
	}
	cluster := client.(*redis.ClusterClient)
	err = cluster.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
		if st := node.PoolStats(); st.IdleConns < 6 {
			t.Errorf("pool of %s after warm-up: %+v, want 6 idle connections or more", node.Options().Addr, st)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	primaryDials := func() uint32 {
		var n atomic.Uint32
		if err := cluster.ForEachMaster(ctx, func(_ context.Context, node *redis.Client) error {
			n.Add(dials(node))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n.Load()
	}
	before := primaryDials()
	prefix := redistest.Prefix(t, e.Client)
	decideConcurrently(t, store, prefix, 4)
	if n := primaryDials() - before; n != 0 {
		t.Errorf("pipelines after the warm-up opened %d connections to the primaries", n)
	}
	if !store.commands.loaded.Load() {
		t.Fatal("warm-up returned without go-redis's command table")
	}

	fetches := store.commands.fetches.Load()
	call := decide.Call{Keys: decidetest.Keys(prefix, "warm"), Algorithm: decide.FixedWindow, NowMs: 7_000_000, Cost: 1,
		Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
	if _, err := store.Decide(ctx, []decide.Call{call}); err != nil {
		t.Fatal(err)
	}
	if n := store.commands.fetches.Load() - fetches; n != 0 {
		t.Errorf("the first single call fetched the command table %d times", n)
	}
}
