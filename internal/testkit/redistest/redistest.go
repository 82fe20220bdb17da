// Package redistest gives integration tests a client of the local Redis and
// a key prefix of their own, deleted when the test ends, because the server
// is shared with other tests and processes.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// URL is the Redis the tests use: REDIS_URL or the local default.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// Addr is the host:port of URL. The test is skipped (failed when CI is
// set) when that Redis does not answer.
func Addr(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	opts, err := redis.ParseURL(URL())
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	return opts.Addr
}

// Require skips the test, or fails it when CI is set, unless the Redis at
// URL answers a ping. The test process asks once: a laptop without Redis
// skips every integration test at the cost of one refused connection.
func Require(tb testing.TB) {
	tb.Helper()
	if err := answers(); err != nil {
		testkit.Unavailable(tb, "redis at %s does not answer (start it with: redis-server --save ''; or set REDIS_URL): %v", URL(), err)
	}
}

// RequiredURL is URL for a test that hands it to a process or a client of
// its own: Require, then URL.
func RequiredURL(tb testing.TB) string {
	tb.Helper()
	Require(tb)
	return URL()
}

var answers = sync.OnceValue(func() error {
	opts, err := redis.ParseURL(URL())
	if err != nil {
		return err
	}
	opts.MaxRetries = -1 // a refused connection is the answer: no retries
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
})

// Client returns a client of the test Redis, skipping the test with a clear
// message when it does not answer (failing it when CI is set: Require), and
// failing it whenever a command sets an absolute expiry that has passed.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	Require(tb)
	opts, err := redis.ParseURL(URL())
	if err != nil {
		tb.Fatalf("REDIS_URL: %v", err)
	}
	opts.PoolSize = 64
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("redis at %s does not answer (start it with: redis-server --save ''): %v", opts.Addr, err)
	}
	guardExpiries(tb, c)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Prefix returns a fresh key prefix and deletes every key under it when the
// test ends.
func Prefix(tb testing.TB, c redis.UniversalClient) string {
	tb.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "rwtest:" + hex.EncodeToString(b) + ":"
	tb.Cleanup(func() { deletePrefix(tb, c, prefix) })
	return prefix
}

// deletePrefix deletes every key starting with prefix, on every primary of
// a cluster.
func deletePrefix(tb testing.TB, c redis.UniversalClient, prefix string) {
	tb.Helper()
	ctx := context.Background()
	if cc, ok := c.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			deleteNodePrefix(tb, ctx, node, prefix)
			return nil
		})
		if err != nil {
			tb.Logf("delete %s*: %v", prefix, err)
		}
		return
	}
	deleteNodePrefix(tb, ctx, c, prefix)
}

// deleteNodePrefix deletes the keys under prefix of one server, one DEL per
// key in pipelines (keys of different cluster slots cannot share a DEL).
func deleteNodePrefix(tb testing.TB, ctx context.Context, c redis.Cmdable, prefix string) {
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		tb.Logf("scan %s*: %v", prefix, err)
		return
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		pipe := c.Pipeline()
		for _, k := range keys[:n] {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			tb.Logf("delete %s*: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}
