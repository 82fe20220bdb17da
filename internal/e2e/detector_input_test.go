package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// ipsOverPartitions returns n client IPs whose events (keyed by IP, with
// the limiter's Murmur2 partitioning) fall evenly on every partition of
// the decisions topic.
func ipsOverPartitions(t *testing.T, e *env, n int) []string {
	t.Helper()
	parts := kafkatest.Partitions(t, e.broker.Brokers(), decisionsTopic)
	quota := (n + len(parts) - 1) / len(parts)
	taken := map[int]int{}
	var out []string
	for i := 0; len(out) < n; i++ {
		ip := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
		if p := (kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: []byte(ip)}, parts...); taken[p] < quota {
			taken[p]++
			out = append(out, ip)
		}
	}
	return out
}

// allowed is an allowed decision of ip for endpoint at ts, as a limiter
// named instance publishes it.
func allowed(ts time.Time, instance, ip, endpoint string) event.Decision {
	return event.Decision{EventID: uuid.NewString(), TS: ts, Instance: instance, IP: ip, Endpoint: endpoint, Method: "GET",
		RuleID: "api", Algorithm: "token_bucket", Allowed: true, Reason: event.ReasonOK, Limit: 1000, Remaining: 999, Mode: "redis"}
}

// The reported blinding: a limiter whose clock jumped a year ahead sends 240
// decisions spread over every partition; a real scanner after them is still
// banned within a second of crossing the threshold, as on a healthy
// stream, and none of its events is late.
func TestFutureEventsDoNotBlindTheDetector(t *testing.T) {
	e := newEnv(t)
	detector := e.start("detector")
	limiter := e.start("limiter", "TRUSTED_PROXIES", "127.0.0.1")

	yearAhead := time.Now().UTC().AddDate(1, 0, 0)
	var future []event.Decision
	for i, ip := range ipsOverPartitions(t, e, 240) {
		future = append(future, allowed(yearAhead.Add(time.Duration(i)*time.Millisecond), "limiter-fast", ip, "/api/books/1"))
	}
	produceByIP(t, e, future)
	for p, end := range kafkatest.EndOffsets(t, e.broker.Brokers(), decisionsTopic) {
		if end == 0 {
			t.Fatalf("partition %d got none of the future events", p)
		}
	}
	waitConsuming(t, detector, float64(len(future)))

	const scanner, normal = "203.0.113.66", "198.51.100.10"
	if delay := scanUntilBanned(t, limiter, detector, scanner, normal); delay > time.Second {
		t.Errorf("the limiter denied the scanner %v after it crossed the threshold, want ≤ 1s", delay)
	} else {
		t.Logf("ban enforced %v after the 50th distinct endpoint, after 240 events a year ahead", delay)
	}
	if late := detector.metric(t, "rate_limit_detector_late_events_total", `source="decisions"`); late != 0 {
		t.Errorf("%v events counted late, want none", late)
	}
	if n := detector.metric(t, "rate_limit_detector_future_events_total", `source="decisions"`); n < float64(len(future)) {
		t.Errorf("%v events counted ahead of the detector's clock, want %d", n, len(future))
	}
	b := bans(t, e, 1)[0]
	if b.Subject != scanner || b.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("ban %+v: want the scanner's, expiring within the hour", b)
	}
}

// produceRaw writes values keyed by keys on the decisions topic with a
// writer that accepts messages over 1 MiB and compresses batches, as a
// misbehaving producer can: the broker measures the compressed batch
// against its 1 MiB limit, so a value of over 1 MiB gets through.
func produceRaw(t *testing.T, e *env, keys []string, values [][]byte) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(e.broker.Brokers()...), Topic: decisionsTopic, Balancer: kafka.Murmur2Balancer{},
		BatchBytes: 4 << 20, Compression: kafka.Snappy, RequiredAcks: kafka.RequireAll, BatchTimeout: 10 * time.Millisecond,
		Transport: &kafka.Transport{}} // not the shared default: see kafkabus.NewBanPublisher
	defer w.Close()
	msgs := make([]kafka.Message, len(values))
	for i := range values {
		msgs[i] = kafka.Message{Key: []byte(keys[i]), Value: values[i]}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce %d poison messages: %v", len(msgs), err)
	}
}

