package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// startRedisServer starts a private redis-server (redistest.Server) with
// args, on a free port, replicating without delay.
func startRedisServer(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	return redistest.StartServerAt(t, proctest.FreeAddr(t), append(args, "--repl-diskless-sync-delay", "0")...)
}

// clientOf is a client of s that gives up fast, closed when the test ends.
func clientOf(t *testing.T, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// countKeys counts the keys under prefix.
func countKeys(c *redis.Client, prefix string) int {
	keys, _, err := c.Scan(context.Background(), 0, prefix+"*", 10000).Result()
	if err != nil {
		return 0
	}
	return len(keys)
}

// A primary, a replica and a sentinel; the primary is killed while clients
// send checks: the limiter keeps answering and, once the sentinel has
// promoted the replica, decides in Redis again, on the new primary.
func TestLimiterFollowsSentinelFailover(t *testing.T) {
	e := newEnv(t)
	primary := startRedisServer(t)
	replica := startRedisServer(t, "--replicaof", "127.0.0.1", strings.Split(primary.Addr, ":")[1])
	const master = "m"
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	primaryHost, primaryPort, _ := net.SplitHostPort(primary.Addr)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s %[2]s %[3]s 1
sentinel down-after-milliseconds %[1]s 500
sentinel failover-timeout %[1]s 2000
`, master, primaryHost, primaryPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := startRedisServer(t, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = sc.Close() })
	rc := clientOf(t, replica)
	testkit.WaitFor(t, 10*time.Second, "the replica to sync and the sentinel to know it", func() bool {
		replicas, err := sc.Replicas(context.Background(), master).Result()
		return err == nil && len(replicas) == 1 && redistest.Info(rc, "replication", "master_link_status") == "up"
	})

	prefix := "rwsentinel:" + fmt.Sprint(time.Now().UnixNano()) + ":"
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("the limiter must be wired for Sentinel: cmd/limiter passes cfg.RedisSentinelAddrs and " +
				"cfg.RedisSentinelMaster into redisstore.ClientConfig (its REDIS_URL here points nowhere)")
		}
	})
	limiter := e.start("limiter",
		// Unreachable on purpose: only Sentinel leads to the primary.
		"REDIS_URL", "redis://127.0.0.1:1/0",
		"REDIS_SENTINEL_ADDRS", sentinel.Addr,
		"REDIS_SENTINEL_MASTER", master,
		"REDIS_KEY_PREFIX", prefix,
		"REDIS_TIMEOUT", "100ms",
		"REDIS_HEALTH_INTERVAL", "200ms",
		"REDIS_RECOVER_AFTER", "1s",
	)

	var (
		mu      sync.Mutex
		answers []answer
	)
	load := startLoad(t, limiter.addr, 8, 5*time.Millisecond, func(a answer) {
		mu.Lock()
		answers = append(answers, a)
		mu.Unlock()
	})
	pc := clientOf(t, primary)
	testkit.WaitFor(t, 5*time.Second, "decisions in Redis on the first primary (is cmd/limiter wired for REDIS_SENTINEL_*?)", func() bool { return countKeys(pc, prefix) > 0 })

	killed := time.Now()
	primary.Kill()
	var promoted time.Time
	testkit.WaitFor(t, 15*time.Second, "the sentinel to promote the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), master).Result()
		if err == nil && net.JoinHostPort(addr[0], addr[1]) == replica.Addr && redistest.Info(rc, "replication", "role") == "master" {
			promoted = time.Now()
			return true
		}
		return false
	})
	// The replica holds the counters written before the kill: start from
	// none to see the limiter write to the new primary.
	for _, k := range rc.Keys(context.Background(), prefix+"*").Val() {
		rc.Del(context.Background(), k)
	}
	testkit.WaitFor(t, 10*time.Second, "decisions in Redis on the promoted replica", func() bool {
		if countKeys(rc, prefix) == 0 {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers[max(0, len(answers)-50):] {
			if a.err == nil && a.mode == "redis" && a.sent.After(promoted) {
				return true
			}
		}
		return false
	})
	recovered := time.Now()
	load.stop()

	modes := map[string]int{}
	failures := 0
	var firstFailure error
	for _, a := range answers {
		if a.err != nil || (a.status != 200 && a.status != 429) {
			failures++
			if firstFailure == nil {
				firstFailure = fmt.Errorf("status %d: %v", a.status, a.err)
			}
			continue
		}
		if a.sent.After(killed) {
			modes[a.mode]++
		}
	}
	t.Logf("%d checks; after the kill: %v; promoted %v after the kill, redis decisions again %v after the promotion; slowest answer %v",
		len(answers), modes, promoted.Sub(killed).Round(time.Millisecond), recovered.Sub(promoted).Round(time.Millisecond),
		time.Duration(load.slowest.Load()).Round(time.Millisecond))
	if failures > 0 {
		t.Fatalf("%d checks failed across the failover (first: %v)", failures, firstFailure)
	}
}
