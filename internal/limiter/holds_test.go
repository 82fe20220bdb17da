package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// holdRules allow 5 exports in flight per customer, and one request an
// hour per address on /limited, where a second rule may refuse what the
// concurrency rule admitted.
const holdRules = `
rules:
  - id: exports
    match: {endpoints: ["/exports/**", "/limited/**"]}
    key: ["attr:customer"]
    algorithm: concurrency
    limits: [{concurrent: %d, hold: %s}]
  - id: per-ip
    match: {endpoints: ["/limited/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
`

// holdService is a limiter as cmd/limiter wires it on the Redis at addr,
// with holdRules of n holds of lifetime hold, and its registry.
func holdService(t *testing.T, addr string, n int, hold string, cfg limiter.Config) (*limiter.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	set := ruleSet(t, fmt.Sprintf(holdRules, n, hold), "rwholds:")
	return limitertest.Service(t, redisstore.New(redisOn(t, addr, time.Second, 8)), set,
		limitertest.Options{Limiter: cfg, Registerer: reg}), reg
}

func exportReq(customer, ip, endpoint string) *rules.Request {
	return &rules.Request{IP: ip, Endpoint: endpoint, Method: "POST", Cost: 1, Attributes: map[string]string{"customer": customer}}
}

// check decides one request and returns its decision.
func check(svc *limiter.Service, req *rules.Request) *limiter.Decision {
	var d limiter.Decision
	svc.Check(context.Background(), req, &d)
	return &d
}

// release reports req's outcome naming hold, and returns, per rule id,
// whether its hold was released.
func release(svc *limiter.Service, req *rules.Request, hold string) map[string]bool {
	var d limiter.Decision
	svc.ReportHold(context.Background(), req, 200, hold, &d)
	out := map[string]bool{}
	for i, a := range d.Applied {
		if a.Call.Release {
			out[a.Rule.ID] = d.Results[i].Released
		}
	}
	return out
}

