package limiter

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

func TestOverLimitCache(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	limits := []decide.Limit{{Requests: 5, Per: time.Second}}
	otherLimits := []decide.Limit{{Requests: 5, Per: time.Second}} // equal values, another rule or tier
	call := decide.Call{Keys: decide.Keys{State: "k"}, Algorithm: decide.FixedWindow, Limits: limits, Cost: 2}
	denied := decide.Result{Limit: 5, Remaining: 1, ResetAfter: 800 * time.Millisecond, RetryAfter: 500 * time.Millisecond}
	with := func(f func(c *decide.Call)) decide.Call { c := call; f(&c); return c }

	tests := []struct {
		name   string
		stored decide.Call
		result decide.Result
		asked  decide.Call
		after  time.Duration
		want   decide.Result
		hit    bool
	}{
		{name: "denial served with its times counted down", stored: call, result: denied, asked: call, after: 200 * time.Millisecond,
			want: decide.Result{Limit: 5, Remaining: 1, ResetAfter: 600 * time.Millisecond, RetryAfter: 300 * time.Millisecond}, hit: true},
		{name: "a costlier request may wait longer", stored: call, result: denied, asked: with(func(c *decide.Call) { c.Cost = 3 })},
		{name: "a cheaper request may fit sooner", stored: call, result: denied, asked: with(func(c *decide.Call) { c.Cost = 1 })},
		{name: "lapses at its retry time", stored: call, result: denied, asked: call, after: 500 * time.Millisecond},
		{name: "a long limit denial is served for a second", stored: call, asked: call, after: 900 * time.Millisecond,
			result: decide.Result{Limit: 5, ResetAfter: time.Hour, RetryAfter: time.Hour}, hit: true,
			want: decide.Result{Limit: 5, ResetAfter: time.Hour - 900*time.Millisecond, RetryAfter: time.Hour - 900*time.Millisecond}},
		{name: "then Redis is asked again (a give-back may have lowered the count)", stored: call, asked: call, after: time.Second,
			result: decide.Result{Limit: 5, ResetAfter: time.Hour, RetryAfter: time.Hour}},
		{name: "other limits miss", stored: call, result: denied, asked: with(func(c *decide.Call) { c.Limits = otherLimits })},
		{name: "another key misses", stored: call, result: denied, asked: with(func(c *decide.Call) { c.Keys.State = "k2" })},
		{name: "admissions are not cached", stored: call, result: decide.Result{Allowed: true, Limit: 5, Remaining: 3}, asked: call},
		{name: "limit denial of an escalating rule is not cached (Redis counts it as a hit)",
			stored: with(func(c *decide.Call) {
				c.Escalations = []decide.Escalation{{Triggers: 3, Within: time.Minute, Penalty: time.Hour}}
			}),
			result: denied, asked: call},
		{name: "hold of an escalating rule is cached",
			stored: with(func(c *decide.Call) {
				c.Escalations = []decide.Escalation{{Triggers: 3, Within: time.Minute, Penalty: time.Hour}}
			}),
			result: decide.Result{Held: true, LimitIndex: -1, Limit: 5, ResetAfter: time.Hour, RetryAfter: time.Hour},
			asked:  call, after: time.Minute,
			want: decide.Result{Held: true, LimitIndex: -1, Limit: 5, ResetAfter: 59 * time.Minute, RetryAfter: 59 * time.Minute}, hit: true},
		{name: "limit denial of a rule with a penalty is not cached (Redis renews the penalty)",
			stored: with(func(c *decide.Call) { c.Penalty = time.Minute }), result: denied, asked: call},
		{name: "a zero-cost probe is not cached", stored: with(func(c *decide.Call) { c.Cost = 0 }), result: denied, asked: call},
		{name: "a denial that debits its cost is not cached (each one counts in Redis)",
			stored: with(func(c *decide.Call) { c.DebitDenied = true }), result: denied, asked: with(func(c *decide.Call) { c.DebitDenied = true })},
		{name: "a test clock call is not cached", stored: with(func(c *decide.Call) { c.NowMs = 1 }), result: denied, asked: call},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newOverLimitCache(64)
			c.put(&tt.stored, tt.result, t0)
			got, hit := c.get(&tt.asked, t0.Add(tt.after))
			if hit != tt.hit || got != tt.want {
				t.Fatalf("get = %+v, %v; want %+v, %v", got, hit, tt.want, tt.hit)
			}
		})
	}
}

