package detector

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	decisionsTopic, bansTopic, outcomesTopic = "decisions", "bans", "outcomes"
	// rulesYAML bans an IP at its third violation within a minute.
	rulesYAML = `
rules:
  - id: login
    match: {endpoints: ["/api/login"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1s}]
detection:
  ban: [{violations: 3, within: 1m, duration: 1h}]
`
)

// testConfig is the detector's configuration on broker and the test
// Redis under prefix, with rulesYAML, as the environment gives it.
func testConfig(t *testing.T, broker *kafkatest.Broker, prefix string) config.Detector {
	t.Helper()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": redistest.URL(), "REDIS_KEY_PREFIX": prefix,
		"LISTEN_ADDR": "127.0.0.1:0", "RULES_FILE": rulesFile, "DETECTOR_GROUP_ID": "detector-" + uuid.NewString(),
		"DECISIONS_TOPIC": decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"DETECTOR_BATCH_WAIT": "20ms",
	}
	cfg, err := config.LoadDetector(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A detector assembled in the test's process reads a stream of decisions
// in which one IP is rate limited three times, bans it on the ban topic
// and in the Redis blacklist, answers on its ops listener, and stops
// cleanly.
func TestDetectorBansFromTheDecisionStream(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	client := redistest.Client(t)
	prefix := redistest.Prefix(t, client)
	a, err := New(testConfig(t, broker, prefix), Deps{Log: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})

	const ip = "203.0.113.9"
	now := time.Now().UTC()
	var decisions []kafka.Message
	for i := range 3 {
		ev := event.Decision{EventID: uuid.NewString(), TS: now.Add(time.Duration(i) * time.Millisecond), Instance: "limiter-1",
			IP: ip, Endpoint: "/api/login", Method: "POST", RuleID: "login", Algorithm: "sliding_window",
			Reason: event.ReasonRateLimited, Limit: 5, Mode: "redis"}
		decisions = append(decisions, kafka.Message{Key: []byte(ip), Value: ev.AppendJSON(nil)})
	}
	kafkatest.Produce(t, broker.Brokers(), decisionsTopic, decisions...)

	msgs := kafkatest.ReadMessages(t, broker.Brokers(), bansTopic, 1, time.Minute)
	ban, err := event.DecodeBan(msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	if ban.Action != event.ActionBan || ban.Scope != event.ScopeIP || ban.Subject != ip || ban.Count != 3 {
		t.Errorf("ban %+v, want the IP banned after 3 violations", ban)
	}
	held, ok, err := redisfleet.NewBlacklist(client, prefix).Lookup(context.Background(), event.ScopeIP, ip, time.Now())
	if err != nil || !ok || held.BanID != ban.BanID {
		t.Errorf("blacklist holds %+v, %v (%v), want ban %s", held, ok, err, ban.BanID)
	}
	if a.Addr() == "" {
		t.Fatal("no ops address while consuming")
	}
	if got := status(a.Addr(), "/readyz"); got != http.StatusOK {
		t.Errorf("/readyz answers %d, want 200", got)
	}

	cancel()
	stopped = true
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of its cancellation")
	}
	if err := a.rdb.Ping(context.Background()).Err(); err == nil {
		t.Error("the Redis client is still open after Run returned")
	}
}

// Run releases the clients New opened even when its context ended before
// it started anything.
func TestRunAfterCancelClosesRedis(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	client := redistest.Client(t)
	a, err := New(testConfig(t, broker, redistest.Prefix(t, client)), Deps{Log: zap.NewNop(), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis does not answer after New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if err := a.rdb.Ping(context.Background()).Err(); err == nil {
		t.Error("the Redis client is still open after Run returned")
	}
	if a.Addr() != "" {
		t.Errorf("Addr %q, want none: nothing was served", a.Addr())
	}
}

func TestNewRequiresLoggerAndRegistry(t *testing.T) {
	if _, err := New(config.Detector{}, Deps{}); err == nil {
		t.Error("New accepted no logger and no registry")
	}
}

// status returns the status of GET path on addr, 0 when it cannot be had.
func status(addr, path string) int {
	resp, err := http.Get(fmt.Sprintf("http://%s%s", addr, path))
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
