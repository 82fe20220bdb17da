package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/bearer"
	"github.com/ratewarden/ratewarden/internal/httpapi"
	"github.com/ratewarden/ratewarden/internal/kafkabus"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/ops"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// The topics of the decisions and of the outcome reports.
const (
	topic         = "ratelimit.decisions"
	outcomesTopic = "ratelimit.outcomes"
)

// stack is one limiter instance over HTTP, on the real local Redis and an
// embedded Kafka broker.
type stack struct {
	t        testing.TB
	url      string                  // http://host:port
	handler  fasthttp.RequestHandler // what the listener serves
	reg      *prometheus.Registry
	producer *kafkabus.Producer
	client   *http.Client
	opts     stackOptions
	fixed    *fixedLimiter // newFixedStack's: what it was asked
}

// shared returns what a second instance needs to share this one's limits.
func (s *stack) shared() (redis.UniversalClient, string, *kafkatest.Broker) {
	return s.opts.rdb, s.opts.prefix, s.opts.broker
}

type stackOptions struct {
	rules     string
	prefix    string // shared prefix: several instances on one Redis
	rdb       redis.UniversalClient
	broker    *kafkatest.Broker
	queueSize int
	// overLimitCache sizes the limiter's over-limit cache; 0: off.
	overLimitCache int
	// wrapDecider, when set, wraps the decider the limiter decides with
	// (the coalescer over the real Redis).
	wrapDecider func(limiter.Decider) limiter.Decider
	configure   func(*stackConfig)
	// start starts the limiter's background work (Service.Start: the lease
	// renewer), as the service does.
	start bool
}

// stackConfig is what a test may set of the limiter a stack builds: the
// decision API's configuration and the tokens of its gate. (The admin API,
// served beside it by adminapi.Beside, is tested in package adminapi.)
type stackConfig struct {
	httpapi.Config
	APITokens []string
}

func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	if o.rdb == nil {
		o.rdb = redistest.Client(t)
	}
	if o.prefix == "" {
		o.prefix = redistest.Prefix(t, o.rdb)
	}
	if o.broker == nil {
		o.broker = kafkatest.StartBroker(t, topic, outcomesTopic)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(o.rules), 0o600); err != nil {
		t.Fatal(err)
	}
	file, err := rules.LoadFile(path)
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: o.prefix})
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	log := zap.NewNop()
	reg := prometheus.NewRegistry()
	producer, err := kafkabus.NewProducer(kafkabus.ProducerConfig{
		Brokers: o.broker.Brokers(), Topic: topic, QueueSize: o.queueSize, MaxInFlight: o.queueSize,
	}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	outcomes, err := kafkabus.NewProducer(kafkabus.ProducerConfig{Brokers: o.broker.Brokers(), Topic: outcomesTopic}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	// As in production: decisions share pipelines through the coalescer.
	svc := limitertest.Service(t, redisstore.New(o.rdb), set, limitertest.Options{
		Limiter:  limiter.Config{Instance: "test", OverLimitCacheSize: o.overLimitCache, Outcomes: outcomes},
		Coalesce: redisstore.CoalesceConfig{Timeout: 5 * time.Second}, Wrap: o.wrapDecider,
		Events: producer, Log: log, Registerer: reg,
	})
	if o.start {
		svc.Start()
		t.Cleanup(svc.Stop)
	}
	cfg := stackConfig{Config: httpapi.Config{Service: svc, Log: log}}
	if o.configure != nil {
		o.configure(&cfg)
	}
	s := serveStack(t, cfg, reg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = producer.Close(ctx)
		_ = outcomes.Close(ctx)
	})
	s.producer, s.opts = producer, o
	return s
}

// serveStack serves cfg's decision API on a loopback port until the test
// ends, on the limiter's fasthttp listener, with a gate of cfg.APITokens;
// reg is read by the stack's metric. What the limiter serves beside it
// (the admin API, the operational routes) is its assembly's
// (internal/app/limiter).
func serveStack(t testing.TB, cfg stackConfig, reg *prometheus.Registry) *stack {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	cfg.Gate = bearer.NewGate("decisions", "ratewarden", cfg.APITokens, cfg.Log, reg)
	handler := httpapi.NewFastHandler(cfg.Config, httpapi.NewHandler(cfg.Config))
	url := serve(t, &ops.Listener{Fast: handler})
	// Redirects are not followed: a gateway would hand them to its client.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(client.CloseIdleConnections)
	return &stack{t: t, url: url, handler: handler, reg: reg, client: client}
}

// serve serves l (its handler set) on a loopback port as the limiter serves
// its decision port until the test ends, and returns its URL.
func serve(t testing.TB, l *ops.Listener) string {
	t.Helper()
	l.Var, l.Addr, l.Log = "LISTEN_ADDR", "127.0.0.1:0", zap.NewNop()
	if err := l.Listen(context.Background()); err != nil {
		t.Fatal(err)
	}
	go func() { _ = l.Serve(context.Background()) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Shutdown(ctx)
	})
	return "http://" + l.Address()
}

// response is a decoded /v1/check or /v1/auth answer.
type response struct {
	Status       int
	Header       http.Header
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason"`
	RuleID       string `json:"rule_id"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMs int64  `json:"reset_after_ms"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	Mode         string `json:"mode"`
	Shadow       bool   `json:"shadow"`
	EventID      string `json:"event_id"`
	Error        string `json:"error"`
	// OnRedisFailure marks a 503: the failure policy of the rule (RuleID)
	// that could not be decided.
	OnRedisFailure string `json:"on_redis_failure"`
}

func (s *stack) check(body string) response {
	s.t.Helper()
	return s.do(http.MethodPost, "/v1/check", body, nil)
}

func (s *stack) do(method, path, body string, header map[string]string) response {
	s.t.Helper()
	resp, raw := s.send(method, path, body, header)
	r := response{Status: resp.StatusCode, Header: resp.Header}
	if len(bytes.TrimSpace(raw)) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &r); err != nil {
			s.t.Fatalf("%s %s: undecodable body %q: %v", method, path, raw, err)
		}
	}
	return r
}

// send sends a request and returns its response with the whole body read.
func (s *stack) send(method, path, body string, header map[string]string) (*http.Response, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return resp, raw
}

// metric sums the samples of the family name whose labels include want
// (testkit.MetricSum on the stack's registry).
func (s *stack) metric(name string, want map[string]string) float64 {
	s.t.Helper()
	return testkit.MetricSum(s.t, s.reg, name, want)
}
