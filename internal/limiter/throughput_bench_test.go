//go:build bench

package limiter_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchDecisionPath (make bench) measures the decision path without
// HTTP: Service.Check from many goroutines (match, keys, a coalesced Redis
// round trip, the decision, the event encoded and enqueued), one rule of
// each algorithm over 10 000 client IPs. With BENCH_KAFKA_BROKERS set the
// events go to that broker, else they are encoded and counted. It prints
// decisions/s and the CPU per decision of this process and of Redis (from
// /proc, when Redis runs on this host), for make bench to set beside the
// pipelined redis-benchmark ceiling.
func TestBenchDecisionPath(t *testing.T) {
	duration := benchenv.Duration(t, "BENCH_DURATION", 10*time.Second)
	workers := benchenv.Int(t, "BENCH_WORKERS", 256)
	pipelines := benchenv.Int(t, "REDIS_PIPELINES", 4)
	limit := benchenv.Int(t, "REDIS_PIPELINE_LIMIT", 64)
	rdb := redistest.Client(t)
	redisPID := redisProcess(t, rdb)
	for _, alg := range strings.Fields(benchenv.String("BENCH_ALGORITHMS", "fixed_window sliding_window sliding_window_counter token_bucket")) {
		t.Run(alg, func(t *testing.T) {
			prefix := redistest.Prefix(t, rdb)
			set := benchRules(t, alg, prefix)
			var calls, trips atomic.Int64
			pub, closePub := publisher(t)
			defer closePub()
			svc := limitertest.Service(t, redisstore.New(rdb), set, limitertest.Options{
				Limiter: limiter.Config{Instance: "bench", OverLimitCacheSize: 100_000},
				Coalesce: redisstore.CoalesceConfig{Pipelines: pipelines, Limit: limit, Wait: redisstore.DefaultWait, Timeout: 50 * time.Millisecond, LateWait: time.Second,
					OnFlush: func(n int) { calls.Add(int64(n)); trips.Add(1) }},
				Events: pub,
			})

			checkLoop(t, svc, workers, time.Second) // warm-up: connections, scripts, keys
			calls.Store(0)
			trips.Store(0)
			selfBefore, redisBefore := proctest.CPU(t, "self"), proctest.CPU(t, redisPID)
			start := time.Now()
			n := checkLoop(t, svc, workers, duration)
			elapsed := time.Since(start)
			self, redisCPU := proctest.CPU(t, "self")-selfBefore, proctest.CPU(t, redisPID)-redisBefore
			redisPer := "n/a"
			if redisPID != "" {
				redisPer = fmt.Sprintf("%.1f", redisCPU.Seconds()*1e6/float64(n))
			}
			fmt.Printf("in-process %s: %.0f decisions/s, CPU per decision limiter %.1f µs, redis %s µs, %.1f calls per round trip (%d workers, %d pipelines)\n",
				alg, float64(n)/elapsed.Seconds(), self.Seconds()*1e6/float64(n), redisPer, float64(calls.Load())/float64(max(trips.Load(), 1)), workers, pipelines)
		})
	}
}

// benchRules is one rule of algorithm alg limiting /api/** per client IP,
// at 1000 a second: the 10 000 IPs of checkLoop are rarely limited.
func benchRules(t *testing.T, alg, prefix string) *rules.Set {
	limits := map[string]string{
		"fixed_window":           "[{requests: 1000, per: 1s}]",
		"sliding_window":         "[{requests: 1000, per: 1s}]",
		"sliding_window_counter": "[{requests: 1000, per: 1s}]",
		"token_bucket":           "[{rate: 1000, per: 1s, burst: 1000}]",
	}
	return ruleSet(t, "rules:\n  - id: bench\n    match: {endpoints: [\"/api/**\"]}\n    key: [ip]\n    algorithm: "+
		alg+"\n    limits: "+limits[alg]+"\n", prefix)
}

// checkLoop runs Service.Check from workers goroutines for d, each request
// from one of 10 000 client IPs, and returns the decisions made. A decision
// other than ok or rate_limited (Redis failing) fails the test.
func checkLoop(t *testing.T, svc *limiter.Service, workers int, d time.Duration) int64 {
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var dec limiter.Decision
			var count int64
			for i := w; ; i += workers {
				select {
				case <-stop:
					n.Add(count)
					return
				default:
				}
				k := i % 10_000
				req := rules.Request{IP: "10.0." + strconv.Itoa(k/256) + "." + strconv.Itoa(k%256), Endpoint: "/api/books/17", Method: "GET", Cost: 1}
				svc.Check(context.Background(), &req, &dec)
				if dec.Reason != "ok" && dec.Reason != "rate_limited" {
					t.Errorf("decision %s (mode %s)", dec.Reason, dec.Mode)
					n.Add(count)
					return
				}
				count++
			}
		})
	}
	time.Sleep(d)
	close(stop)
	wg.Wait()
	return n.Load()
}

// publisher returns the real producer to BENCH_KAFKA_BROKERS, or one that
// only counts the encoded events.
func publisher(t *testing.T) (limiter.Publisher, func()) {
	brokers := os.Getenv("BENCH_KAFKA_BROKERS")
	if brokers == "" {
		return &countingPublisher{}, func() {}
	}
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: strings.Split(brokers, ","), Topic: "ratelimit.decisions", QueueSize: 100_000},
		zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return p, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}
}

type countingPublisher struct{ n atomic.Int64 }

func (c *countingPublisher) Publish(_, _ []byte) bool { c.n.Add(1); return true }

// redisProcess returns the pid of the Redis server when it runs on this
// host (its /proc entry is readable), else "".
func redisProcess(t *testing.T, rdb redis.UniversalClient) string {
	info, err := rdb.Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if pid, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if _, err := os.Stat("/proc/" + pid + "/stat"); err == nil {
				return pid
			}
		}
	}
	return ""
}
