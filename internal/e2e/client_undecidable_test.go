package e2e

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/client/rlgrpc"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// undecidableRules: /login is refused while Redis is down, /api/** is
// limited in the limiter's memory.
const undecidableRules = `
rules:
  - id: login-deny
    match: {endpoints: ["/login"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 1000, per: 1h}]
    on_redis_failure: deny
  - id: api-local
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 1000, per: 1h}]
    on_redis_failure: local
`

// Redis dies under a limiter with a rule whose on_redis_failure is deny.
// An application behind the Go client's middleware and interceptor, with
// the default FailOpen, serves none of that rule's requests: each is the
// rule's refusal (503 with Retry-After, Unavailable for gRPC), counted once
// by the limiter, and none counts against the breaker, which stays closed:
// the limiter goes on deciding the other rules in memory.
func TestClientDenyRuleUndecidable(t *testing.T) {
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(undecidableRules), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(proctest.FreeAddr(t))
	rds := redistest.StartServerAt(t, "127.0.0.1:"+port)
	broker := kafkatest.StartBroker(t, decisionsTopic, bansTopic, outcomesTopic)
	lim := start(t, "limiter", map[string]string{
		"REDIS_URL":             "redis://127.0.0.1:" + port + "/0",
		"REDIS_KEY_PREFIX":      "rwtest:undecidable:",
		"KAFKA_BROKERS":         broker.Addr(),
		"RULES_FILE":            rulesPath,
		"REDIS_HEALTH_INTERVAL": "200ms",
		"REDIS_FAILED_CHECKS":   "3",
		"PERMISSIVE_AFTER":      "0",
		"DYNAMIC_RULES":         "false",
	})
	testkit.WaitFor(t, 10*time.Second, "mode redis", func() bool { return readyMode(t, lim) == "redis" })

	// A timeout no answer of a limiter on loopback misses: a check the
	// failure policy decides here is one the limiter answered as unavailable.
	c := newClient(t, client.Config{URL: "http://" + lim.addr, Timeout: 10 * time.Second}) // FailOpen, 5 failures open the breaker
	var served atomic.Int64
	app := client.Middleware(c, client.MiddlewareConfig{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		app.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec
	}
	if rec := get("/login"); rec.Code != http.StatusOK || served.Load() != 1 {
		t.Fatalf("Redis up: %d, served %d times", rec.Code, served.Load())
	}

	rds.Kill()
	testkit.WaitFor(t, 10*time.Second, "mode local", func() bool { return readyMode(t, lim) == "local" })
	served.Store(0)
	before := c.Stats()
	const n = 50
	statuses, retryAfter := map[int]int{}, map[string]int{}
	for range n {
		rec := get("/login")
		statuses[rec.Code]++
		retryAfter[rec.Header().Get("Retry-After")]++
	}
	s := c.Stats()
	t.Logf("Redis down, FailOpen: %d of %d requests on the deny rule served; answers %v, Retry-After %v; stats %+v",
		served.Load(), n, statuses, retryAfter, s)
	if served.Load() != 0 || statuses[http.StatusServiceUnavailable] != n || retryAfter["1"] != n {
		t.Fatalf("%d of %d served, answers %v, Retry-After %v: want none served, each 503 with Retry-After: 1",
			served.Load(), n, statuses, retryAfter)
	}
	if s.BreakerOpen != 0 || s.Fallbacks != before.Fallbacks || s.Undecidable-before.Undecidable != n {
		t.Fatalf("stats %+v: want the breaker never open, no fallback, %d refusals by the rule", s, n)
	}
	if got := lim.metric(t, "rate_limit_requests_total", `result="unavailable"`, `rule="login-deny"`); got != n {
		t.Fatalf("the limiter counted %v undecidable checks, want %d: each request reached it", got, n)
	}

	// The limiter still decides the other rules: the breaker is closed.
	for range 5 {
		if rec := get("/api/books/1"); rec.Code != http.StatusOK || rec.Header().Get("X-Ratelimit-Limit") != "1000" {
			t.Fatalf("the local rule: %d, headers %v, want the limiter's admission", rec.Code, rec.Header())
		}
	}
	ds, err := c.CheckBatch(context.Background(), []client.Request{{IP: "192.0.2.9", Endpoint: "/login"}, {IP: "192.0.2.9", Endpoint: "/api/x"}})
	if ds[0].Allowed || ds[0].Reason != client.ReasonUndecidable || ds[0].RuleID != "login-deny" ||
		!ds[1].Allowed || ds[1].Fallback || ds[1].Mode != "local" {
		t.Fatalf("batch: %+v, %v", ds, err)
	}

	var handled atomic.Int64
	conn := serveGRPCHealth(t, grpc.ChainUnaryInterceptor(
		rlgrpc.UnaryServerInterceptor(c, rlgrpc.Config{Endpoint: func(context.Context, string) string { return "/login" }}),
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			handled.Add(1)
			return handler(ctx, req)
		}))
	for range 10 {
		if _, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unavailable {
			t.Fatalf("gRPC: %v, want Unavailable", err)
		}
	}
	if s := c.Stats(); handled.Load() != 0 || s.BreakerOpen != 0 || s.Fallbacks != before.Fallbacks {
		t.Fatalf("gRPC: handled %d times, stats %+v: want none, the breaker never open, no fallback", handled.Load(), s)
	}
}
