package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

const (
	decisionsTopic = "decisions"
	bansTopic      = "bans"
	outcomesTopic  = "outcomes"
)

// archiverRun is the archiver's run against broker and database db, in
// consumer group group, until stop is called or the test ends.
type archiverRun struct {
	cancel context.CancelFunc
	once   sync.Once
	done   chan error
}

func startArchiver(t *testing.T, broker *kafkatest.Broker, db, group string) *archiverRun {
	t.Helper()
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "DATABASE_URL": db, "LISTEN_ADDR": "127.0.0.1:0",
		"DECISIONS_TOPIC": decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"ARCHIVER_GROUP_ID": group, "ARCHIVER_FLUSH_INTERVAL": "100ms", "ARCHIVER_CONSUMERS": "2",
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &archiverRun{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, nil, func(k string) string { return env[k] }, io.Discard) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the run and waits for it to return.
func (r *archiverRun) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("run did not return within 30s of its cancellation")
		}
	})
}

// produce publishes values on topic and waits until all are acknowledged.
func produce(t *testing.T, broker *kafkatest.Broker, topic string, values ...[]byte) {
	t.Helper()
	p, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: broker.Brokers(), Topic: topic,
		QueueSize: len(values) + 1, MaxInFlight: len(values) + 1}, zap.NewNop(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if !p.Publish([]byte("k"), v) {
			t.Fatal("message dropped")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func count(t *testing.T, db, query string) int {
	t.Helper()
	n, err := tryCount(db, query)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// tryCount runs a query returning one integer; an error (the schema not
// made yet) is returned.
func tryCount(db, query string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, query).Scan(&n)
	return n, err
}

// counts reports whether query counts want, once the schema is made.
func counts(db, query string, want int) bool {
	n, err := tryCount(db, query)
	return err == nil && n == want
}

// outcomes returns n encoded outcomes, every third a failure.
func outcomes(n int) [][]byte {
	out := make([][]byte, n)
	now := time.Now().UTC()
	for i := range out {
		o := event.Outcome{EventID: uuid.NewString(), TS: now.Add(time.Duration(i) * time.Millisecond), Instance: "limiter-1",
			UserID: fmt.Sprintf("u-%d", i%5), IP: fmt.Sprintf("192.0.2.%d", i%9+1), Endpoint: "/api/login", Method: "POST",
			Status: 200, Cost: 1}
		if i%3 == 0 {
			o.Status = 401
		}
		out[i] = o.AppendJSON(nil)
	}
	return out
}

// An outcome is one row whether it comes again at a new offset (a producer
// retry) or at the same offset (a redelivery: the offsets of the first run
// were never committed); what is not a valid outcome is a dead letter.
func TestArchivesOutcomesOnce(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	db := pgtest.Database(t)
	group := "archiver-" + uuid.NewString()
	const n = 60
	msgs := outcomes(n)
	invalid := event.Outcome{EventID: uuid.NewString(), TS: time.Now().UTC(), IP: "192.0.2.1", Endpoint: "/", Status: 700}
	produce(t, broker, outcomesTopic, msgs...)
	produce(t, broker, outcomesTopic, append(append([][]byte{}, msgs...), []byte("{not json"), invalid.AppendJSON(nil))...)

	const rows, deadLetters = "SELECT count(*) FROM outcomes", "SELECT count(*) FROM dead_letters WHERE topic = 'outcomes'"
	restore := broker.FailCommits(group)
	first := startArchiver(t, broker, db, group)
	testkit.WaitFor(t, time.Minute, "the outcomes and dead letters", func() bool {
		return counts(db, rows, n) && counts(db, deadLetters, 2)
	})
	first.stop(t)
	restore()
	if got := kafkatest.CommittedOffsets(t, broker.Brokers(), group, outcomesTopic); sum(got) != 0 {
		t.Fatalf("offsets %v committed while commits failed", got)
	}

	startArchiver(t, broker, db, group)
	end := kafkatest.EndOffsets(t, broker.Brokers(), outcomesTopic)
	testkit.WaitFor(t, time.Minute, "the redelivered batch to be committed", func() bool {
		committed := kafkatest.CommittedOffsets(t, broker.Brokers(), group, outcomesTopic)
		for p, off := range end {
			if off > 0 && committed[p] != off { // an empty partition has nothing to commit
				return false
			}
		}
		return true
	})
	if got, distinct := count(t, db, rows), count(t, db, "SELECT count(DISTINCT event_id) FROM outcomes"); got != n || distinct != n {
		t.Errorf("%d outcome rows (%d distinct) after two deliveries of every message, want %d", got, distinct, n)
	}
	if got := count(t, db, deadLetters); got != 2 {
		t.Errorf("%d dead letters, want 2", got)
	}
	errText := ""
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT string_agg(error, ' | ' ORDER BY "offset") FROM dead_letters`).Scan(&errText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errText, "decode outcome") || !strings.Contains(errText, "status") {
		t.Errorf("dead letters' errors %q, want the decoding error and the status", errText)
	}
	if got := count(t, db, "SELECT count(*) FROM failures_per_source_1h"); got != 3 {
		t.Errorf("failures_per_source_1h has %d sources, want 3 (every third outcome fails, from 3 of the 9 IPs)", got)
	}
}

func sum(m map[int]int64) int64 {
	var s int64
	for _, v := range m {
		s += max(v, 0)
	}
	return s
}

// A broker without the outcomes topic (one not created yet) does not keep
// the decisions from being archived.
func TestMissingOutcomesTopic(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic)
	db := pgtest.Database(t)
	ev := event.Decision{EventID: uuid.NewString(), TS: time.Now().UTC(), Instance: "limiter-1", IP: "192.0.2.1",
		Endpoint: "/api/login", Method: "POST", RuleID: "login", Algorithm: "sliding_window", Reason: event.ReasonRateLimited,
		Limit: 5, Mode: "redis"}
	produce(t, broker, decisionsTopic, ev.AppendJSON(nil))
	startArchiver(t, broker, db, "archiver-"+uuid.NewString())
	testkit.WaitFor(t, time.Minute, "the violation", func() bool {
		return counts(db, "SELECT count(*) FROM rate_limit_violations", 1)
	})
}
