//go:build bench

package limiter_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchClusterScaling (make bench) runs the decision path of
// TestBenchDecisionPath against a Redis Cluster of one primary and one of
// three (no replicas: on two cores their replication would take CPU from
// the primaries), each built from private redis-server processes. It
// prints decisions/s, the CPU per decision of this process and of all
// Redis nodes together, and how busy the busiest primary was: the
// per-primary figure the capacity model uses is decisions/s at one primary
// divided by that primary's share of a core.
func TestBenchClusterScaling(t *testing.T) {
	duration := benchenv.Duration(t, "BENCH_DURATION", 10*time.Second)
	workers := benchenv.Int(t, "BENCH_WORKERS", 256)
	pipelines := benchenv.Int(t, "REDIS_PIPELINES", 4)
	for _, primaries := range []int{1, 3} {
		t.Run(strconv.Itoa(primaries)+"-primaries", func(t *testing.T) {
			cluster := redistest.StartCluster(t, primaries, 0)
			rdb, err := redisstore.Connect(redisstore.ClientConfig{ClusterAddrs: cluster.Addrs(), Timeout: time.Second, PoolSize: pipelines + 4})
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			for _, alg := range strings.Fields(benchenv.String("BENCH_CLUSTER_ALGORITHMS", "sliding_window token_bucket")) {
				t.Run(alg, func(t *testing.T) {
					pub, closePub := publisher(t)
					defer closePub()
					svc := limitertest.Service(t, redisstore.New(rdb), benchRules(t, alg, redistest.Prefix(t, rdb)), limitertest.Options{
						Limiter:  limiter.Config{Instance: "bench", OverLimitCacheSize: 100_000},
						Coalesce: redisstore.CoalesceConfig{Pipelines: pipelines, Wait: redisstore.DefaultWait},
						Events:   pub,
					})

					checkLoop(t, svc, workers, time.Second) // warm-up: slot map, lanes, scripts, keys
					nodes := cluster.Nodes
					before := make([]time.Duration, len(nodes))
					for i, n := range nodes {
						before[i] = proctest.CPU(t, strconv.Itoa(n.PID()))
					}
					self := proctest.CPU(t, "self")
					start := time.Now()
					n := checkLoop(t, svc, workers, duration)
					elapsed := time.Since(start)
					self = proctest.CPU(t, "self") - self
					var redisCPU, busiest time.Duration
					for i, node := range nodes {
						used := proctest.CPU(t, strconv.Itoa(node.PID())) - before[i]
						redisCPU += used
						busiest = max(busiest, used)
					}
					fmt.Printf("cluster %d primaries %s: %.0f decisions/s, CPU per decision limiter %.1f µs, redis %.1f µs (all nodes), busiest primary %.0f%% of a core (%d workers, %d pipelines per primary)\n",
						primaries, alg, float64(n)/elapsed.Seconds(), self.Seconds()*1e6/float64(n), redisCPU.Seconds()*1e6/float64(n),
						100*busiest.Seconds()/elapsed.Seconds(), workers, pipelines)
				})
			}
		})
	}
}
