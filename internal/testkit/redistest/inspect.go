package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Keys returns the keys under prefix, sorted, on a single server or on
// every primary of a cluster (SCAN on a cluster client sees a single node).
func Keys(tb testing.TB, client redis.UniversalClient, prefix string) []string {
	tb.Helper()
	ctx := context.Background()
	var keys []string
	switch c := client.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		// ForEachMaster runs fn on goroutines of its own, where tb.Fatal is
		// not allowed: errors come back through it.
		err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			found, err := scan(ctx, node, prefix)
			mu.Lock()
			keys = append(keys, found...)
			mu.Unlock()
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
	case *redis.Client:
		found, err := scan(ctx, c, prefix)
		if err != nil {
			tb.Fatal(err)
		}
		keys = found
	default:
		tb.Fatalf("Keys: client %T", client)
	}
	slices.Sort(keys)
	return keys
}

// scan returns the keys under prefix on the server of c.
func scan(ctx context.Context, c *redis.Client, prefix string) ([]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("scan %s*: %w", prefix, err)
	}
	return keys, nil
}

// RequireExpiry fails when a key under prefix has no TTL, on a single
// server or on every primary of a cluster, and returns how many keys there
// are.
func RequireExpiry(tb testing.TB, client redis.UniversalClient, prefix string) int {
	tb.Helper()
	ctx := context.Background()
	keys := Keys(tb, client, prefix)
	for _, key := range keys {
		ttl, err := client.PTTL(ctx, key).Result()
		if err != nil {
			tb.Fatalf("pttl %s: %v", key, err)
		}
		if ttl == -1 { // -2: expired meanwhile
			tb.Errorf("key %s has no expiry", key)
		}
	}
	return len(keys)
}

// CommandCalls returns, by command name, the calls INFO commandstats
// reports since the last CONFIG RESETSTAT, those scripts made included.
func CommandCalls(tb testing.TB, client *redis.Client) map[string]int {
	tb.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		name, stats, found := strings.Cut(rest, ":calls=")
		if !ok || !found {
			continue
		}
		n, err := strconv.Atoi(stats[:strings.IndexByte(stats, ',')])
		if err != nil {
			tb.Fatalf("commandstats line %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}