// Messages that can never be processed, of every kind, each in a burst
// that crosses the scan threshold (so that, counted, it would lead to a ban
// claim and a ban message): the detector skips and counts them, a scanner
// after them is banned, the detector's group commits the end of every
// partition, and the archiver dead-letters each of them.
func TestPoisonMessagesDoNotWedgeTheDetector(t *testing.T) {
	e := newEnv(t)
	now := time.Now().UTC()
	var keys []string
	var values [][]byte
	burst := func(ip string, edit func(i int, d *event.Decision)) {
		for i := range 50 {
			d := allowed(now.Add(time.Duration(i)*time.Millisecond), "limiter-1", ip, fmt.Sprintf("/api/p/%d", i))
			edit(i, &d)
			keys, values = append(keys, ip), append(values, d.AppendJSON(nil))
		}
	}
	// First, so that the detector meets them before any event with a sane
	// time on their partition: otherwise they would merely be late.
	burst("198.51.100.201", func(_ int, d *event.Decision) { d.TS = time.Time{} }) // 0001-01-01
	burst("not-an-ip", func(int, *event.Decision) {})
	burst("198.51.100.203", func(_ int, d *event.Decision) { d.UserID = strings.Repeat("u", event.MaxUserID+1) })
	burst("198.51.100.204", func(i int, d *event.Decision) { // the 50th endpoint: 1 MiB
		if i == 49 {
			d.Endpoint = "/" + strings.Repeat("x", 1<<20)
		}
	})
	keys, values = append(keys, "k"), append(values, []byte(`{"event_id": "not json`))
	produceRaw(t, e, keys, values)
	const poison = 50 + 50 + 50 + 1 + 1

	detector := e.start("detector")
	archiver := e.start("archiver")
	limiter := e.start("limiter")
	const scanner = "203.0.113.67"
	i := 0
	testkit.WaitFor(t, 30*time.Second, "the scanner to be banned", func() bool {
		i++
		return check(t, limiter, scanner, fmt.Sprintf("/api/scan/%d", i)).Reason == event.ReasonBanned
	})
	waitDrained(t, e, e.vars["DETECTOR_GROUP_ID"], decisionsTopic, 30*time.Second)

	skipped := detector.metric(t, "rate_limit_detector_invalid_events_total", `source="decisions"`) + detector.metric(t, "rate_limit_detector_undecodable_events_total", `source="decisions"`)
	if skipped < poison {
		t.Errorf("%v messages skipped, want the %d poison messages", skipped, poison)
	}
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the archiver to dead-letter the %d poison messages", poison), func() bool {
		return archiver.metric(t, "rate_limit_archiver_dead_lettered_total") >= poison
	})
	for _, b := range bans(t, e, int(kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic))) {
		if b.Subject != scanner {
			t.Errorf("ban of %q, want only the scanner's", b.Subject)
		}
	}
}

// A failure that may pass is not poison: while the detector's Redis is
// down, the batch holding a scan is retried with its offsets held (no ban,
// nothing committed past it, nothing skipped); once Redis is back, the scan
// is banned and the group commits the end of the topic.
func TestDetectorHoldsOffsetsWhileRedisIsDown(t *testing.T) {
	e := newEnv(t)
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	rds := redistest.StartServerAt(t, "127.0.0.1:"+port)
	e.vars["REDIS_URL"] = "redis://127.0.0.1:" + port + "/0"
	detector := e.start("detector")
	group := e.vars["DETECTOR_GROUP_ID"]
	now := time.Now().UTC()
	produceByIP(t, e, []event.Decision{allowed(now, "limiter-1", "198.51.100.10", "/api/books/1")})
	waitConsuming(t, detector, 1)

	rds.Kill()
	const scanner = "203.0.113.68"
	var scan []event.Decision
	for i := range 60 {
		scan = append(scan, allowed(time.Now().UTC(), "limiter-1", scanner, fmt.Sprintf("/api/scan/%d", i)))
	}
	produceByIP(t, e, scan)
	// The Redis client gives up after a few seconds of refused dials.
	testkit.WaitFor(t, 30*time.Second, "the detector to fail a batch", func() bool {
		return detector.metric(t, "rate_limit_detector_batch_failures_total", `source="decisions"`) >= 1
	})
	ends := kafkatest.EndOffsets(t, e.broker.Brokers(), decisionsTopic)
	committed := kafkatest.CommittedOffsets(t, e.broker.Brokers(), group, decisionsTopic)
	if n := uncommitted(ends, committed, slices.Collect(maps.Keys(ends))); n < int64(len(scan)) {
		t.Fatalf("%d messages uncommitted with Redis down, want the scan's %d held (committed %v, end %v)", n, len(scan), committed, ends)
	}
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 0 {
		t.Fatalf("%d ban messages with Redis down, want none", n)
	}
	if n := detector.metric(t, "rate_limit_detector_invalid_events_total", `source="decisions"`) + detector.metric(t, "rate_limit_detector_undecodable_events_total", `source="decisions"`); n != 0 {
		t.Fatalf("%v events skipped during a Redis outage, want none", n)
	}

	redistest.StartServerAt(t, "127.0.0.1:"+port)
	if b := bans(t, e, 1)[0]; b.Subject != scanner || b.Reason != "scan" {
		t.Fatalf("ban after Redis returned: %+v, want the scanner's scan ban", b)
	}
	waitDrained(t, e, group, decisionsTopic, 30*time.Second)
}
