//go:build bench

package limiter_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/benchenv"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// churnRules has a leased hot key (one endpoint behind every request, a
// limit nothing reaches) and another rule, whose limit the churn changes.
const churnRules = `
rules:
  - id: hot
    match: {endpoints: ["/hot"]}
    key: [endpoint]
    algorithm: fixed_window
    limits: [{requests: 1000000000, per: 1m}]
    lease: true
  - id: other
    match: {endpoints: ["/other"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: OTHER, per: 1m}]
`

// TestBenchRulesChurn (go test -tags bench -run TestBenchRulesChurn -v
// ./internal/limiter) measures what a rules change every 20 ms costs a
// limiter deciding a leased hot key from many goroutines: phases of
// BENCH_DURATION each, quiet, then the same rules compiled again every
// 20 ms, then another rule's limit changed every 20 ms. It prints, per
// phase, decisions/s, the share answered from the lease, the units given
// back, and this process's CPU per decision.
func TestBenchRulesChurn(t *testing.T) {
	duration := benchenv.Duration(t, "BENCH_DURATION", 5*time.Second)
	workers := benchenv.Int(t, "BENCH_WORKERS", 64)
	rdb := redistest.Client(t)
	prefix := redistest.Prefix(t, rdb)
	compile := func(other int) *rules.Set {
		return ruleSet(t, strings.Replace(churnRules, "OTHER", strconv.Itoa(other), 1), prefix)
	}
	reg := prometheus.NewRegistry()
	svc := limitertest.Service(t, redisstore.New(rdb), compile(100), limitertest.Options{
		Limiter:  limiter.Config{Instance: "churn", OverLimitCacheSize: 100_000},
		Coalesce: redisstore.CoalesceConfig{Pipelines: 4, Timeout: time.Second},
		Events:   &countingPublisher{}, Registerer: reg,
	})
	svc.Start()
	defer svc.Stop()
	metric := func(name string) float64 { return testkit.MetricSum(t, reg, name, nil) }

	phase := func(name string, change func(i int)) {
		stop := make(chan struct{})
		var churn sync.WaitGroup
		if change != nil {
			churn.Go(func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
						change(i)
					}
				}
			})
		}
		fromLease, returned := metric("rate_limit_lease_decisions_total"), metric("rate_limit_lease_units_returned_total")
		cpu, start := proctest.CPU(t, "self"), time.Now()
		n := hotLoop(t, svc, workers, duration)
		elapsed, cpu := time.Since(start), proctest.CPU(t, "self")-cpu
		close(stop)
		churn.Wait()
		fmt.Printf("%-28s %9.0f decisions/s, %.4f from the lease, %8.0f units given back, CPU %.2f µs a decision\n",
			name, float64(n)/elapsed.Seconds(), (metric("rate_limit_lease_decisions_total")-fromLease)/float64(n),
			metric("rate_limit_lease_units_returned_total")-returned, cpu.Seconds()*1e6/float64(n))
	}
	hotLoop(t, svc, workers, time.Second) // warm-up
	phase("quiet", nil)
	phase("same rules every 20 ms", func(int) { svc.SetRules(compile(100)) })
	phase("other rule changed / 20 ms", func(i int) { svc.SetRules(compile(100 + i%2)) })
	phase("quiet", nil)
}

// hotLoop runs Check on the hot key from workers goroutines for d and
// returns the decisions made.
func hotLoop(t *testing.T, svc *limiter.Service, workers int, d time.Duration) int64 {
	var n atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var dec limiter.Decision
			var count int64
			req := rules.Request{IP: "10.9.0." + strconv.Itoa(w%250), Endpoint: "/hot", Method: "GET", Cost: 1}
			for ; count%64 != 0 || time.Now().Before(deadline); count++ {
				r := req
				svc.Check(context.Background(), &r, &dec)
				if !dec.Allowed {
					t.Errorf("denied: %s (mode %s)", dec.Reason, dec.Mode)
					break
				}
			}
			n.Add(count)
		})
	}
	wg.Wait()
	return n.Load()
}