// TestHoldsExactAcrossLimiters runs three limiters on one Redis and 200
// clients that each check, hold an admitted request for a moment (a
// counter of requests in flight, as a backend sees them) and report its
// hold, until each has been admitted 3 times. The highest concurrency
// observed must be exactly the limit, and reached.
func TestHoldsExactAcrossLimiters(t *testing.T) {
	addr := redistest.StartServer(t)
	const instances, clients, admissions, limit = 3, 200, 3, 5
	svcs := make([]*limiter.Service, instances)
	regs := make([]*prometheus.Registry, instances)
	for i := range svcs {
		svcs[i], regs[i] = holdService(t, addr, limit, "1m", limiter.Config{Instance: fmt.Sprint("limiter-", i), OverLimitCacheSize: 1000})
	}
	var inFlight, highest atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			svc := svcs[c%instances]
			for got := 0; got < admissions; {
				req := exportReq("c-1", fmt.Sprintf("10.0.%d.%d", c/250, c%250), "/exports/1")
				d := check(svc, req)
				if !d.Allowed {
					continue
				}
				if d.Hold == "" {
					t.Error("an admitted check answered no hold")
					return
				}
				got++
				now := inFlight.Add(1)
				for old := highest.Load(); now > old && !highest.CompareAndSwap(old, now); old = highest.Load() {
				}
				time.Sleep(time.Millisecond) // the backend's work: a pace, not a measure
				inFlight.Add(-1)
				// Any limiter may get the report.
				if r := release(svcs[(c+1)%instances], req, d.Hold); !r["exports"] {
					t.Errorf("the report of an admitted hold released %v", r)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := highest.Load(); got != limit {
		t.Fatalf("highest concurrency observed %d, want exactly the limit %d", got, limit)
	}
	var taken, released, denied float64
	for _, reg := range regs {
		taken += testkit.MetricSum(t, reg, "rate_limit_holds_total", map[string]string{"rule": "exports", "result": "taken"})
		released += testkit.MetricSum(t, reg, "rate_limit_holds_total", map[string]string{"rule": "exports", "result": "released"})
		denied += testkit.MetricSum(t, reg, "rate_limit_holds_total", map[string]string{"rule": "exports", "result": "denied"})
	}
	if taken != clients*admissions || released != taken {
		t.Errorf("holds taken %v, released %v; want %d each", taken, released, clients*admissions)
	}
	t.Logf("%v takes denied", denied)
}

// A request another rule refuses gives back the hold its concurrency rule
// took, in the same check: it keeps no slot, and answers no hold. One that
// rule refused from memory (its cached denial) takes no hold at all.
func TestRefusedRequestKeepsNoSlot(t *testing.T) {
	testkit.AvoidHourEnd(t) // per-ip must refuse the address's second request of the hour
	addr := redistest.StartServer(t)
	svc, reg := holdService(t, addr, 2, "1m", limiter.Config{OverLimitCacheSize: 1000})
	first := check(svc, exportReq("c-1", "10.0.0.1", "/limited/1"))
	if !first.Allowed || first.Hold == "" {
		t.Fatalf("first check: allowed %v, hold %q", first.Allowed, first.Hold)
	}
	for range 5 { // per-ip refuses the address's next requests
		d := check(svc, exportReq("c-1", "10.0.0.1", "/limited/1"))
		if d.Allowed || d.RuleID != "per-ip" || d.Hold != "" {
			t.Fatalf("refused check: allowed %v, rule %s, hold %q", d.Allowed, d.RuleID, d.Hold)
		}
	}
	// One slot of two is held: the refused checks kept none.
	if d := check(svc, exportReq("c-1", "10.0.0.2", "/limited/1")); !d.Allowed || d.Hold == "" {
		t.Fatalf("the second slot is taken: allowed %v, rule %s", d.Allowed, d.RuleID)
	}
	if d := check(svc, exportReq("c-1", "10.0.0.3", "/limited/1")); d.Allowed || d.RuleID != "exports" || d.Hold != "" {
		t.Fatalf("a third hold: allowed %v, rule %s, hold %q", d.Allowed, d.RuleID, d.Hold)
	}
	// The first refused check took a hold in Redis and gave it back; the
	// next four were refused from the over-limit cache and took none.
	for result, want := range map[string]float64{"taken": 3, "released": 1} {
		if got := testkit.MetricSum(t, reg, "rate_limit_holds_total", map[string]string{"rule": "exports", "result": result}); got != want {
			t.Errorf("holds %s: %v, want %v", result, got, want)
		}
	}
}

// A report of an unknown, foreign or replayed hold changes nothing, and
// is counted as unknown; the hold's own report frees the slot at once,
// whatever the over-limit cache holds.
func TestReportReleasesOnlyItsOwnHold(t *testing.T) {
	addr := redistest.StartServer(t)
	svc, reg := holdService(t, addr, 1, "1m", limiter.Config{OverLimitCacheSize: 1000})
	mine := exportReq("c-1", "10.0.0.1", "/exports/1")
	d := check(svc, mine)
	if !d.Allowed || d.Hold == "" {
		t.Fatalf("first check: allowed %v, hold %q", d.Allowed, d.Hold)
	}
	hold := d.Hold
	other := check(svc, exportReq("c-2", "10.0.0.9", "/exports/1"))
	full := func(what string) {
		t.Helper()
		if d := check(svc, exportReq("c-1", "10.0.0.2", "/exports/1")); d.Allowed {
			t.Fatalf("after %s, c-1's slot is free", what)
		}
	}
	full("the first check")
	for _, tc := range []struct {
		name string
		req  *rules.Request
		hold string
	}{
		{"an unknown hold", mine, decide.NewHoldID()},
		{"another customer's hold on c-1", mine, other.Hold},
		{"c-1's hold reported for another customer", exportReq("c-2", "10.0.0.1", "/exports/1"), hold},
		{"c-1's hold on an endpoint no concurrency rule matches", exportReq("c-1", "10.0.0.1", "/books/1"), hold},
	} {
		got := release(svc, tc.req, tc.hold)
		if got["exports"] {
			t.Fatalf("%s: released", tc.name)
		}
		full(tc.name)
	}
	if got := release(svc, mine, hold); !got["exports"] {
		t.Fatalf("the hold's own report: %v", got)
	}
	if got := release(svc, mine, hold); got["exports"] || len(got) != 1 {
		t.Fatalf("the replayed report: %v, want one release that released nothing", got)
	}
	if d := check(svc, exportReq("c-1", "10.0.0.2", "/exports/1")); !d.Allowed {
		t.Fatal("the released slot is still taken (the denial was cached?)")
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_holds_total", map[string]string{"rule": "exports", "result": "unknown"}); got != 4 {
		t.Errorf("unknown releases counted %v, want 4 (the unknown id, c-2's on c-1, c-1's on c-2, the replay)", got)
	}
}

// A hold nobody reports lapses after the rule's hold lifetime, and a call
// that finds it lapsed counts it. (A key whose every hold lapsed expires
// with them, uncounted: here a VIP's longer hold keeps the key.)
func TestUnreportedHoldLapses(t *testing.T) {
	addr := redistest.StartServer(t)
	reg := prometheus.NewRegistry()
	set := ruleSet(t, `
rules:
  - id: exports
    key: ["attr:customer"]
    algorithm: concurrency
    limits: [{concurrent: 2, hold: 1s}]
    tiers:
      VIP: [{concurrent: 3, hold: 1h}]
`, "rwholds:")
	svc := limitertest.Service(t, redisstore.New(redisOn(t, addr, time.Second, 8)), set, limitertest.Options{Registerer: reg})
	short := exportReq("c-1", "10.0.0.1", "/exports/1")
	long := exportReq("c-1", "10.0.0.2", "/exports/1")
	long.Tier = "VIP"
	if !check(svc, short).Allowed || !check(svc, long).Allowed {
		t.Fatal("first checks refused")
	}
	if check(svc, short).Allowed {
		t.Fatal("a third hold admitted under a limit of 2")
	}
	testkit.WaitFor(t, 30*time.Second, "the unreported hold to lapse", func() bool {
		return check(svc, short).Allowed
	})
	if got := testkit.MetricSum(t, reg, "rate_limit_holds_lapsed_total", map[string]string{"rule": "exports"}); got != 1 {
		t.Errorf("lapsed holds counted %v, want 1", got)
	}
}

// A shadow concurrency rule takes holds (they must count) and reports
// would-deny without denying.
func TestShadowHolds(t *testing.T) {
	addr := redistest.StartServer(t)
	set := ruleSet(t, `
rules:
  - id: exports
    key: ["attr:customer"]
    algorithm: concurrency
    limits: [{concurrent: 1}]
    shadow: true
`, "rwholds:")
	svc := limitertest.Service(t, redisstore.New(redisOn(t, addr, time.Second, 8)), set, limitertest.Options{})
	first := check(svc, exportReq("c-1", "10.0.0.1", "/exports/1"))
	second := check(svc, exportReq("c-1", "10.0.0.1", "/exports/1"))
	if !first.Allowed || first.Hold == "" || first.Shadow {
		t.Fatalf("first: allowed %v, hold %q, shadow %v", first.Allowed, first.Hold, first.Shadow)
	}
	if !second.Allowed || !second.Shadow || second.Reason != event.ReasonRateLimited || second.Hold != "" {
		t.Fatalf("second: allowed %v, shadow %v, reason %s, hold %q", second.Allowed, second.Shadow, second.Reason, second.Hold)
	}
}

// In local mode a concurrency rule whose failure policy is local holds in
// memory, with the limit divided among the live limiters, and reports
// release there.
func TestLocalModeHolds(t *testing.T) {
	addr := redistest.StartServer(t)
	svc, _ := holdService(t, addr, 2, "1m", limiter.Config{})
	svc.RedisDown("test")
	a := check(svc, exportReq("c-1", "10.0.0.1", "/exports/1"))
	b := check(svc, exportReq("c-1", "10.0.0.2", "/exports/1"))
	c := check(svc, exportReq("c-1", "10.0.0.3", "/exports/1"))
	if a.Mode != limiter.ModeLocal || !a.Allowed || !b.Allowed || a.Hold == "" || b.Hold == "" || c.Allowed {
		t.Fatalf("local checks: mode %s, allowed %v %v %v", a.Mode, a.Allowed, b.Allowed, c.Allowed)
	}
	if got := release(svc, exportReq("c-1", "10.0.0.1", "/exports/1"), a.Hold); !got["exports"] {
		t.Fatalf("local release: %v", got)
	}
	if d := check(svc, exportReq("c-1", "10.0.0.3", "/exports/1")); !d.Allowed {
		t.Fatal("the slot released in memory is still taken")
	}
}

// submissionCounter counts the submissions made to the Decider it wraps.
type submissionCounter struct {
	limiter.Decider
	n atomic.Int64
}

func (c *submissionCounter) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	c.n.Add(1)
	return c.Decider.Decide(ctx, calls)
}

// A check batch whose requests another rule refuses gives their holds back
// in one more submission for the whole batch, not one per request: a batch
// of 100 such requests must not cost 100 round trips in turn.
func TestCheckBatchGivesHoldsBackTogether(t *testing.T) {
	testkit.AvoidHourEnd(t) // per-ip must refuse the address's second request of the hour
	addr := redistest.StartServer(t)
	counter := &submissionCounter{}
	set := ruleSet(t, fmt.Sprintf(holdRules, 1000, "1m"), "rwholds:")
	svc := limitertest.Service(t, redisstore.New(redisOn(t, addr, time.Second, 8)), set, limitertest.Options{
		Wrap: func(d limiter.Decider) limiter.Decider { counter.Decider = d; return counter }})
	reqs := make([]rules.Request, 100)
	for i := range reqs {
		reqs[i] = *exportReq("c-1", "10.0.0.1", "/limited/1") // per-ip admits the first only
	}
	var b limiter.Batch
	svc.CheckBatch(context.Background(), reqs, &b)
	for i, d := range b.Decisions {
		if d.Allowed != (i == 0) || (d.Hold != "") != (i == 0) {
			t.Fatalf("decision %d: allowed %v, hold %q; want only the first admitted, with a hold", i, d.Allowed, d.Hold)
		}
	}
	if got := counter.n.Load(); got != 2 {
		t.Errorf("%d submissions for the batch, want 2: its calls, then the holds of the 99 refused given back", got)
	}
	// Every refused request's hold went back: 999 slots are free.
	n := 0
	for range 999 {
		if d := check(svc, exportReq("c-1", "10.0.0.2", "/exports/1")); d.Allowed {
			n++
		}
	}
	if n != 999 {
		t.Errorf("after the batch, %d of 999 admitted; want every slot but the first request's", n)
	}
}
