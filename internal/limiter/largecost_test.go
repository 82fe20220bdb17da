package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const largeCostRules = `
rules:
  - id: bulk
    match: {endpoints: ["/bulk/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 1000000, per: 1m}]
  - id: api
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1m}]
`

// TestLargeCostsKeepRedisResponsive runs the decision path as cmd/limiter
// wires it (redisstore.Connect, Store, Coalescer and Service, with the
// configuration's defaults, REDIS_TIMEOUT among them) on a Redis of its
// own. One goroutine sends checks of cost 1 000 000 against a sliding
// window of 1 000 000 per minute, each from a new client so that each is
// admitted, then one unit more from that client, denied; meanwhile other
// clients send checks of cost 1 against 5 per minute, six per client IP.
// Every check must be decided in Redis (a round trip over its timeout
// falls back to local mode), the mode must stay redis, and every count
// must be exact. With one sorted-set member per unit, the first check of
// cost 1 000 000 held Redis for about a second.
func TestLargeCostsKeepRedisResponsive(t *testing.T) {
	cfg, err := config.LoadLimiter(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	svc := serviceOnPrivateRedis(t, cfg)
	var failures atomic.Int64
	fail := func(format string, args ...any) { // the first few; a broken run fails thousands
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	check := func(ip, endpoint string, cost int64) limiter.Decision {
		req := rules.Request{IP: ip, Endpoint: endpoint, Method: "GET", Cost: cost}
		var d limiter.Decision
		svc.Check(context.Background(), &req, &d)
		if d.Mode != limiter.ModeRedis || (d.Reason != event.ReasonOK && d.Reason != event.ReasonRateLimited) {
			fail("%s %s cost %d: reason %s in mode %s, want a decision in redis mode (REDIS_TIMEOUT %s)",
				ip, endpoint, cost, d.Reason, d.Mode, cfg.RedisTimeout)
		}
		return d
	}

	const bulkClients, clients = 200, 4
	bulkDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(bulkDone)
		for i := range bulkClients {
			ip := fmt.Sprintf("10.9.%d.%d", i/256, i%256)
			if d := check(ip, "/bulk/upload", 1_000_000); !d.Allowed || d.Remaining != 0 {
				fail("%s: cost 1 000 000: allowed %v, remaining %d; want allowed, 0 remaining", ip, d.Allowed, d.Remaining)
			}
			if d := check(ip, "/bulk/upload", 1); d.Allowed || d.RetryAfter <= 0 {
				fail("%s: one unit after 1 000 000: allowed %v, retry %s; want denied with a retry", ip, d.Allowed, d.RetryAfter)
			}
		}
	})
	for c := range clients {
		wg.Go(func() {
			for n := 0; n < 10 || !closed(bulkDone); n++ {
				ip := fmt.Sprintf("10.%d.%d.%d", 1+c, n/256, n%256)
				admitted := 0
				for range 6 {
					if check(ip, "/api/items", 1).Allowed {
						admitted++
					}
				}
				if admitted != 5 {
					fail("%s: %d of 6 admitted, want 5", ip, admitted)
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n > 5 {
		t.Errorf("%d failures in all", n)
	}
	if m := svc.Mode(); m != limiter.ModeRedis {
		t.Errorf("mode %s after the run, want redis", m)
	}
}

// serviceOnPrivateRedis returns a Service deciding on a redis-server of the
// test's own, wired as cmd/limiter does with cfg.
func serviceOnPrivateRedis(t *testing.T, cfg config.Limiter) *limiter.Service {
	t.Helper()
	store := redisstore.New(redisOn(t, redistest.StartServer(t), cfg.RedisTimeout, cfg.RedisPipelines+4))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Warmed up as the limiter is before it listens: the point is what the
	// large costs do to Redis, not a cold pool's first dials.
	if err := store.WarmUp(ctx, cfg.RedisPipelines+4); err != nil {
		t.Fatal(err)
	}
	return limitertest.Service(t, store, ruleSet(t, largeCostRules, "rwtest:"), limitertest.Options{
		Limiter: limiter.Config{Instance: "test", OverLimitCacheSize: cfg.OverLimitCache},
		Coalesce: redisstore.CoalesceConfig{Pipelines: cfg.RedisPipelines,
			Limit: cfg.PipelineLimit, Window: cfg.PipelineWindow, Wait: cfg.PipelineWait, Timeout: cfg.RedisTimeout},
	})
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
