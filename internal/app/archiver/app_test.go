package archiver

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/pgtest"
)

const decisionsTopic, bansTopic, outcomesTopic = "decisions", "bans", "outcomes"

// testConfig is the archiver's configuration as the environment env
// (over the defaults) gives it, on broker and database db.
func testConfig(t *testing.T, broker *kafkatest.Broker, db, group string) config.Archiver {
	t.Helper()
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "DATABASE_URL": db, "LISTEN_ADDR": "127.0.0.1:0",
		"DECISIONS_TOPIC": decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"ARCHIVER_GROUP_ID": group, "ARCHIVER_FLUSH_INTERVAL": "100ms",
	}
	cfg, err := config.LoadArchiver(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// running is one archiver's Run on a goroutine.
type running struct {
	app *App
	*testkit.Running
}

func start(t *testing.T, cfg config.Archiver, name string) *running {
	t.Helper()
	a, err := New(context.Background(), cfg, Deps{Log: zaptest.NewLogger(t).Named(name), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	r := &running{app: a, Running: testkit.Start(t, a.Run)}
	return r
}

// Two archivers assembled in one process share the consumer group: the
// violations are archived once each, both answer on ops listeners of
// their own, and both stop cleanly.
func TestTwoArchiversInOneProcess(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	db := pgtest.Database(t)
	cfg := testConfig(t, broker, db, "archiver-"+uuid.NewString())
	first, second := start(t, cfg, "first"), start(t, cfg, "second")

	for _, r := range []*running{first, second} {
		testkit.WaitFor(t, time.Minute, "the ops listener", func() bool { return r.app.Addr() != "" })
		testkit.WaitFor(t, time.Minute, "readiness", func() bool { return status(r.app.Addr(), "/readyz") == http.StatusOK })
	}
	if first.app.Addr() == second.app.Addr() {
		t.Fatalf("both archivers report the address %s", first.app.Addr())
	}

	const n = 24
	values := make([][]byte, n)
	for i := range values {
		ev := event.Decision{EventID: uuid.NewString(), TS: time.Now().UTC(), Instance: "limiter-1",
			IP: fmt.Sprintf("192.0.2.%d", i+1), Endpoint: "/api/login", Method: "POST", RuleID: "login",
			Algorithm: "sliding_window", Reason: event.ReasonRateLimited, Limit: 5, Mode: "redis"}
		values[i] = ev.AppendJSON(nil)
	}
	msgs := make([]kafka.Message, len(values))
	for i, v := range values {
		msgs[i] = kafka.Message{Key: fmt.Append(nil, "k", i), Value: v}
	}
	kafkatest.Produce(t, broker.Brokers(), decisionsTopic, msgs...)
	const rows = "SELECT count(*) FROM rate_limit_violations"
	testkit.WaitFor(t, time.Minute, "the violations", func() bool { got, err := tryCount(db, rows); return err == nil && got >= n })

	first.Stop(t)
	second.Stop(t)
	if got, err := tryCount(db, "SELECT count(DISTINCT event_id) FROM rate_limit_violations"); err != nil || got != n {
		t.Errorf("%d distinct violations (%v), want %d", got, err, n)
	}
	if got, err := tryCount(db, rows); err != nil || got != n {
		t.Errorf("%d violation rows (%v), want %d", got, err, n)
	}
	for _, r := range []*running{first, second} {
		if err := r.app.store.Ping(context.Background()); err == nil {
			t.Error("the database is still open after Run returned")
		}
	}
}

// Run releases the database even when its context ended before it started
// anything: New's callers need not know what New opened.
func TestRunAfterCancelClosesTheDatabase(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	cfg := testConfig(t, broker, pgtest.Database(t), "archiver-"+uuid.NewString())
	a, err := New(context.Background(), cfg, Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.store.Ping(context.Background()); err != nil {
		t.Fatalf("the database does not answer after New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := a.store.Ping(context.Background()); err == nil {
		t.Error("the database is still open after Run returned")
	}
	if a.Addr() != "" {
		t.Errorf("Addr %q, want none: nothing was served", a.Addr())
	}
}

func TestNewRequiresLoggerAndRegistry(t *testing.T) {
	if _, err := New(context.Background(), config.Archiver{}, Deps{}); err == nil {
		t.Error("New accepted no logger and no registry")
	}
}

// tryCount runs a query returning one integer.
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

// status returns the status of GET path on addr, 0 when it cannot be had.
func status(addr, path string) int {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
