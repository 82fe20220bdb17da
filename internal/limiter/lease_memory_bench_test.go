//go:build bench

package limiter_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchLeaseMemory (make bench) measures what a limiter holds per key
// of a leased rule: BENCH_LEASE_KEYS (100 000) client IPs of one leased
// rule (key [ip], 1e9 requests a minute), LEASE_MAX_KEYS above that and an
// idle time of an hour so that none is dropped, on a private Redis. The
// live heap (runtime.MemStats.HeapAlloc after a GC) is read before any
// request, after one request per key (each key tracked, cold: its rate
// only), and after two more per key back to back (each key hot, holding a
// lease). It prints the bytes per key of each state, which times
// LEASE_MAX_KEYS bounds the lease table's memory.
func TestBenchLeaseMemory(t *testing.T) {
	keys := benchenv.Int(t, "BENCH_LEASE_KEYS", 100_000)
	workers := benchenv.Int(t, "BENCH_WORKERS", 64)
	addr := redistest.StartServer(t)
	rdb := redisOn(t, addr, time.Second, 16)
	set := ruleSet(t, "rules:\n  - {id: leased, match: {endpoints: [\"/api/**\"]}, key: [ip], algorithm: fixed_window, "+
		"limits: [{requests: 1000000000, per: 1m}], lease: true}\n", "rwleasemem:")
	reg := prometheus.NewRegistry()
	// No Start: no renewer, so no sweep forgets or gives back a key
	// between the measures.
	svc := limitertest.Service(t, redisstore.New(rdb), set, limitertest.Options{
		Limiter: limiter.Config{Instance: "lease-memory", OverLimitCacheSize: 1000,
			Lease: lease.Config{MaxKeys: 2 * keys, Idle: time.Hour}},
		Coalesce: redisstore.CoalesceConfig{Pipelines: 4, Timeout: time.Second},
		Events:   &countingPublisher{}, Registerer: reg,
	})

	// checks sends per checks per key, keys split among the workers, each
	// key's checks back to back.
	checks := func(per int) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				var d limiter.Decision
				for k := w; k < keys; k += workers {
					ip := "10." + strconv.Itoa(k>>16) + "." + strconv.Itoa(k>>8&255) + "." + strconv.Itoa(k&255)
					for range per {
						req := rules.Request{IP: ip, Endpoint: "/api/books/17", Method: "GET", Cost: 1}
						svc.Check(context.Background(), &req, &d)
						if d.Reason != "ok" {
							t.Errorf("decision %s (mode %s)", d.Reason, d.Mode)
							return
						}
					}
				}
			})
		}
		wg.Wait()
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	// One key first: the script loaded, the connections dialed, the pools
	// filled, before the baseline.
	var d limiter.Decision
	svc.Check(context.Background(), &rules.Request{IP: "192.0.2.1", Endpoint: "/api/books/17", Method: "GET", Cost: 1}, &d)
	base := heap()
	checks(1)
	cold := heap()
	tracked := testkit.MetricSum(t, reg, "rate_limit_lease_keys", nil)
	checks(2)
	hot := heap()
	held := testkit.MetricSum(t, reg, "rate_limit_lease_keys", nil)
	units := testkit.MetricSum(t, reg, "rate_limit_lease_units", nil)
	fromLease := testkit.MetricSum(t, reg, "rate_limit_lease_decisions_total", nil)
	if held < float64(keys) || units < float64(keys) {
		t.Fatalf("%v keys tracked holding %v units, want %d keys each holding a lease", held, units, keys)
	}
	var sample []string
	var err error
	for cursor := uint64(0); len(sample) == 0; {
		if sample, cursor, err = rdb.Scan(context.Background(), cursor, "rwleasemem:*10.0.0.0[^0-9]*", 10_000).Result(); err != nil || cursor == 0 && len(sample) == 0 {
			t.Fatalf("no key of client 10.0.0.0 in Redis: %v", err)
		}
	}
	keyLen := len(sample[0])
	fmt.Printf("lease memory: %d keys of a leased rule (Redis keys such as %s, %d bytes): %.0f bytes per key tracked cold (%v keys), "+
		"%.0f bytes per key holding a lease (%v keys, %v units, %v decisions from leases); heap %.1f MB -> %.1f MB -> %.1f MB\n",
		keys, sample[0], keyLen, float64(cold-base)/float64(keys), tracked, float64(hot-base)/float64(keys), held, units, fromLease,
		float64(base)/1e6, float64(cold)/1e6, float64(hot)/1e6)
	runtime.KeepAlive(svc)
}
