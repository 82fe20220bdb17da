package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// A server whose every other reply comes later than the decisions'
// timeout: WarmUp gives up, WarmUpThrough a client with a longer timeout
// completes, with every script cached.
func TestWarmUpThroughASlowServer(t *testing.T) {
	server := redistest.PrivateClient(t)
	proxy := redistest.StartSlowProxy(t, server.Options().Addr)
	proxy.SetDelay(2, 120*time.Millisecond)
	connect := func(timeout time.Duration) *Store {
		c, err := Connect(ClientConfig{URL: "redis://" + proxy.Addr() + "/0", Timeout: timeout, PoolSize: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return New(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := connect(50*time.Millisecond).WarmUp(ctx, 6); err == nil {
		t.Fatal("WarmUp through the slow server succeeded: the test does not exercise late replies")
	}
	store, control := connect(50*time.Millisecond), connect(time.Second)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := store.WarmUpThrough(ctx2, control.client, 6); err != nil {
		t.Fatalf("WarmUpThrough: %v (%d replies held back)", err, proxy.Delayed())
	}
	requireScripts(t, server, store)
}
