package e2e

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokenBudgets are the RLS config files of the post-response cost test: one
// domain per algorithm, 1 000 tokens an hour per API key, each debiting
// every call (the default of descriptor rules), and one fixed window that
// debits admitted calls only.
var tokenBudgets = map[string]string{
	"fixed_window":            "rate_limit: {unit: hour, requests_per_unit: 1000}",
	"sliding_window":          "rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window}",
	"sliding_window_counter":  "rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_window_counter}",
	"token_bucket":            "rate_limit: {unit: day, requests_per_unit: 1, burst: 1000, algorithm: token_bucket}",
	"fixed_window_two_limits": "rate_limit: {limits: [{requests: 1000, per: 1h}, {requests: 5000, per: 24h}]}",
	"admitted_only":           "rate_limit: {unit: hour, requests_per_unit: 1000, debit: admitted}",
}

// Envoy AI Gateway's pattern, over gRPC on the real limiter: a check of
// hits_addend 0 before the request, the tokens the response used as
// hits_addend after it. With every algorithm, a debit that does not fit is
// counted, usage passes the budget, and the next check is OVER_LIMIT, as
// envoyproxy/ratelimit answers (check 0, use 600, check 0, use 700, check
// 0: OK, OK, OK, OVER_LIMIT, OVER_LIMIT). A rule that debits admitted
// calls only refuses the 700 without counting it, and the check passes. A
// hits_addend of 2^32-1 is one debit like any other.
func TestRLSPostResponseCost(t *testing.T) {
	e := newEnv(t)
	files := map[string]string{}
	for alg, rl := range tokenBudgets {
		files[alg+".yaml"] = fmt.Sprintf("domain: %s\ndescriptors:\n  - key: api_key\n    %s\n", alg, rl)
	}
	lim := e.start("limiter", "RLS_CONFIG_DIR", rlsDir(t, files))
	client := rlsClient(t, lim)
	call := func(domain, key string, hits uint64) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		req := rlsRequest(domain, "api_key="+key)
		req.Descriptors[0].HitsAddend = wrapperspb.UInt64(hits)
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("%s: hits_addend %d: %v", domain, hits, err)
		}
		return resp.Statuses[0]
	}
	type step struct {
		hits      uint64
		code      rlsv3.RateLimitResponse_Code
		remaining uint32
	}
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	debitAlways := []step{{0, ok, 1000}, {600, ok, 400}, {0, ok, 400}, {700, over, 0}, {0, over, 0}, {1, over, 0}}
	for domain := range tokenBudgets {
		t.Run(domain, func(t *testing.T) {
			steps := debitAlways
			if domain == "admitted_only" {
				steps = []step{{0, ok, 1000}, {600, ok, 400}, {0, ok, 400}, {700, over, 400}, {0, ok, 400}, {400, ok, 0}}
			}
			withinAnHour(t, func(round int) string {
				key := fmt.Sprintf("k-%d", round)
				for i, s := range steps {
					if st := call(domain, key, s.hits); st.Code != s.code || st.LimitRemaining != s.remaining {
						return fmt.Sprintf("step %d (hits_addend %d): %s remaining %d, want %s remaining %d",
							i, s.hits, st.Code, st.LimitRemaining, s.code, s.remaining)
					}
				}
				return ""
			})
			// The largest hits_addend is one debit: the budget is spent,
			// the counters stay exact, and the next calls still answer.
			for i, hits := range []uint64{math.MaxUint32, math.MaxUint32, 0} {
				want := over
				if i == 2 && domain == "admitted_only" { // neither was counted
					want = ok
				}
				if st := call(domain, "k-huge", hits); st.Code != want {
					t.Fatalf("hits_addend %d (call %d): %s, want %s", hits, i, st.Code, want)
				}
			}
		})
	}
}

// A configuration envoyproxy/ratelimit loads starts the real limiter with
// its meaning: a '*' in the middle of a value limits the paths it matches
// (it matched nothing before), unlimited beside key instead of under
// rate_limit is ignored with a warning naming file, line and key, as there,
// and a descriptor's own limit applies.
func TestRLSLoadsWhatEnvoyproxyRatelimitLoads(t *testing.T) {
	e := newEnv(t)
	lim := e.start("limiter", "RLS_CONFIG_DIR", rlsDir(t, map[string]string{"erl.yaml": `domain: erl
descriptors:
  - key: path
    value: /api/*/action
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: ldap
    unlimited: true
`}))
	client := rlsClient(t, lim)
	code := func(descriptor string) string {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), rlsRequest("erl", descriptor))
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode.String()
	}
	// Each value counts on its own (no share_threshold): a value's third
	// call is over.
	withinAnHour(t, func(round int) string {
		v1, v2 := fmt.Sprintf("path=/api/a%d/action", round), fmt.Sprintf("path=/api/b%d/action", round)
		var got []string
		for _, d := range []string{v1, v2, v1, v1, "path=/api/v1/other", "ldap=x", "ldap=x", "ldap=x"} {
			got = append(got, code(d))
		}
		if want := "OK OK OK OVER_LIMIT OK OK OK OK"; strings.Join(got, " ") != want {
			return fmt.Sprintf("codes %v, want %s", got, want)
		}
		return ""
	})
	// A descriptor's own limit applies where no rule matches, as
	// envoyproxy/ratelimit applies it (here to a key of the domain).
	override := rlsRequest("erl", "ldap=limited")
	override.Descriptors[0].Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_YEAR}
	var overridden []string
	for range 2 {
		resp, err := client.ShouldRateLimit(context.Background(), override)
		if err != nil {
			t.Fatal(err)
		}
		overridden = append(overridden, resp.OverallCode.String())
	}
	if got := strings.Join(overridden, " "); got != "OK OVER_LIMIT" {
		t.Errorf("a descriptor's limit of 1 a year: %s, want OK OVER_LIMIT", got)
	}
	if out := lim.out.String(); !strings.Contains(out, `"RLS config: a key not used"`) || !strings.Contains(out, `"file":"erl.yaml","line":7`) {
		t.Errorf("no warning naming erl.yaml line 7 in the limiter's log:\n%s", out)
	}
}

// withinAnHour runs round(0), which returns why it failed or "". A fixed
// window of an hour that ends during a round starts the budget again, so
// a round that failed while an hour turned is run once more, as round(1)
// (with keys of its own); any other failure fails the test.
func withinAnHour(t *testing.T, round func(n int) string) {
	t.Helper()
	for n := 0; ; n++ {
		started := time.Now()
		failed := round(n)
		if failed == "" {
			return
		}
		if n > 0 || started.Truncate(time.Hour).Equal(time.Now().Truncate(time.Hour)) {
			t.Fatal(failed)
		}
	}
}
