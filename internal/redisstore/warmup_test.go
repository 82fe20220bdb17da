package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// A cold server: WarmUp caches every script and leaves the pool holding
// the connections asked for, which pipelined decisions then use.
func TestWarmUpSingleServer(t *testing.T) {
	server := redistest.PrivateClient(t)
	client, err := Connect(ClientConfig{URL: "redis://" + server.Options().Addr + "/0", Timeout: time.Second, PoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := New(client)
	if err := store.WarmUp(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	requireScripts(t, server, store)
	c := client.(*redis.Client)
	if st := c.PoolStats(); st.IdleConns < 6 {
		t.Errorf("pool after warm-up: %+v, want 6 idle connections or more", st)
	}
	before := dials(c)
	decideConcurrently(t, store, "warm:", 4)
	if n := dials(c) - before; n != 0 {
		t.Errorf("pipelines after the warm-up opened %d connections", n)
	}
}

// A Redis that refuses connections fails the warm-up within its context.
func TestWarmUpUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client, err := Connect(ClientConfig{URL: "redis://" + addr + "/0", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = New(client).WarmUp(ctx, 4)
	if err == nil || ClassifyError(err) != "connection" && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("warm-up on a closed port: %v (class %s), want a connection error or the deadline", err, ClassifyError(err))
	}
}

// dials counts the connections c has opened for commands: its pool's
// misses, and its pipeline pool's if it has one.
func dials(c *redis.Client) uint32 {
	st := c.PoolStats()
	n := st.Misses
	if st.PipelineStats != nil {
		n += st.PipelineStats.Misses
	}
	return n
}

// decideConcurrently runs n decisions of three calls each (a pipeline)
// together.
func decideConcurrently(tb testing.TB, store *Store, prefix string, n int) {
	tb.Helper()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			calls := make([]decide.Call, 3)
			for j := range calls {
				calls[j] = decide.Call{Keys: decidetest.Keys(prefix, fmt.Sprintf("w%d-%d", i, j)), Algorithm: decide.FixedWindow,
					NowMs: 7_000_000, Cost: 1, Limits: []decide.Limit{{Requests: 10, Per: time.Hour}}}
			}
			if _, err := store.Decide(context.Background(), calls); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// requireScripts fails unless node holds every script of store.
func requireScripts(tb testing.TB, node *redis.Client, store *Store) {
	tb.Helper()
	shas := digests(store)
	exists, err := node.ScriptExists(context.Background(), shas...).Result()
	if err != nil {
		tb.Fatalf("script exists on %s: %v", node.Options().Addr, err)
	}
	for i, ok := range exists {
		if !ok {
			tb.Errorf("%s lacks script %s", node.Options().Addr, shas[i])
		}
	}
}