func TestOverLimitCacheIsBoundedAndCarried(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	c := newOverLimitCache(640) // 10 a shard
	limits := []decide.Limit{{Requests: 1, Per: time.Hour}}
	denied := decide.Result{Limit: 1, ResetAfter: time.Hour, RetryAfter: time.Hour}
	for i := range 10_000 {
		call := decide.Call{Keys: decide.Keys{State: "k" + strconv.Itoa(i)}, Algorithm: decide.FixedWindow, Limits: limits, Cost: 1}
		c.put(&call, denied, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if n := c.len(); n > 640 || n < 600 {
		t.Fatalf("len = %d after 10 000 live denials, want at most 640 (and the shards filled)", n)
	}
	last := decide.Call{Keys: decide.Keys{State: "k9999"}, Algorithm: decide.FixedWindow, Limits: limits, Cost: 1}
	if _, ok := c.get(&last, t0.Add(10*time.Second)); !ok {
		t.Fatal("the last denial is not cached")
	}
	// A rules change: the new rules decide k9999 alike under limits of
	// their own, equal to the old ones; every other key changed.
	recompiled := slices.Clone(limits)
	kept, dropped := c.carry(func(state string, l []decide.Limit) ([]decide.Limit, bool) {
		return recompiled, state == "k9999" && slices.Equal(l, limits)
	})
	if n := c.len(); n != 1 || kept != 1 || dropped < 599 {
		t.Fatalf("len = %d after a change that carries one key over (%d kept, %d dropped)", n, kept, dropped)
	}
	if _, ok := c.get(&last, t0.Add(10*time.Second)); ok {
		t.Fatal("a call of the old rules' limits is answered after the change")
	}
	last.Limits = recompiled
	if _, ok := c.get(&last, t0.Add(10*time.Second)); !ok {
		t.Fatal("a call of the new rules' equal limits is not answered after the change")
	}
	off := newOverLimitCache(0)
	off.put(&last, denied, t0)
	if _, ok := off.get(&last, t0); ok || off.len() != 0 {
		t.Fatal("a cache of size 0 must hold nothing")
	}
}

// modelDecider decides in the reference model of the Lua scripts at the
// fake clock's time, as Redis would, and counts the calls it was sent and
// the round trips (Decide calls) they took.
type modelDecider struct {
	mu    sync.Mutex
	mem   *decide.Memory
	clock *fakeClock
	calls int
	trips int
}

func (m *modelDecider) Decide(_ context.Context, calls []decide.Call) ([]decide.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.trips++
	now := m.clock.Now().UnixMilli()
	out := make([]decide.Result, len(calls))
	for i, c := range calls {
		m.calls++
		out[i] = m.mem.Decide(c, now)
	}
	return out, nil
}

const cacheRules = `
rules:
  - id: fixed
    match: {endpoints: ["/a/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 5, per: 1s}, {requests: 12, per: 5s}]
  - id: log
    match: {endpoints: ["/a/**", "/b"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 8, per: 2s}]
  - id: counter
    match: {endpoints: ["/c"]}
    key: [ip]
    algorithm: sliding_window_counter
    limits: [{requests: 6, per: 1s}]
    penalty: 1500ms
  - id: bucket
    match: {endpoints: ["/d"]}
    key: [ip]
    algorithm: token_bucket
    limits: [{rate: 3, per: 1s, burst: 4}]
    tiers:
      pro: [{rate: 30, per: 1s, burst: 40}]
  - id: escalating
    match: {endpoints: ["/e"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 2, per: 1s}]
    escalate: [{triggers: 3, within: 10s, penalty: 3s}]
  - id: shadowed
    match: {endpoints: ["/b"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 3, per: 1s}]
    shadow: true
`

// TestOverLimitCacheChangesNoDecision runs the same random traffic through
// two services deciding in the reference model, one with the over-limit
// cache and one without: every decision must be identical, and the cache
// must have spared round trips.
func TestOverLimitCacheChangesNoDecision(t *testing.T) {
	set := compileRules(t, cacheRules)
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	newSvc := func(cacheSize int) (*Service, *modelDecider, *prometheus.Registry) {
		decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
		reg := prometheus.NewRegistry()
		return New(Config{Instance: "test", Now: clock.Now, OverLimitCacheSize: cacheSize}, set, OpaqueErrors(decider), nopPublisher{}, zap.NewNop(), reg), decider, reg
	}
	plain, plainDecider, _ := newSvc(0)
	cached, cachedDecider, reg := newSvc(1000)

	rng := rand.New(rand.NewPCG(7, 7))
	endpoints := []string{"/a/1", "/b", "/c", "/d", "/e"}
	var a, b Decision
	for step := range 20_000 {
		clock.advance(time.Duration(rng.IntN(60)) * time.Millisecond)
		req := rules.Request{IP: "10.0.0." + strconv.Itoa(rng.IntN(3)), Endpoint: endpoints[rng.IntN(len(endpoints))],
			Method: "GET", Cost: 1 + int64(rng.IntN(3)/2)}
		if rng.IntN(10) == 0 {
			req.Tier = "pro"
		}
		plain.Check(context.Background(), &req, &a)
		cached.Check(context.Background(), &req, &b)
		// While a key stays denied, only a window log or a bucket can
		// replenish, too little for the request: Remaining below its cost.
		// A cached denial reports the Remaining of the first one, exact for
		// a cost of 1 (always 0) and at most the current one above.
		remainingOK := a.Remaining == b.Remaining || (req.Cost > 1 && b.Reason == event.ReasonRateLimited && b.Remaining <= a.Remaining)
		if a.Allowed != b.Allowed || a.Reason != b.Reason || a.RuleID != b.RuleID || a.Limit != b.Limit ||
			!remainingOK || a.ResetAfter != b.ResetAfter || a.RetryAfter != b.RetryAfter || a.Shadow != b.Shadow {
			t.Fatalf("step %d %+v:\nwithout cache %s %s rule=%s limit=%d remaining=%d reset=%v retry=%v\nwith cache    %s %s rule=%s limit=%d remaining=%d reset=%v retry=%v",
				step, req, strconv.FormatBool(a.Allowed), a.Reason, a.RuleID, a.Limit, a.Remaining, a.ResetAfter, a.RetryAfter,
				strconv.FormatBool(b.Allowed), b.Reason, b.RuleID, b.Limit, b.Remaining, b.ResetAfter, b.RetryAfter)
		}
		for i := range a.Results {
			ra, rb := a.Results[i], b.Results[i]
			if req.Cost > 1 && !rb.Allowed && rb.Remaining <= ra.Remaining {
				rb.Remaining = ra.Remaining
			}
			if !rb.Allowed { // At serves give-backs of admissions only; a cached denial keeps its first
				rb.At = ra.At
			}
			if ra != rb {
				t.Fatalf("step %d rule %s: without cache %+v, with cache %+v", step, a.Applied[i].Rule.ID, a.Results[i], b.Results[i])
			}
		}
	}
	hits := testutil.ToFloat64(cached.metrics.overLimitHits)
	t.Logf("round trip calls: %d without the cache, %d with it (%v answered from memory)", plainDecider.calls, cachedDecider.calls, hits)
	if hits == 0 || cachedDecider.calls+int(hits) != plainDecider.calls {
		t.Fatalf("calls without cache %d != calls with cache %d + hits %v", plainDecider.calls, cachedDecider.calls, hits)
	}
	if n, err := testutil.GatherAndCount(reg, "rate_limit_over_limit_cache_entries"); err != nil || n != 1 {
		t.Fatalf("rate_limit_over_limit_cache_entries: %d series, %v", n, err)
	}
}

// TestOverLimitCacheClearedOnRuleChange: a limit raised admits at once.
func TestOverLimitCacheClearedOnRuleChange(t *testing.T) {
	compile := func(requests int) *rules.Set {
		return compileRules(t, `
rules:
  - id: r
    match: {endpoints: ["/x"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: `+strconv.Itoa(requests)+`, per: 1h}]
`)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
	svc := New(Config{Instance: "test", Now: clock.Now, OverLimitCacheSize: 100}, compile(1), OpaqueErrors(decider), nopPublisher{}, zap.NewNop(), prometheus.NewRegistry())
	var d Decision
	req := rules.Request{IP: "10.0.0.1", Endpoint: "/x", Method: "GET", Cost: 1}
	for range 3 {
		svc.Check(context.Background(), &req, &d)
	}
	if d.Allowed || svc.over.len() != 1 {
		t.Fatalf("third request allowed=%v, cache entries %d; want denied and cached", d.Allowed, svc.over.len())
	}
	svc.SetRules(compile(10))
	svc.Check(context.Background(), &req, &d)
	if !d.Allowed || d.Remaining != 8 {
		t.Fatalf("after raising the limit to 10: allowed=%v remaining=%d, want allowed with 8 left", d.Allowed, d.Remaining)
	}
}
