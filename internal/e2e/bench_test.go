//go:build bench

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// TestBenchDetector (make bench) measures the detector's throughput on a
// backlog of decision events and the ban latency: from the request that
// crosses the scan threshold to the first request the limiter denies.
func TestBenchDetector(t *testing.T) {
	e := newEnv(t)
	const backlog = 200_000
	now := time.Now().UTC()
	publishBacklog(t, e, decisionsTopic, backlog, func(i int, dst []byte) (key, value []byte) {
		ev := event.Decision{EventID: fmt.Sprintf("bench-%d", i), TS: now.Add(time.Duration(i) * time.Microsecond), Instance: "bench",
			IP: fmt.Sprintf("10.%d.%d.%d", i%7, (i/7)%256, i%251), Endpoint: fmt.Sprintf("/api/books/%d", i%20), Method: "GET",
			RuleID: "api", Algorithm: "token_bucket", Allowed: i%10 != 0, Reason: event.ReasonOK, Mode: "redis"}
		if !ev.Allowed {
			ev.Reason = event.ReasonRateLimited
		}
		return []byte(ev.IP), ev.AppendJSON(dst)
	})
	detector := e.start("detector", "DETECTOR_BATCH_SIZE", "2000")
	from, took := drainBacklog(t, detector, "rate_limit_detector_events_total", backlog, `source="decisions"`)

	limiter := e.start("limiter")
	var latencies []time.Duration
	const trials = 50
	for trial := range trials {
		ip := fmt.Sprintf("203.0.%d.%d", trial/250, trial%250+1)
		for i := range 49 {
			check(t, limiter, ip, fmt.Sprintf("/api/scan/%d", i))
		}
		check(t, limiter, ip, "/api/scan/49") // the 50th distinct endpoint
		crossed := time.Now()
		for check(t, limiter, ip, "/api/scan/0").Reason != event.ReasonBanned {
			if time.Since(crossed) > 10*time.Second {
				t.Fatalf("trial %d: no ban after 10s", trial)
			}
			time.Sleep(2 * time.Millisecond)
		}
		latencies = append(latencies, time.Since(crossed))
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	fmt.Printf("detector: %.0f events consumed in %v = %.0f events/s (steady state, from a backlog)\n", backlog-from, took.Round(time.Millisecond), (backlog-from)/took.Seconds())
	fmt.Printf("ban latency over %d scans (threshold crossed -> limiter denies): p50 %v, p99 %v, max %v\n",
		trials, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
}

// TestBenchArchiver (make bench) measures the archive rate: violations from
// the topic to committed rows, on a backlog.
func TestBenchArchiver(t *testing.T) {
	e, db := archiverEnv(t)
	const n = 200_000
	produce(t, e, decisionsTopic, decisions(n, 1)...)
	e.start("archiver", "ARCHIVER_BATCH_SIZE", "2000", "ARCHIVER_CONSUMERS", os.Getenv("ARCHIVER_CONSUMERS"))
	testkit.WaitFor(t, time.Minute, "the first rows", func() bool { return count(t, db, violations) > 0 })
	start, from := time.Now(), count(t, db, violations)
	testkit.WaitFor(t, 5*time.Minute, "every row", func() bool { return count(t, db, violations) >= n })
	took := time.Since(start)
	fmt.Printf("archiver: %d rows committed in %v = %.0f rows/s (steady state, batches of 2000, ARCHIVER_CONSUMERS default 3 unless set, from a backlog)\n",
		n-from, took.Round(time.Millisecond), float64(n-from)/took.Seconds())
}

// TestBenchRulePropagation (make bench) measures how long a dynamic rule
// change takes to be in force on three limiters: from the moment the PUT is
// sent to one of them to the moment each instance applied the new version
// (the time it reports in Redis with the version). 100 updates, sent to the
// instances in turn, paced under the admin API's rate limit.
func TestBenchRulePropagation(t *testing.T) {
	e, _ := rulesEnv(t)
	var lims []*proc
	for i := 1; i <= 3; i++ {
		lims = append(lims, e.start("limiter", "INSTANCE_ID", fmt.Sprintf("l%d", i)))
	}
	rdb := redistest.Client(t)
	reports := e.vars["REDIS_KEY_PREFIX"] + "{instances}:rules"
	const updates = 100
	var writer, others []time.Duration
	for i := range updates {
		body := strings.Replace(loginAt3, `"requests": 3`, fmt.Sprintf(`"requests": %d`, 10+i), 1)
		sent := time.Now()
		status, answer := adminAs(t, lims[i%3], http.MethodPut, "/v1/admin/rules/login", body, "bench")
		if status != http.StatusOK && status != http.StatusCreated {
			t.Fatalf("PUT %d: %d %s", i, status, answer)
		}
		want := fmt.Sprintf("%d-", i+1) // the version starts with the dynamic version
		applied := map[string]time.Time{}
		deadline := time.Now().Add(5 * time.Second)
		for len(applied) < 3 {
			if time.Now().After(deadline) {
				t.Fatalf("update %d: applied by %d of 3 instances after 5s", i+1, len(applied))
			}
			for id, raw := range rdb.HGetAll(context.Background(), reports).Val() {
				var r redisfleet.RulesReport
				if json.Unmarshal([]byte(raw), &r) == nil && strings.HasPrefix(r.Version, want) {
					applied[id] = r.AppliedAt
				}
			}
			time.Sleep(time.Millisecond)
		}
		for id, at := range applied {
			if id == fmt.Sprintf("l%d", i%3+1) {
				writer = append(writer, at.Sub(sent))
			} else {
				others = append(others, at.Sub(sent))
			}
		}
		time.Sleep(150 * time.Millisecond) // the admin API allows 10 requests/s per client
	}
	slices.Sort(writer)
	slices.Sort(others)
	fmt.Printf("rule propagation over %d updates, 3 limiters (PUT sent -> applied): other instances p50 %v, p99 %v, max %v; "+
		"the instance serving the PUT p50 %v, p99 %v\n", updates,
		others[len(others)/2].Round(10*time.Microsecond), others[len(others)*99/100].Round(10*time.Microsecond),
		others[len(others)-1].Round(10*time.Microsecond),
		writer[len(writer)/2].Round(10*time.Microsecond), writer[len(writer)*99/100].Round(10*time.Microsecond))
}

// publishBacklog publishes n messages to topic, message i as event(i)
// gives it (its value appended to a fresh buffer), and returns once the
// broker has them all.
func publishBacklog(t *testing.T, e *env, topic string, n int, event func(i int, dst []byte) (key, value []byte)) {
	t.Helper()
	producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: e.broker.Brokers(), Topic: topic,
		QueueSize: n, MaxInFlight: n}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		producer.Publish(event(i, nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := producer.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// drainBacklog waits for the detector to start consuming (its counter
// metric, of the series with labels, above 0), then for it to reach backlog, and returns the count it
// had when it started and how long the rest took: the steady state.
func drainBacklog(t *testing.T, detector *proc, metric string, backlog float64, labels ...string) (from float64, took time.Duration) {
	t.Helper()
	testkit.WaitFor(t, time.Minute, "the detector to join its group", func() bool { return detector.metric(t, metric, labels...) > 0 })
	start := time.Now()
	from = detector.metric(t, metric, labels...)
	testkit.WaitFor(t, 5*time.Minute, "the backlog to be consumed", func() bool { return detector.metric(t, metric, labels...) >= backlog })
	return from, time.Since(start)
}
