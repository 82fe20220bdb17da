//go:build bench

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
)

// TestBenchDetector (make bench) measures the detector's throughput on a
// backlog of decision events and the ban latency: from the request that
// crosses the scan threshold to the first request the limiter denies.
func TestBenchDetector(t *testing.T) {
	e := newEnv(t)
	const backlog = 200_000
	producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: e.broker.Brokers(), Topic: decisionsTopic,
		QueueSize: backlog, MaxInFlight: backlog}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for i := range backlog {
		ev := event.Decision{EventID: fmt.Sprintf("bench-%d", i), TS: now.Add(time.Duration(i) * time.Microsecond), Instance: "bench",
			IP: fmt.Sprintf("10.%d.%d.%d", i%7, (i/7)%256, i%251), Endpoint: fmt.Sprintf("/api/books/%d", i%20), Method: "GET",
			RuleID: "api", Algorithm: "token_bucket", Allowed: i%10 != 0, Reason: event.ReasonOK, Mode: "redis"}
		if !ev.Allowed {
			ev.Reason = event.ReasonRateLimited
		}
		producer.Publish([]byte(ev.IP), ev.AppendJSON(nil))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	if err := producer.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()

	detector := e.start("detector", "DETECTOR_BATCH_SIZE", "2000")
	waitFor(t, time.Minute, "the detector to join its group", func() bool {
		return detector.metric(t, "rate_limit_detector_events_total") > 0
	})
	start, from := time.Now(), detector.metric(t, "rate_limit_detector_events_total")
	waitFor(t, 5*time.Minute, "the backlog to be consumed", func() bool {
		return detector.metric(t, "rate_limit_detector_events_total") >= backlog
	})
	took := time.Since(start)

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
	waitFor(t, time.Minute, "the first rows", func() bool { return count(t, db, violations) > 0 })
	start, from := time.Now(), count(t, db, violations)
	waitFor(t, 5*time.Minute, "every row", func() bool { return count(t, db, violations) >= n })
	took := time.Since(start)
	fmt.Printf("archiver: %d rows committed in %v = %.0f rows/s (steady state, batches of 2000, ARCHIVER_CONSUMERS default 3 unless set, from a backlog)\n",
		n-from, took.Round(time.Millisecond), float64(n-from)/took.Seconds())
}
