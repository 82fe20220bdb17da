package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
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

// redisServer is a private redis-server process, killed by PID when the
// test ends.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedisServer(t *testing.T, args ...string) *redisServer {
	t.Helper()
	s := &redisServer{addr: proctest.FreeAddr(t), done: make(chan struct{})}
	_, port, _ := net.SplitHostPort(s.addr)
	dir := t.TempDir()
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"), "--repl-diskless-sync-delay", "0")
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			t.Logf("--- redis-server %s log ---\n%s", s.addr, log)
		}
	})
	c := s.client(t)
	testkit.WaitFor(t, 5*time.Second, "redis-server on "+s.addr, func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
	return s
}

// kill sends SIGKILL and waits for the exit.
func (s *redisServer) kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func (s *redisServer) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr, DialTimeout: 500 * time.Millisecond,
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
	replica := startRedisServer(t, "--replicaof", "127.0.0.1", strings.Split(primary.addr, ":")[1])
	const master = "m"
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	primaryHost, primaryPort, _ := net.SplitHostPort(primary.addr)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`sentinel resolve-hostnames no
sentinel monitor %[1]s %[2]s %[3]s 1
sentinel down-after-milliseconds %[1]s 500
sentinel failover-timeout %[1]s 2000
`, master, primaryHost, primaryPort)), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := startRedisServer(t, conf, "--sentinel")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel.addr, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { _ = sc.Close() })
	rc := replica.client(t)
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
		"REDIS_SENTINEL_ADDRS", sentinel.addr,
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
	pc := primary.client(t)
	testkit.WaitFor(t, 5*time.Second, "decisions in Redis on the first primary (is cmd/limiter wired for REDIS_SENTINEL_*?)", func() bool { return countKeys(pc, prefix) > 0 })

	killed := time.Now()
	primary.kill()
	var promoted time.Time
	testkit.WaitFor(t, 15*time.Second, "the sentinel to promote the replica", func() bool {
		addr, err := sc.GetMasterAddrByName(context.Background(), master).Result()
		if err == nil && net.JoinHostPort(addr[0], addr[1]) == replica.addr && redistest.Info(rc, "replication", "role") == "master" {
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
