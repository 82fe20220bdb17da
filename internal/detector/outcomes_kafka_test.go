package detector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/redisabuse"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// Outcome messages on the outcomes topic, consumed by the outcome service
// on the embedded broker and real Redis, end as bans on the ban topic and
// in the Redis blacklist; a message that is no outcome is counted and
// skipped, and the offsets are committed past everything.
func TestOutcomesEndToEnd(t *testing.T) {
	const outcomesTopic, bansTopic, group = "ratelimit.outcomes", "ratelimit.bans", "detector-test" + OutcomesGroupSuffix
	broker := kafkatest.StartBroker(t, outcomesTopic, bansTopic)
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	publisher, err := kafkabus.NewBanPublisher(broker.Brokers(), bansTopic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = publisher.Close() })
	blacklist := redisfleet.NewBlacklist(client, prefix)
	det := rules.Detection{
		BruteForce: &rules.BruteForcePolicy{Failures: 3, OutcomeScenario: rules.OutcomeScenario{
			Within: rules.Duration(time.Minute), Duration: rules.Duration(time.Hour)}},
	}
	engine, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det},
		redisabuse.NewDistinct(client, prefix), redisabuse.NewLedger(client, prefix, blacklist), publisher)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc := newService(t, zap.NewNop(), reg, Source{Name: SourceOutcomes, Topic: outcomesTopic, Group: group,
		Pipeline: OutcomePipeline(engine, nil, nil)}).Consumers()[0]

	now := time.Now().UTC()
	var msgs []kafka.Message
	for i := range 4 {
		o := event.Outcome{EventID: fmt.Sprint("bf-", i), TS: now.Add(time.Duration(i-5) * time.Second), Instance: "gw-1",
			IP: "203.0.113.77", UserID: "alice", Endpoint: "/api/login", Method: "POST", Status: 401, Cost: 1}
		msgs = append(msgs, kafka.Message{Key: []byte(o.IP), Value: o.AppendJSON(nil)})
	}
	msgs = append(msgs, kafka.Message{Key: []byte("x"), Value: []byte("not json")},
		kafka.Message{Key: []byte("x"), Value: []byte(`{"event_id":"s","ts":"2026-11-21T10:00:00.000000Z","ip":"203.0.113.1","endpoint":"/a","status":999}`)})
	w := &kafka.Writer{Addr: kafka.TCP(broker.Addr()), Topic: outcomesTopic, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll,
		Transport: &kafka.Transport{}} // not the shared default: see kafkabus.NewBanPublisher
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- kafkabus.Consume(runCtx, kafkabus.ConsumerConfig{Brokers: broker.Brokers(), Topic: outcomesTopic, GroupID: group,
			BatchSize: 100, BatchWait: 20 * time.Millisecond, OnStats: svc.ReportStats}, zap.NewNop(), svc.Handle)
	}()
	bans := kafkatest.ReadMessages(t, broker.Brokers(), bansTopic, 1, 20*time.Second)
	b, err := event.DecodeBan(bans[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if b.Reason != abuse.ReasonBruteForce || b.Scope != event.ScopeIP || b.Subject != "203.0.113.77" || b.Count != 4 {
		t.Errorf("ban %+v", b)
	}
	held, ok, err := blacklist.Lookup(ctx, event.ScopeIP, "203.0.113.77", time.Now())
	if err != nil || !ok || held.ExpiresAt.Before(now.Add(50*time.Minute)) {
		t.Errorf("blacklist: %+v, %v, %v", held, ok, err)
	}
	// The committed offsets reach the end of the topic: the bad messages
	// were skipped, not retried.
	end := kafkatest.EndOffsets(t, broker.Brokers(), outcomesTopic)
	deadline := time.Now().Add(20 * time.Second)
	for !mapsEqual(kafkatest.CommittedOffsets(t, broker.Brokers(), group, outcomesTopic), end) {
		if time.Now().After(deadline) {
			t.Fatalf("committed %v, end %v", kafkatest.CommittedOffsets(t, broker.Brokers(), group, outcomesTopic), end)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("consume: %v", err)
	}
	if n := testutil.ToFloat64(svc.metrics.undecodable); n != 1 {
		t.Errorf("undecodable %v, want 1", n)
	}
	if n := testutil.ToFloat64(svc.metrics.invalid.WithLabelValues("status")); n != 1 {
		t.Errorf("invalid status %v, want 1", n)
	}
	if n := testutil.ToFloat64(svc.metrics.bans.WithLabelValues(abuse.ReasonBruteForce)); n != 1 {
		t.Errorf("brute_force bans %v, want 1", n)
	}
	if n := testutil.ToFloat64(svc.metrics.events); n != 4 {
		t.Errorf("outcomes consumed %v, want 4", n)
	}
}

// mapsEqual reports whether committed reaches end on every partition that
// holds messages (an empty one has nothing to commit).
func mapsEqual(committed, end map[int]int64) bool {
	for p, e := range end {
		if e > 0 && committed[p] != e {
			return false
		}
	}
	return true
}

// The outcome series start at 0 for the enabled scenarios' reasons and
// every field an invalid outcome can name, apart from the decisions' on
// the same registry, as cmd/detector registers them.
func TestOutcomeSeriesStartAtZero(t *testing.T) {
	off := false
	det := rules.Detection{Probing: &rules.ProbingPolicy{OutcomeScenario: rules.OutcomeScenario{Enabled: &off}}}
	engine, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	newService(t, zap.NewNop(), reg,
		Source{Name: SourceDecisions, Pipeline: DecisionPipeline(abuse.NewEngine(abuse.Config{}, nil, nil, nil))},
		Source{Name: SourceOutcomes, Pipeline: OutcomePipeline(engine, nil, nil)},
		Source{Name: SourceAccessLog, Pipeline: OutcomePipeline(engine, nil, nil)})
	for _, source := range []string{SourceOutcomes, SourceAccessLog} {
		reasons := atZero(t, reg, source, "reason")
		if want := []string{"account_attack", "brute_force", "credential_stuffing"}; !slices.Equal(reasons["rate_limit_detector_bans_total"], want) {
			t.Errorf("%s: ban reasons %q, want %q", source, reasons["rate_limit_detector_bans_total"], want)
		}
		if want := []string{"account_attack"}; !slices.Equal(reasons["rate_limit_detector_warnings_total"], want) {
			t.Errorf("%s: warning reasons %q, want %q", source, reasons["rate_limit_detector_warnings_total"], want)
		}
		fields := event.InvalidOutcomeFields()
		slices.Sort(fields)
		if got := atZero(t, reg, source, "field")["rate_limit_detector_invalid_events_total"]; !slices.Equal(got, fields) {
			t.Errorf("%s: invalid fields %q, want %q", source, got, fields)
		}
		families := atZero(t, reg, source, "")
		for _, name := range []string{"rate_limit_detector_outcome_failures_total", "rate_limit_detector_outcome_successes_total",
			"rate_limit_detector_outcome_spared_total", "rate_limit_detector_held_account_outcomes_total", "rate_limit_detector_consumer_lag"} {
			if _, ok := families[name]; !ok {
				t.Errorf("no %s{source=%q} at 0", name, source)
			}
		}
	}
}
