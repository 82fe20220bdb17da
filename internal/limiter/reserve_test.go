package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// reserveRules give each API key a token bucket of 1000 tokens, refilled
// one an hour (nothing refills within a test), each check reserving 100;
// and one request an hour per address on /limited, where a second rule may
// refuse what the budget admitted.
const reserveRules = `
rules:
  - id: tokens
    match: {endpoints: ["/chat/**", "/limited/**"]}
    key: ["attr:api_key"]
    algorithm: token_bucket
    limits: [{rate: 1, per: 1h, burst: 1000}]
    spent_by: report
    reserve: 100
    reserve_hold: 1m
  - id: per-ip
    match: {endpoints: ["/limited/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
`

// reserveService is a limiter as cmd/limiter wires it on the Redis at
// addr, with reserveRules under prefix, and its registry.
func reserveService(t *testing.T, addr, prefix string, cfg limiter.Config) (*limiter.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return limitertest.Service(t, redisstore.New(redisOn(t, addr, time.Second, 8)), ruleSet(t, reserveRules, prefix),
		limitertest.Options{Limiter: cfg, Registerer: reg}), reg
}

func chatReq(key, ip, endpoint string, cost int64) *rules.Request {
	return &rules.Request{IP: ip, Endpoint: endpoint, Method: "POST", Cost: cost, Attributes: map[string]string{"api_key": key}}
}

// settleReport reports req naming hold and returns the result of the
// tokens rule.
func settleReport(t *testing.T, svc *limiter.Service, req *rules.Request, hold string) (settled bool, remaining int64) {
	t.Helper()
	var d limiter.Decision
	svc.ReportHold(context.Background(), req, 200, hold, &d)
	for i, a := range d.Applied {
		if a.Rule.ID == "tokens" {
			return d.Results[i].Settled, d.Results[i].Remaining
		}
	}
	t.Fatalf("the report did not apply the tokens rule: %+v", d.Applied)
	return false, 0
}

