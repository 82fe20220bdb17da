//go:build bench

package e2e

import (
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// TestBenchOutcomeDetector (make bench) measures detection from outcomes:
// the detector's throughput on a backlog of outcome reports, with one in
// ten a failed login (the mix a login-heavy service reports) and with every
// one a failure (the worst case: each a Redis call per scenario); and the
// ban latency, from the report that crosses the credential-stuffing
// threshold to the moment both of two limiters deny the source.
func TestBenchOutcomeDetector(t *testing.T) {
	for _, mix := range []struct {
		name      string
		failEvery int
	}{{"1 in 10 a failure", 10}, {"every one a failure", 1}} {
		e := newEnvWith(t, loginRulesYAML)
		const backlog = 200_000
		now := time.Now().UTC()
		publishBacklog(t, e, outcomesTopic, backlog, func(i int, dst []byte) (key, value []byte) {
			o := event.Outcome{EventID: fmt.Sprintf("bench-%d", i), TS: now.Add(time.Duration(i) * time.Microsecond), Instance: "bench",
				IP: fmt.Sprintf("10.%d.%d.%d", i%7, (i/7)%256, i%251), UserID: fmt.Sprintf("user-%d", i),
				Endpoint: "/api/login", Method: "POST", Status: 200, Cost: 1}
			if i%mix.failEvery == 0 {
				o.Status = 401
			}
			return []byte(o.IP), o.AppendJSON(dst)
		})
		detector := e.start("detector", "DETECTOR_BATCH_SIZE", "2000")
		from, took := drainBacklog(t, detector, "rate_limit_detector_events_total", backlog, `source="outcomes"`)
		fmt.Printf("outcome detector (%s): %.0f outcomes consumed in %v = %.0f outcomes/s (steady state, from a backlog)\n",
			mix.name, backlog-from, took.Round(time.Millisecond), (backlog-from)/took.Seconds())
		detector.stop(syscall.SIGTERM)
	}

	e := newEnvWith(t, loginRulesYAML)
	e.start("detector")
	a, b := e.start("limiter", "INSTANCE_ID", "a"), e.start("limiter", "INSTANCE_ID", "b")
	var latencies []time.Duration
	const trials = 50
	for trial := range trials {
		ip := fmt.Sprintf("203.0.%d.%d", trial/250, trial%250+1)
		for u := range 3 { // distinct_users 2: the third crosses
			postReport(t, a, fmt.Sprintf(`{"ip":%q,"endpoint":"/api/login","method":"POST","user_id":"t%d-u%d","status":401}`, ip, trial, u))
		}
		crossed := time.Now()
		for _, lim := range []*proc{a, b} {
			for checkLogin(t, lim, ip, "anyone").Reason != event.ReasonBanned {
				if time.Since(crossed) > 10*time.Second {
					t.Fatalf("trial %d: no ban after 10s", trial)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		latencies = append(latencies, time.Since(crossed))
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	fmt.Printf("ban latency over %d credential-stuffing sources (threshold crossed by a report -> both of 2 limiters deny): p50 %v, p99 %v, max %v\n",
		trials, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
}
