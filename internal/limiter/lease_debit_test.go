package limiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratewarden/ratewarden/internal/lease"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/redisfleet"
	"github.com/ratewarden/ratewarden/internal/redisstore"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/limitertest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// tokenRules is the LLM token pattern on a leased descriptor rule: checks
// of hits_addend 0 before the call, then a debit of the tokens it used,
// which may pass the budget (debit: always).
const tokenRules = `
rules:
  - id: tokens
    descriptor: {domain: llm, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
    debit: always
    lease: {max_units: 20}
`

// TestLeasedDebitPastTheLimit: two limiters answer a key's checks of cost
// 0 from their leases; a debit on the first passes the budget. The first
// answers OVER_LIMIT at once, and the second soon after, whether it hears
// the first's notice or not (its lease must be vouched for by Redis within
// a second); from then on both answer OVER_LIMIT to checks of cost 0 and
// of cost 1, exactly as the rule without leases does. The test counts
// answers: the second limiter's checks are paced, up to a cap far past
// the bound.
func TestLeasedDebitPastTheLimit(t *testing.T) {
	for _, notices := range []bool{true, false} {
		t.Run(map[bool]string{true: "notice", false: "notice lost"}[notices], func(t *testing.T) {
			testkit.AvoidHourEnd(t) // past the budget until the hour ends
			addr := redistest.StartServer(t)
			a, regA := tokenLimiter(t, addr, "a", notices)
			b, regB := tokenLimiter(t, addr, "b", notices)
			for _, l := range []struct {
				svc *limiter.Service
				reg *prometheus.Registry
			}{{a, regA}, {b, regB}} {
				for i := 0; testkit.MetricSum(t, l.reg, "rate_limit_lease_decisions_total", nil) == 0; i++ {
					if i == 1000 {
						t.Fatal("1000 checks of a hot key, none answered from a lease")
					}
					if !tokenCheck(l.svc, "k1", 0) {
						t.Fatal("a check of cost 0 refused under the budget")
					}
				}
			}
			if tokenCheck(a, "k1", 30_000) {
				t.Fatal("a debit of 30 000 tokens admitted on a budget of 1000")
			}
			if tokenCheck(a, "k1", 0) {
				t.Fatal("the limiter that saw the debit pass the budget answered the next check OK")
			}
			ok := 0
			for tokenCheck(b, "k1", 0) {
				if ok++; ok == 3000 { // 15 s at least: far past the second the bound allows
					t.Fatalf("the other limiter answered %d checks OK after the debit passed the budget", ok)
				}
				time.Sleep(5 * time.Millisecond)
			}
			for i := range 40 {
				svc, cost := map[bool]*limiter.Service{true: a, false: b}[i%2 == 0], int64(i/2%2)
				if tokenCheck(svc, "k1", cost) {
					t.Fatalf("check %d (cost %d) answered OK after both limiters answered OVER_LIMIT", i, cost)
				}
			}
			t.Logf("the other limiter answered %d paced checks OK before OVER_LIMIT", ok)
		})
	}
}

// tokenLimiter is a limiter of tokenRules on the Redis at addr, with the
// fleet's lease notices when notices.
func tokenLimiter(t *testing.T, addr, name string, notices bool) (*limiter.Service, *prometheus.Registry) {
	t.Helper()
	rdb := redisOn(t, addr, time.Second, 8)
	cfg := limiter.Config{Instance: name, Lease: lease.Config{Horizon: 20 * time.Millisecond}}
	if notices {
		cfg.LeaseNotices = redisfleet.NewLeaseNotices(rdb, "rwtokens:")
	}
	reg := prometheus.NewRegistry()
	svc := limitertest.Service(t, redisstore.New(rdb), ruleSet(t, tokenRules, "rwtokens:"), limitertest.Options{
		Limiter: cfg, Coalesce: redisstore.CoalesceConfig{Pipelines: 2, Timeout: time.Second}, Registerer: reg,
	})
	svc.Start()
	t.Cleanup(svc.Stop)
	return svc, reg
}

// tokenCheck asks svc about api key at cost and reports whether it
// answered OK.
func tokenCheck(svc *limiter.Service, key string, cost int64) bool {
	req := &rules.DescriptorRequest{Domain: "llm", Endpoint: "/", Descriptors: []rules.Descriptor{
		{Entries: []rules.Entry{{Key: "api_key", Value: key}}, Cost: cost}}}
	var d limiter.Decision
	svc.CheckDescriptors(context.Background(), req, &d)
	if len(d.Results) != 1 {
		panic(fmt.Sprintf("no rule decided the descriptor: %+v", d))
	}
	return d.Results[0].Allowed
}
