package limiter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

var errDown = errors.New("redis down")

// unreachedInTests is Backend.Unreached for the fakes: errDown and a node
// refusing connections say the calls never reached Redis.
func unreachedInTests(err error) bool {
	return errors.Is(err, errDown) || errors.As(err, new(nodeDown))
}

// fakeErrors reads the fakes' errors as redisstore reads its own:
// unreachedInTests, and with breaker errBreakerOpen says the breaker is
// open. Every class is "other", as OpaqueErrors's.
type fakeErrors struct {
	Backend
	breaker bool
}

func (fakeErrors) Unreached(err error) bool { return unreachedInTests(err) }

func (f fakeErrors) BreakerOpen(err error) bool { return f.breaker && errors.Is(err, errBreakerOpen) }

// errBreakerOpen is the fake Decider's breaker: open after
// fakeBreakerFailures round trips in a row that could not reach Redis, as
// redisstore's lanes open theirs.
var errBreakerOpen = errors.New("breaker open")

const fakeBreakerFailures = 5

// fakeDecider answers every call allowed, or fails while down; it counts
// the round trips it was asked for.
type fakeDecider struct {
	mu       sync.Mutex
	down     bool
	err      error // the error while down; nil: errDown
	calls    int
	failures int // in a row
}

func (c *fakeDecider) Decide(_ context.Context, calls []decide.Call) ([]decide.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.down {
		err := c.err
		if err == nil {
			err = errDown
		}
		// A slow Redis's timeouts do not open it: redisstore's lanes ping a
		// node before they take it for down.
		if c.failures++; c.failures >= fakeBreakerFailures && unreachedInTests(err) {
			return nil, fmt.Errorf("%w: %w", errBreakerOpen, err)
		}
		return nil, err
	}
	c.failures = 0
	out := make([]decide.Result, len(calls))
	for i, call := range calls {
		q := call.Limits[0].Quota()
		out[i] = decide.Result{Allowed: true, Limit: q, Remaining: q - 1}
	}
	return out, nil
}

func (c *fakeDecider) set(down bool) { c.mu.Lock(); c.down = down; c.mu.Unlock() }
func (c *fakeDecider) trips() int    { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

// fakeHealth fails while down and reports live instances otherwise.
type fakeHealth struct {
	mu   sync.Mutex
	down bool
	live int
}

func (h *fakeHealth) Beat(context.Context, time.Time) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return 0, errDown
	}
	return h.live, nil
}

type nopPublisher struct{}

func (nopPublisher) Publish(_, _ []byte) bool { return true }

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

const modeRules = `
rules:
  - id: local-rule
    match: {endpoints: ["/local"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1h}]
    on_redis_failure: local
  - id: allow-rule
    match: {endpoints: ["/allow"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
    on_redis_failure: allow
  - id: deny-rule
    match: {endpoints: ["/deny"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
    on_redis_failure: deny
`

// compileRules parses and compiles a rules file under the key prefix "t:".
func compileRules(t *testing.T, yaml string) *rules.Set {
	t.Helper()
	file, err := rules.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Compile(file, rules.Options{KeyPrefix: "t:"})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

type modeFixture struct {
	svc     *Service
	decider *fakeDecider
	health  *fakeHealth
	clock   *fakeClock
	reg     *prometheus.Registry
	logs    *observer.ObservedLogs
}

func newModeFixture(t *testing.T, permissiveDeny bool) *modeFixture {
	t.Helper()
	set := compileRules(t, modeRules)
	core, logs := observer.New(zap.InfoLevel)
	f := &modeFixture{decider: &fakeDecider{}, health: &fakeHealth{live: 1},
		clock: &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}, reg: prometheus.NewRegistry(), logs: logs}
	f.svc = New(Config{
		Instance:            "test",
		Now:                 f.clock.Now,
		Mode:                ModeConfig{FailedChecks: 3, PermissiveAfter: 5 * time.Minute, RecoverAfter: time.Minute},
		PermissiveDenyRules: permissiveDeny,
		Health:              f.health,
	}, set, fakeErrors{Backend: OpaqueErrors(f.decider), breaker: true}, nopPublisher{}, zap.New(core), f.reg)
	return f
}