// Three limiters on one Redis, 60 checks at once against a budget of 10
// estimates: exactly 10 are admitted, whichever limiter decides them.
func TestReservationsExactAcrossLimiters(t *testing.T) {
	addr := redistest.StartServer(t)
	var svcs []*limiter.Service
	for range 3 {
		svc, _ := reserveService(t, addr, "rwreserve:", limiter.Config{})
		svcs = append(svcs, svc)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() {
			if d := check(svcs[i%3], chatReq("k-1", fmt.Sprintf("10.0.0.%d", i), "/chat/1", 1)); d.Allowed {
				if d.Hold == "" {
					t.Error("an admitted check answered no hold")
				}
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 10 {
		t.Fatalf("%d of 60 admitted, want exactly 10", got)
	}
}

// The metrics count takes, denials, returns, settles and unknown ids, and
// the units reserved, refunded and debited beyond the estimates.
func TestReservationMetrics(t *testing.T) {
	testkit.AvoidHourEnd(t) // per-ip must refuse the address's second request of the hour
	addr := redistest.StartServer(t)
	svc, reg := reserveService(t, addr, "rwreservem:", limiter.Config{})
	first := check(svc, chatReq("k-1", "10.0.0.1", "/limited/1", 1))
	if !first.Allowed || first.Hold == "" {
		t.Fatalf("first check: allowed %v, hold %q", first.Allowed, first.Hold)
	}
	if d := check(svc, chatReq("k-1", "10.0.0.1", "/limited/1", 1)); d.Allowed || d.RuleID != "per-ip" || d.Hold != "" {
		t.Fatalf("second check: allowed %v, rule %s, hold %q; want refused by per-ip without a hold", d.Allowed, d.RuleID, d.Hold)
	}
	big := chatReq("k-1", "10.0.0.2", "/chat/1", 1)
	big.Reserve = 950 // 900 left
	if d := check(svc, big); d.Allowed || d.RuleID != "tokens" {
		t.Fatalf("an estimate that does not fit: allowed %v, rule %s", d.Allowed, d.RuleID)
	}
	if settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.1", "/limited/1", 40), first.Hold); !settled || left != 960 {
		t.Fatalf("report of 40: settled %v, %d left; want 960", settled, left)
	}
	if settled, _ := settleReport(t, svc, chatReq("k-1", "10.0.0.1", "/limited/1", 40), first.Hold); settled {
		t.Fatal("the replayed report settled")
	}
	second := check(svc, chatReq("k-1", "10.0.0.3", "/chat/1", 1))
	if settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.3", "/chat/1", 130), second.Hold); !settled || left != 830 {
		t.Fatalf("report of 130: settled %v, %d left; want 830", settled, left)
	}
	for result, want := range map[string]float64{"taken": 3, "denied": 1, "returned": 1, "settled": 2, "unknown": 1} {
		if got := testkit.MetricSum(t, reg, "rate_limit_reservations_total", map[string]string{"rule": "tokens", "result": result}); got != want {
			t.Errorf("reservations %s: %v, want %v", result, got, want)
		}
	}
	for kind, want := range map[string]float64{"reserved": 300, "refunded": 100 + 60, "excess": 30} {
		if got := testkit.MetricSum(t, reg, "rate_limit_reservation_units_total", map[string]string{"rule": "tokens", "kind": kind}); got != want {
			t.Errorf("units %s: %v, want %v", kind, got, want)
		}
	}
}

// In local mode a rule that reserves, with failure policy local, takes and
// settles reservations in memory.
func TestLocalModeReservations(t *testing.T) {
	addr := redistest.StartServer(t)
	svc, _ := reserveService(t, addr, "rwreservel:", limiter.Config{})
	svc.RedisDown("test")
	var holds []string
	for i := range 10 {
		d := check(svc, chatReq("k-1", fmt.Sprintf("10.0.0.%d", i), "/chat/1", 1))
		if d.Mode != limiter.ModeLocal || !d.Allowed || d.Hold == "" {
			t.Fatalf("local check %d: mode %s, allowed %v, hold %q", i, d.Mode, d.Allowed, d.Hold)
		}
		holds = append(holds, d.Hold)
	}
	if d := check(svc, chatReq("k-1", "10.0.0.10", "/chat/1", 1)); d.Allowed {
		t.Fatal("an eleventh estimate of 100 fitted a local budget of 1000")
	}
	if settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.0", "/chat/1", 0), holds[0]); !settled || left != 100 {
		t.Fatalf("local report of 0: settled %v, %d left; want 100", settled, left)
	}
	if d := check(svc, chatReq("k-1", "10.0.0.10", "/chat/1", 1)); !d.Allowed {
		t.Fatal("the estimate given back in memory still counts")
	}
}

// A settle that gives units back drops the key's refusal from the
// over-limit cache: the next check is decided by Redis, and fits.
func TestSettleDropsCachedRefusal(t *testing.T) {
	addr := redistest.StartServer(t)
	svc, reg := reserveService(t, addr, "rwreservec:", limiter.Config{OverLimitCacheSize: 1000})
	var holds []string
	for i := range 10 {
		d := check(svc, chatReq("k-1", fmt.Sprintf("10.0.0.%d", i), "/chat/1", 1))
		if !d.Allowed {
			t.Fatalf("check %d refused", i)
		}
		holds = append(holds, d.Hold)
	}
	for range 2 { // the second refusal comes from the cache
		if d := check(svc, chatReq("k-1", "10.0.0.10", "/chat/1", 1)); d.Allowed {
			t.Fatal("an eleventh estimate fitted")
		}
	}
	if got := testkit.MetricSum(t, reg, "rate_limit_over_limit_cache_hits_total", nil); got != 1 {
		t.Fatalf("over-limit cache hits: %v, want 1", got)
	}
	if settled, left := settleReport(t, svc, chatReq("k-1", "10.0.0.0", "/chat/1", 0), holds[0]); !settled || left != 100 {
		t.Fatalf("report of 0: settled %v, %d left; want 100", settled, left)
	}
	if d := check(svc, chatReq("k-1", "10.0.0.10", "/chat/1", 1)); !d.Allowed {
		t.Fatalf("the estimate given back is refused (cached: %v)", testkit.MetricSum(t, reg, "rate_limit_over_limit_cache_hits_total", nil))
	}
}
