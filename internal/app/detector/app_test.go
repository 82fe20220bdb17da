package detector

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	"github.com/ratewarden/ratewarden/internal/testkit"
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
	run := testkit.Start(t, a.Run)

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

	run.Stop(t)
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

// startReloading runs a detector on cfg with a reload channel of the
// test's and returns it with that channel and its registry.
func startReloading(t *testing.T, cfg config.Detector) (*App, chan os.Signal, *prometheus.Registry) {
	t.Helper()
	reload := make(chan os.Signal, 1)
	reg := prometheus.NewRegistry()
	a, err := New(cfg, Deps{Log: zaptest.NewLogger(t), Registry: reg, Reload: reload})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Start(t, a.Run)
	return a, reload, reg
}

// violations produces n rate-limited decisions of ip.
func violations(t *testing.T, broker *kafkatest.Broker, ip string, n int) {
	t.Helper()
	now := time.Now().UTC()
	var decisions []kafka.Message
	for i := range n {
		ev := event.Decision{EventID: uuid.NewString(), TS: now.Add(time.Duration(i) * time.Millisecond), Instance: "limiter-1",
			IP: ip, Endpoint: "/api/login", Method: "POST", RuleID: "login", Algorithm: "sliding_window",
			Reason: event.ReasonRateLimited, Limit: 5, Mode: "redis"}
		decisions = append(decisions, kafka.Message{Key: []byte(ip), Value: ev.AppendJSON(nil)})
	}
	kafkatest.Produce(t, broker.Brokers(), decisionsTopic, decisions...)
}

// firstBan returns the first ban published.
func firstBan(t *testing.T, broker *kafkatest.Broker) event.Ban {
	t.Helper()
	msgs := kafkatest.ReadMessages(t, broker.Brokers(), bansTopic, 1, time.Minute)
	ban, err := event.DecodeBan(msgs[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return ban
}

// lastReload waits until rate_limit_rules_last_reload_successful{source="file"}
// is want and rate_limit_rules_reloads_total{source="file",result} has
// counted one more than at start.
func lastReload(t *testing.T, reg *prometheus.Registry, want float64, result string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var gauge, count float64 = -1, 0
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["source"] != "file" {
					continue
				}
				switch mf.GetName() {
				case "rate_limit_rules_last_reload_successful":
					gauge = m.GetGauge().GetValue()
				case "rate_limit_rules_reloads_total":
					if labels["result"] == result {
						count = m.GetCounter().GetValue()
					}
				}
			}
		}
		if gauge == want && count >= 1 && (result != "success" || count >= 2) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("rule reload gauge %v, %s count %v; want gauge %v after a reload", gauge, result, count, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A rules file whose ban threshold changes is reloaded on the signal and
// its threshold used without a restart: an IP is banned at its second
// violation, which the file the detector started with (three) never does.
func TestDetectorReloadsThresholds(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	client := redistest.Client(t)
	cfg := testConfig(t, broker, redistest.Prefix(t, client))
	cfg.RulesPoll = time.Hour // the signal alone reloads
	_, reload, reg := startReloading(t, cfg)

	if err := os.WriteFile(cfg.RulesFile, []byte(strings.Replace(rulesYAML, "violations: 3", "violations: 2", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- syscall.SIGHUP
	lastReload(t, reg, 1, "success")

	const ip = "203.0.113.10"
	violations(t, broker, ip, 2)
	if ban := firstBan(t, broker); ban.Subject != ip || ban.Count != 2 {
		t.Errorf("ban %+v, want %s banned at its 2nd violation", ban, ip)
	}
}

// A rules file that does not validate is refused, said by the metric, and
// the thresholds in force stay: the refused file's threshold of two is not
// used, the IP is banned at its third violation.
func TestDetectorKeepsThresholdsOfARefusedFile(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	client := redistest.Client(t)
	cfg := testConfig(t, broker, redistest.Prefix(t, client))
	cfg.RulesPoll = time.Hour
	_, reload, reg := startReloading(t, cfg)

	bad := strings.Replace(strings.Replace(rulesYAML, "violations: 3", "violations: 2", 1), "sliding_window", "no_such_algorithm", 1)
	if err := os.WriteFile(cfg.RulesFile, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	reload <- syscall.SIGHUP
	lastReload(t, reg, 0, "failure")

	const ip = "203.0.113.11"
	violations(t, broker, ip, 3)
	if ban := firstBan(t, broker); ban.Subject != ip || ban.Count != 3 {
		t.Errorf("ban %+v, want %s banned at its 3rd violation, as the file in force says", ban, ip)
	}
}