func (f *modeFixture) check(endpoint, ip string) *Decision {
	d := new(Decision)
	f.svc.Check(context.Background(), &rules.Request{IP: ip, Endpoint: endpoint, Method: "GET", Cost: 1}, d)
	return d
}

// beat runs one health check, then moves the clock on by interval.
func (f *modeFixture) beat(interval time.Duration) {
	f.svc.checkHealth(context.Background())
	f.clock.advance(interval)
}

func (f *modeFixture) gauge(mode Mode) float64 {
	return testutil.ToFloat64(f.svc.metrics.mode.WithLabelValues(string(mode)))
}

func (f *modeFixture) requireMode(t *testing.T, want Mode) {
	t.Helper()
	if got := f.svc.Mode(); got != want {
		t.Fatalf("mode = %s, want %s", got, want)
	}
	for _, m := range []Mode{ModeRedis, ModeLocal, ModePermissive} {
		want1 := 0.0
		if m == want {
			want1 = 1
		}
		if g := f.gauge(m); g != want1 {
			t.Fatalf("rate_limit_mode{mode=%q} = %v, want %v", m, g, want1)
		}
	}
}

func TestBreakerOpensAndHealthClosesIt(t *testing.T) {
	f := newModeFixture(t, false)
	f.requireMode(t, ModeRedis)
	if d := f.check("/local", "192.0.2.1"); !d.Allowed || d.Mode != ModeRedis {
		t.Fatalf("healthy: %+v", d)
	}
	f.decider.set(true)
	f.health.down = true
	for i := range 5 {
		d := f.check("/allow", "192.0.2.1")
		if !d.Allowed || d.Mode != ModeLocal {
			t.Fatalf("failed round trip %d: want allowed in mode local, got %+v", i, d)
		}
	}
	f.requireMode(t, ModeLocal)
	before := f.decider.trips()
	for range 20 {
		f.check("/allow", "192.0.2.1")
		f.check("/local", "192.0.2.1")
	}
	if f.decider.trips() != before {
		t.Fatalf("breaker open but Redis was called %d more times", f.decider.trips()-before)
	}
	if f.logs.FilterMessage("limiter mode changed").FilterField(zap.String("reason", "breaker opened")).Len() != 1 {
		t.Fatalf("transition not logged: %v", f.logs.All())
	}

	// Redis answers again: the mode returns after a minute of healthy checks.
	f.decider.set(false)
	f.health.mu.Lock()
	f.health.down = false
	f.health.mu.Unlock()
	for range 12 { // 0s .. 55s
		f.beat(5 * time.Second)
		f.requireMode(t, ModeLocal)
	}
	f.beat(5 * time.Second) // 60s
	f.requireMode(t, ModeRedis)
	if d := f.check("/local", "192.0.2.1"); d.Mode != ModeRedis || f.decider.trips() != before+1 {
		t.Fatalf("closed breaker must call Redis: %+v, trips %d", d, f.decider.trips()-before)
	}
	// The Decider's breaker counts from zero again.
	f.decider.set(true)
	for range 4 {
		f.check("/local", "192.0.2.1")
	}
	f.requireMode(t, ModeRedis)
}

// nodeDown is the error of a Redis Cluster node failing; partial while
// other nodes answer.
type nodeDown struct{ partial bool }

func (e nodeDown) Error() string        { return "redis node 127.0.0.1:7000: connection refused" }
func (e nodeDown) PartialFailure() bool { return e.partial }

