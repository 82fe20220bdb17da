package limiter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/ratewarden/ratewarden/internal/config"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

const (
	decisionsTopic, bansTopic, outcomesTopic = "decisions", "bans", "outcomes"
	// limit is what rulesYAML admits per address and hour, across every
	// limiter; the tests that count it start away from the hour's end.
	limit     = 10
	rulesYAML = `
rules:
  - id: per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1h}]
`
)

// testConfig is one limiter's configuration on broker and the test Redis
// under prefix, as the environment gives it, with env's entries added.
func testConfig(t *testing.T, broker *kafkatest.Broker, prefix, rulesFile string, env map[string]string) config.Limiter {
	t.Helper()
	base := map[string]string{
		"KAFKA_BROKERS": broker.Addr(), "REDIS_URL": redistest.RequiredURL(t), "REDIS_KEY_PREFIX": prefix,
		"LISTEN_ADDR": "127.0.0.1:0", "RULES_FILE": rulesFile,
		"DECISIONS_TOPIC": decisionsTopic, "BANS_TOPIC": bansTopic, "OUTCOMES_TOPIC": outcomesTopic,
		"GRPC_LISTEN_ADDR": "off",
	}
	for k, v := range env {
		base[k] = v
	}
	cfg, err := config.LoadLimiter(func(k string) string { return base[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start runs a on its own goroutine until the test ends, and waits for its
// listeners.
func start(t *testing.T, a *App) {
	t.Helper()
	testkit.Start(t, a.Run)
	testkit.WaitFor(t, 10*time.Second, "the limiter's listeners", func() bool { return a.Addrs().Decisions != "" })
}

// Three limiters assembled in one process, each with its own listeners and
// metrics, share one budget exactly: of 60 concurrent checks of one
// address spread over them, limit are admitted. Each serves its own
// routes: the first its operational routes on OPS_LISTEN_ADDR, the second
// Envoy's API on GRPC_LISTEN_ADDR.
func TestLimitersInOneProcessShareABudget(t *testing.T) {
	testkit.AvoidHourEnd(t)
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	prefix := redistest.Prefix(t, redistest.Client(t))
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	// A round trip past REDIS_TIMEOUT is refused (and what Redis admitted
	// for it given back later): exactness is what this test asserts, so a
	// loaded machine's slow round trip must not count as a failed one.
	slowOK := "5s"
	extra := []map[string]string{
		{"INSTANCE_ID": "one", "OPS_LISTEN_ADDR": "127.0.0.1:0", "REDIS_TIMEOUT": slowOK},
		{"INSTANCE_ID": "two", "GRPC_LISTEN_ADDR": "127.0.0.1:0", "REDIS_TIMEOUT": slowOK},
		{"INSTANCE_ID": "three", "REDIS_TIMEOUT": slowOK},
	}
	apps := make([]*App, len(extra))
	registries := make([]*prometheus.Registry, len(extra))
	for i, env := range extra {
		registries[i] = prometheus.NewRegistry()
		a, err := New(testConfig(t, broker, prefix, rulesFile, env), Deps{Log: zaptest.NewLogger(t), Registry: registries[i]})
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		apps[i] = a
	}
	if addrs := apps[0].Addrs(); addrs.Ops == "" || addrs.GRPC != "" {
		t.Fatalf("first limiter's addresses %+v: want an ops address and no gRPC", addrs)
	}
	if addrs := apps[1].Addrs(); addrs.GRPC == "" || addrs.Ops != "" {
		t.Fatalf("second limiter's addresses %+v: want a gRPC address and no ops", addrs)
	}

	const checks = 60
	var (
		mu       sync.Mutex
		admitted int
		answers  = map[string]int{} // by verdict, reason and mode, for the failure message
	)
	var wg sync.WaitGroup
	for i := range checks {
		wg.Go(func() {
			d := check(t, apps[i%len(apps)].Addrs().Decisions, "203.0.113.7")
			mu.Lock()
			defer mu.Unlock()
			if d.Allowed {
				admitted++
			}
			answers[fmt.Sprintf("allowed=%v %s %s", d.Allowed, d.Reason, d.Mode)]++
		})
	}
	wg.Wait()
	if admitted != limit {
		t.Fatalf("admitted %d of %d checks across %d limiters, want exactly %d; answers %v", admitted, checks, len(apps), limit, answers)
	}
	// Each limiter counted its own share in its own registry.
	var total float64
	for i, reg := range registries {
		n := testkit.MetricSum(t, reg, "rate_limit_requests_total", nil)
		if n != checks/float64(len(apps)) {
			t.Errorf("limiter %d counted %v decisions, want %d", i, n, checks/len(apps))
		}
		total += n
	}
	if total != checks {
		t.Fatalf("decisions counted %v across the registries, want %d", total, checks)
	}
	// The first limiter's metrics are on its ops port, not its decision port.
	if status := get(t, "http://"+apps[0].Addrs().Ops+"/metrics"); status != http.StatusOK {
		t.Fatalf("ops /metrics: %d", status)
	}
	if status := get(t, "http://"+apps[0].Addrs().Decisions+"/metrics"); status != http.StatusNotFound {
		t.Fatalf("decision port /metrics with OPS_LISTEN_ADDR set: %d, want 404", status)
	}
	if status := get(t, "http://"+apps[2].Addrs().Decisions+"/metrics"); status != http.StatusOK {
		t.Fatalf("decision port /metrics without OPS_LISTEN_ADDR: %d", status)
	}
}

// answer is what a check answered, of what these tests read.
type answer struct {
	Allowed bool   `json:"allowed"`
	RuleID  string `json:"rule_id"`
	Reason  string `json:"reason"`
	Mode    string `json:"mode"`
}

// check asks the limiter at addr for a decision for ip.
func check(t *testing.T, addr, ip string) answer {
	body := fmt.Sprintf(`{"ip":%q,"endpoint":"/api/books/1"}`, ip)
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return answer{}
	}
	defer resp.Body.Close()
	var d answer
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK || d.RuleID != "per-ip" {
		t.Errorf("check: status %d, rule %q, %v", resp.StatusCode, d.RuleID, err)
	}
	return d
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A limiter whose Run is handed a context that has already ended starts
// nothing, returns at once and still releases its clients.
func TestRunWithAnEndedContext(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	prefix := redistest.Prefix(t, redistest.Client(t))
	a, err := New(testConfig(t, broker, prefix, "../../../deploy/rules.example.yaml", nil),
		Deps{Log: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if addrs := a.Addrs(); addrs != (Addrs{}) {
		t.Fatalf("addresses %+v after a run that never started", addrs)
	}
	if err := a.rdb.Ping(context.Background()).Err(); err == nil {
		t.Fatal("the Redis client still answers after Run returned")
	}
}

func TestNewRequiresALoggerAndARegistry(t *testing.T) {
	if _, err := New(config.Limiter{}, Deps{}); err == nil {
		t.Fatal("New without a logger or a registry succeeded")
	}
}

// A limiter whose Redis does not answer still starts, once the warm-up has
// given up, in local mode, and stays in the load balancer: /readyz answers
// 200 and says the mode, and the rule's local limit decides.
func TestStartsInLocalModeWithoutRedis(t *testing.T) {
	testkit.AvoidHourEnd(t) // the local limit counts in memory, in the hour's window
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, broker, "rwtest:dead:", rulesFile, map[string]string{
		"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_WARMUP_TIMEOUT": "200ms",
		"LOCAL_EXPECTED_INSTANCES": "1",
	})
	a, err := New(cfg, Deps{Log: zaptest.NewLogger(t), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	resp, err := http.Get("http://" + a.Addrs().Decisions + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ready struct {
		Mode   string            `json:"mode"`
		Checks map[string]string `json:"checks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ready); err != nil || resp.StatusCode != http.StatusOK || ready.Mode != "local" ||
		!strings.HasPrefix(ready.Checks["redis"], "down") {
		t.Fatalf("/readyz: status %d, mode %q, checks %v (%v); want 200, local and redis down", resp.StatusCode, ready.Mode, ready.Checks, err)
	}
	admitted := 0
	for range limit + 5 {
		if check(t, a.Addrs().Decisions, "203.0.113.8").Allowed {
			admitted++
		}
	}
	if admitted != limit {
		t.Fatalf("admitted %d in local mode, want the rule's %d (one live limiter)", admitted, limit)
	}
}

// A limiter told to stop while it waits for its first RLS config from an
// xDS server that never answers stops cleanly: Run returns nil (the
// process exits 0), and nothing listened.
func TestStopWhileWaitingForTheFirstXDSConfig(t *testing.T) {
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	prefix := redistest.Prefix(t, redistest.Client(t))
	cfg := testConfig(t, broker, prefix, "../../../deploy/rules.example.yaml", map[string]string{
		"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_ID": "test-node",
		"CONFIG_GRPC_XDS_SERVER_URL": "127.0.0.1:1", // refuses every connection
	})
	reg := prometheus.NewRegistry()
	a, err := New(cfg, Deps{Log: zaptest.NewLogger(t), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	run := testkit.Start(t, a.Run)
	// The wait has begun once the xDS client has tried the server.
	testkit.WaitFor(t, 10*time.Second, "a failed attempt to reach the xDS server", func() bool {
		return testkit.MetricSum(t, reg, "rate_limit_xds_connection_failures_total", nil) > 0
	})
	run.Stop(t) // Run must return nil: a stop, not a failure
	if addrs := a.Addrs(); addrs != (Addrs{}) {
		t.Fatalf("listened at %+v before its first rules", addrs)
	}
}
