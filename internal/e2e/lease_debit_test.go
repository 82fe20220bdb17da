package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// leasedTokenRules is a leased token budget of Envoy's rate limit API:
// 1 000 tokens an hour per API key, every call debited (the default of
// descriptor rules).
const leasedTokenRules = `
rules:
  - id: tokens
    descriptor: {domain: llm, entries: [{key: api_key}]}
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
    lease: {max_units: 20}
`

// TestLeasedTokenBudgetPastTheLimit: Envoy AI Gateway's pattern over gRPC
// on two real limiters that answer an API key's checks of hits_addend 0
// from their leases. A debit of 30 000 tokens on the first passes the
// budget: the first answers its next check OVER_LIMIT, the second soon
// after, told by the first over Redis; from then on both answer
// OVER_LIMIT to checks of hits_addend 0 and 1, as the rule without leases
// does. The second limiter's checks are paced and counted, up to a cap far
// past the second the leases allow.
func TestLeasedTokenBudgetPastTheLimit(t *testing.T) {
	lims := startLeaseLimiters(t, 2, leasedTokenRules)
	a, b := rlsClient(t, lims[0]), rlsClient(t, lims[1])
	withinAnHour(t, func(round int) string {
		check := func(client rlsv3.RateLimitServiceClient, hits uint64) bool {
			req := rlsRequest("llm", fmt.Sprintf("api_key=k-%d", round))
			req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
			resp, err := client.ShouldRateLimit(context.Background(), req)
			if err != nil {
				t.Fatalf("hits_addend %d: %v", hits, err)
			}
			return resp.OverallCode == rlsv3.RateLimitResponse_OK
		}
		for i, client := range []rlsv3.RateLimitServiceClient{a, b} {
			for n := 0; lims[i].metric(t, "rate_limit_lease_decisions_total") == 0; n++ {
				if n == 1000 {
					return fmt.Sprintf("limiter %d: 1000 checks of a hot key, none answered from a lease", i+1)
				}
				if !check(client, 0) {
					return "a check of hits_addend 0 refused under the budget"
				}
			}
		}
		if check(a, 30_000) {
			return "a debit of 30 000 tokens admitted on a budget of 1 000"
		}
		if check(a, 0) {
			return "the limiter that saw the debit pass the budget answered its next check OK"
		}
		ok := 0
		for check(b, 0) {
			if ok++; ok == 3000 {
				return fmt.Sprintf("the other limiter answered %d paced checks OK after the debit passed the budget", ok)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for i := range 40 {
			client, hits := []rlsv3.RateLimitServiceClient{a, b}[i%2], uint64(i/2%2)
			if check(client, hits) {
				return fmt.Sprintf("check %d (hits_addend %d) answered OK after both limiters answered OVER_LIMIT", i, hits)
			}
		}
		if n := lims[1].metric(t, "rate_limit_lease_notices_total", `outcome="received"`); n == 0 {
			return "the other limiter received no notice"
		}
		t.Logf("the other limiter answered %d paced checks OK before OVER_LIMIT", ok)
		return ""
	})
}