// One cluster node failing falls back the requests it serves, but leaves the
// mode in redis for the others; the whole cluster failing opens the breaker.
func TestPartialFailureKeepsRedisMode(t *testing.T) {
	f := newModeFixture(t, false)
	f.decider.mu.Lock()
	f.decider.down, f.decider.err = true, fmt.Errorf("decide: %w", nodeDown{partial: true})
	f.decider.mu.Unlock()
	before, allowed := f.decider.trips(), 0
	for i := range 20 {
		d := f.check("/local", "192.0.2.1")
		if d.Mode != ModeLocal {
			t.Fatalf("request %d on the failing node: mode %s, want local", i, d.Mode)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 10 { // the rule's limit, one live instance
		t.Fatalf("%d of 20 allowed in local mode, want the local limit 10", allowed)
	}
	f.requireMode(t, ModeRedis)
	if got := f.decider.trips() - before; got != 20 {
		t.Fatalf("%d round trips for 20 requests, want 20: the breaker must stay closed", got)
	}
	f.decider.mu.Lock()
	f.decider.err = nodeDown{partial: false}
	f.decider.mu.Unlock()
	for range 5 {
		f.check("/local", "192.0.2.1")
	}
	f.requireMode(t, ModeLocal)
}

func TestFailedHealthChecksGoLocalThenPermissive(t *testing.T) {
	f := newModeFixture(t, false)
	f.health.down = true
	f.beat(5 * time.Second)
	f.beat(5 * time.Second)
	f.requireMode(t, ModeRedis)
	f.beat(5 * time.Second)
	f.requireMode(t, ModeLocal)
	before := f.decider.trips()

	// local: local rules limit in memory, allow rules pass, deny rules 503.
	for i := range 12 {
		d := f.check("/local", "192.0.2.2")
		if d.Mode != ModeLocal || d.Allowed != (i < 10) {
			t.Fatalf("local request %d: %+v", i, d)
		}
	}
	if d := f.check("/allow", "192.0.2.2"); !d.Allowed || d.Mode != ModeLocal {
		t.Fatalf("allow in local: %+v", d)
	}
	if d := f.check("/deny", "192.0.2.2"); !d.Unavailable {
		t.Fatalf("deny in local: %+v", d)
	}
	if f.decider.trips() != before {
		t.Fatal("local mode called Redis")
	}

	// Five minutes in local: permissive. Local rules pass; deny rules still 503.
	for range 60 {
		f.beat(5 * time.Second)
	}
	f.requireMode(t, ModePermissive)
	if d := f.check("/local", "192.0.2.2"); !d.Allowed || d.Mode != ModePermissive {
		t.Fatalf("local rule in permissive: %+v", d)
	}
	if d := f.check("/deny", "192.0.2.2"); !d.Unavailable {
		t.Fatalf("deny rule in permissive must stay 503 by default: %+v", d)
	}
	if f.logs.FilterMessage("limiter mode changed").Len() != 2 {
		t.Fatalf("want 2 logged transitions: %v", f.logs.All())
	}
}

func TestPermissiveDenyRules(t *testing.T) {
	f := newModeFixture(t, true)
	f.svc.RedisDown("breaker opened")
	f.clock.advance(5 * time.Minute)
	f.health.down = true
	f.beat(time.Second)
	f.requireMode(t, ModePermissive)
	if d := f.check("/deny", "192.0.2.3"); d.Unavailable || !d.Allowed || d.Mode != ModePermissive {
		t.Fatalf("LIMITER_PERMISSIVE_DENY_RULES=true lets deny rules through: %+v", d)
	}
}

func TestLocalLimitsDividedAmongLiveInstances(t *testing.T) {
	f := newModeFixture(t, false)
	f.health.live = 4
	f.beat(time.Second) // learns 4 live instances
	if f.svc.live.Load() != 4 {
		t.Fatalf("live = %d", f.svc.live.Load())
	}
	f.health.down = true
	for range 3 {
		f.beat(time.Second)
	}
	f.requireMode(t, ModeLocal)
	if f.svc.live.Load() != 4 {
		t.Fatal("the last known count must be remembered while Redis is away")
	}
	admitted := 0
	for range 10 {
		d := f.check("/local", "192.0.2.4")
		if d.Allowed {
			admitted++
		}
		if d.Limit != 2 {
			t.Fatalf("reported limit %d, want 10/4 = 2", d.Limit)
		}
	}
	if admitted != 2 {
		t.Fatalf("admitted %d, want 2 (10 divided among 4)", admitted)
	}
}

func TestStartStopHealthChecker(t *testing.T) {
	f := newModeFixture(t, false)
	f.svc.cfg.HealthInterval = time.Millisecond
	f.health.mu.Lock()
	f.health.down = true
	f.health.mu.Unlock()
	f.svc.Start()
	deadline := time.Now().Add(5 * time.Second)
	for f.svc.Mode() != ModeLocal {
		if time.Now().After(deadline) {
			t.Fatal("health checker did not move the mode to local")
		}
		time.Sleep(time.Millisecond)
	}
	f.svc.Stop()
	f.svc.Stop() // idempotent
	if !strings.Contains(f.logs.All()[0].ContextMap()["reason"].(string), "failed health checks") {
		t.Fatalf("unexpected log: %+v", f.logs.All())
	}
}

// errSlow is a round trip that timed out: Redis may have run its calls.
var errSlow = errors.New("i/o timeout")

// A round trip that timed out leaves its outcome unknown: a local rule
// refuses the request (it may have been counted in Redis, so a local budget
// could pass the limit), an allow rule admits it, a deny rule answers 503;
// and however many time out, Redis is slow, not down: the breaker stays
// closed and the mode redis.
func TestTimedOutRoundTripsAreRefusedNotLocal(t *testing.T) {
	f := newModeFixture(t, false)
	f.decider.mu.Lock()
	f.decider.down, f.decider.err = true, errSlow
	f.decider.mu.Unlock()
	for i := range 20 {
		d := f.check("/local", "192.0.2.1")
		if d.Allowed || d.Reason != "rate_limited" || d.Mode != ModeLocal || d.RetryAfter != refusedRetry || d.Unavailable {
			t.Fatalf("local rule, round trip %d timed out: %+v, want refused for %v in mode local", i, d, refusedRetry)
		}
	}
	if d := f.check("/allow", "192.0.2.1"); !d.Allowed {
		t.Fatalf("allow rule, round trip timed out: %+v, want allowed", d)
	}
	if d := f.check("/deny", "192.0.2.1"); !d.Unavailable {
		t.Fatalf("deny rule, round trip timed out: %+v, want unavailable", d)
	}
	f.requireMode(t, ModeRedis)
	if got := testutil.ToFloat64(f.svc.metrics.unknownOutcomes); got != 22 {
		t.Fatalf("rate_limit_redis_unknown_outcomes_total = %v, want 22", got)
	}
	// Once round trips answer, the requests are decided in Redis again.
	f.decider.set(false)
	if d := f.check("/local", "192.0.2.1"); !d.Allowed || d.Mode != ModeRedis {
		t.Fatalf("Redis answering again: %+v", d)
	}
}

// RedisDown (a warm-up that did not complete) takes the mode to local at
// once, with its reason logged; healthy checks bring it back as after the
// breaker.
func TestRedisDownEntersLocalMode(t *testing.T) {
	f := newModeFixture(t, false)
	f.svc.RedisDown("warm-up incomplete")
	f.requireMode(t, ModeLocal)
	if f.logs.FilterMessage("limiter mode changed").FilterField(zap.String("reason", "warm-up incomplete")).Len() != 1 {
		t.Fatalf("transition not logged with its reason: %v", f.logs.All())
	}
	if d := f.check("/local", "192.0.2.1"); !d.Allowed || d.Mode != ModeLocal || f.decider.trips() != 0 {
		t.Fatalf("in local mode: %+v after %d round trips, want allowed locally without Redis", d, f.decider.trips())
	}
	for range 13 { // 0s .. 60s of healthy checks
		f.beat(5 * time.Second)
	}
	f.requireMode(t, ModeRedis)
}
