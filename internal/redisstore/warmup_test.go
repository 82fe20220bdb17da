package redisstore

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A cold server: WarmUp caches every script and leaves the pool holding
// the connections asked for.
func TestWarmUpSingleServer(t *testing.T) {
	server := privateRedis(t)
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
	if st := client.(*redis.Client).PoolStats(); st.IdleConns < 6 {
		t.Errorf("pool after warm-up: %+v, want 6 idle connections or more", st)
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

// requireScripts fails unless node holds every script of store.
func requireScripts(tb testing.TB, node *redis.Client, store *Store) {
	tb.Helper()
	shas := make([]string, len(store.scripts))
	for i, sc := range store.scripts {
		shas[i] = sc.sha
	}
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
