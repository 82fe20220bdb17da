package rlsapi_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ratewarden/ratewarden/internal/rlsapi"
	"github.com/ratewarden/ratewarden/internal/rlsconfig"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// The configurations of envoyproxy/ratelimit's README (Examples 1 to 9,
// plus share_threshold, unit_multiplier and the long units), loaded by
// package rlsconfig as RLS_CONFIG_DIR loads them, answered over gRPC by the
// limiter on the real Redis, checked against what that README says of
// them.

const day = rlsv3.RateLimitResponse_RateLimit_DAY

// examplesEnv is a limiter whose rules are the example files.
func examplesEnv(t *testing.T, cfg rlsapi.Config) *env {
	t.Helper()
	c, err := rlsconfig.LoadDir("../rlsconfig/testdata/examples")
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, c.Rules, options{cfg: cfg})
}

// inOneWindow runs f on a fresh limiter until a run begins and ends in one
// window of length per (fixed windows start at multiples of their length):
// per-second examples must count within one second whatever the machine's
// speed. It gives up after 5 runs.
func inOneWindow(t *testing.T, per time.Duration, f func(e *env) error) {
	t.Helper()
	var err error
	for range 5 {
		e := examplesEnv(t, rlsapi.Config{})
		start := time.Now().Truncate(per)
		err = f(e)
		if time.Now().Truncate(per) == start {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Logf("a %s window ended during the run: again", per)
	}
	t.Fatalf("no run fit in one %s window; last: %v", per, err)
}

// sendN sends req n times and returns the overall codes.
func sendN(e *env, req *rlsv3.RateLimitRequest, n int) []rlsv3.RateLimitResponse_Code {
	var out []rlsv3.RateLimitResponse_Code
	for range n {
		out = append(out, e.mustCall(req).OverallCode)
	}
	return out
}

// admitted is the number of leading OKs, and whether every later code is
// OVER_LIMIT.
func admitted(cs []rlsv3.RateLimitResponse_Code) (int, bool) {
	n := 0
	for n < len(cs) && cs[n] == ok {
		n++
	}
	for _, c := range cs[n:] {
		if c != overLimit {
			return n, false
		}
	}
	return n, true
}

func wantAdmitted(cs []rlsv3.RateLimitResponse_Code, want int) error {
	if n, clean := admitted(cs); n != want || !clean {
		return fmt.Errorf("codes %v: want %d OK then OVER_LIMIT", cs, want)
	}
	return nil
}

func TestReadmeExamples(t *testing.T) {
	// Example 1: two values of one key, 500 per second each; another value
	// is not limited.
	t.Run("1 mongo_cps", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		resp := e.mustCall(request("mongo_cps", desc("database", "users"), desc("database", "default"), desc("database", "logs")))
		checkResponse(t, "three databases", resp, ok,
			wantStatus{code: ok, limit: limitOf("", 500, second), remaining: 499, reset: time.Second},
			wantStatus{code: ok, limit: limitOf("", 500, second), remaining: 499, reset: time.Second},
			wantStatus{code: ok})
	})

	// Example 2: nested descriptors; 5 marketing messages a day to one
	// number, 100 messages a day to any number; both in one call, OR'ed.
	t.Run("2 messaging", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		marketing := desc("message_type", "marketing", "to_number", "2061111111")
		anyMessage := desc("to_number", "2061111111")
		var last *rlsv3.RateLimitResponse
		for i := range 6 {
			last = e.mustCall(request("messaging", marketing, anyMessage))
			if i < 5 && last.OverallCode != ok {
				t.Fatalf("message %d: %s, want OK", i+1, last.OverallCode)
			}
		}
		checkResponse(t, "6th marketing message", last, overLimit,
			wantStatus{code: overLimit, limit: limitOf("", 5, day), remaining: 0, reset: 24 * time.Hour},
			wantStatus{code: ok, limit: limitOf("", 100, day), remaining: 94, reset: 24 * time.Hour})
		// Another number has its own count.
		resp := e.mustCall(request("messaging", desc("message_type", "marketing", "to_number", "2062222222")))
		checkResponse(t, "another number", resp, ok, wantStatus{code: ok, limit: limitOf("", 5, day), remaining: 4, reset: 24 * time.Hour})
	})

	// Example 3: the most specific match wins: 50.0.0.5 gets 0 per second,
	// any other address 10.
	t.Run("3 edge_proxy_per_ip", func(t *testing.T) {
		inOneWindow(t, time.Second, func(e *env) error {
			if err := wantAdmitted(sendN(e, request("edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), 12), 10); err != nil {
				return fmt.Errorf("50.0.0.1: %w", err)
			}
			return wantAdmitted(sendN(e, request("edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), 2), 0)
		})
	})

	// Example 4: a request matches at its own depth only.
	t.Run("4 same level", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		two := desc("key", "value", "subkey", "subvalue")
		checkResponse(t, "two entries, one-level config", e.mustCall(request("example4_flat", two)), ok, wantStatus{code: ok})
		checkResponse(t, "two entries, nested config", e.mustCall(request("example4", two)), ok,
			wantStatus{code: ok, limit: limitOf("", 300, second), remaining: 299, reset: time.Second})
	})

	// Example 5: unlimited answers OK with MaxUint32 remaining, not counted.
	t.Run("5 unlimited", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		for range 3 {
			checkResponse(t, "ldap", e.mustCall(request("internal", desc("ldap", "x"))), ok,
				wantStatus{code: ok, remaining: math.MaxUint32})
		}
		checkResponse(t, "azure", e.mustCall(request("internal", desc("azure", "x"))), ok,
			wantStatus{code: ok, limit: limitOf("", 100, minute), remaining: 99, reset: time.Minute})
	})

	// Example 6: user-a is in shadow mode (never OVER_LIMIT), user-b is
	// limited to 20 per second.
	t.Run("6 shadow_mode", func(t *testing.T) {
		inOneWindow(t, time.Second, func(e *env) error {
			if err := wantAdmitted(sendN(e, request("example6", desc("service", "auth-service", "user", "user-a")), 15), 15); err != nil {
				return fmt.Errorf("user-a: %w", err)
			}
			return wantAdmitted(sendN(e, request("example6", desc("service", "auth-service", "user", "user-b")), 22), 20)
		})
	})

	// Example 7: with both descriptors, only the replacing limit (10) takes
	// effect and the replaced one (5) is not counted.
	t.Run("7 replaces", func(t *testing.T) {
		inOneWindow(t, time.Second, func(e *env) error {
			one := desc("key_1", "value_1", "user", "bkthomps")
			two := desc("key_2", "value_2", "user", "bkthomps")
			resp := e.mustCall(request("example7", one, two))
			if s := resp.Statuses[0]; s.CurrentLimit != nil || s.Code != ok {
				return fmt.Errorf("replaced descriptor: %v, want OK without a limit", s)
			}
			if s := resp.Statuses[1]; s.CurrentLimit.GetRequestsPerUnit() != 10 || s.LimitRemaining != 9 {
				return fmt.Errorf("replacing descriptor: %v, want 10 per second, 9 left", s)
			}
			if err := wantAdmitted(append([]rlsv3.RateLimitResponse_Code{resp.OverallCode}, sendN(e, request("example7", one, two), 10)...), 10); err != nil {
				return fmt.Errorf("both: %w", err)
			}
			// The replaced limit was not changed: 5 for the first alone.
			return wantAdmitted(sendN(e, request("example7", one), 6), 5)
		})
	})

	// Example 8: detailed_metric names the value in the metric; each value
	// of key1 gets 10 per minute, value1 20.
	t.Run("8 detailed_metric", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		checkResponse(t, "unspecified", e.mustCall(request("example8", desc("key1", "unspecified_value"))), ok,
			wantStatus{code: ok, limit: limitOf("", 10, minute), remaining: 9, reset: time.Minute})
		checkResponse(t, "value1", e.mustCall(request("example8", desc("key1", "value1"))), ok,
			wantStatus{code: ok, limit: limitOf("", 20, minute), remaining: 19, reset: time.Minute})
		e.wantMetric("rate_limit_rls_descriptors_total", map[string]string{"descriptor": "rls.example8.key1.key1_unspecified_value"}, 1)
		e.wantMetric("rate_limit_rls_descriptors_total", map[string]string{"descriptor": "rls.example8.key1_value1"}, 1)
	})

	// Example 9: a wildcard value; each matching value counts on its own.
	t.Run("9 wildcard", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		for _, v := range []string{"value_1", "value_2"} {
			checkResponse(t, v, e.mustCall(request("example9", desc("key1", v))), ok,
				wantStatus{code: ok, limit: limitOf("", 20, minute), remaining: 19, reset: time.Minute})
		}
		checkResponse(t, "no match", e.mustCall(request("example9", desc("key1", "other"))), ok, wantStatus{code: ok})
	})

	// share_threshold: every value under /api/* shares one count; under
	// /files/* (no share_threshold) each value has its own.
	t.Run("share_threshold", func(t *testing.T) {
		testkit.AvoidWindowEnd(t, time.Minute, 15*time.Second) // the shared count is a minute's
		e := examplesEnv(t, rlsapi.Config{})
		for i, p := range []string{"/api/a", "/api/b", "/api/c"} {
			resp := e.mustCall(request("shared", desc("path", p)))
			if got, want := resp.Statuses[0].LimitRemaining, uint32(99-i); got != want {
				t.Errorf("%s: %d remaining, want %d (one shared count)", p, got, want)
			}
		}
		for _, p := range []string{"/files/a", "/files/b"} {
			if got := e.mustCall(request("shared", desc("path", p))).Statuses[0].LimitRemaining; got != 99 {
				t.Errorf("%s: %d remaining, want 99 (a count of its own)", p, got)
			}
		}
	})

	// Long units and unit_multiplier.
	t.Run("units", func(t *testing.T) {
		e := examplesEnv(t, rlsapi.Config{})
		for _, tc := range []struct {
			key   string
			limit *rlsv3.RateLimitResponse_RateLimit
			reset time.Duration
		}{
			{"weekly", limitOf("", 7, rlsv3.RateLimitResponse_RateLimit_WEEK), 7 * 24 * time.Hour},
			{"monthly", limitOf("", 30, rlsv3.RateLimitResponse_RateLimit_MONTH), 30 * 24 * time.Hour},
			{"yearly", limitOf("", 365, rlsv3.RateLimitResponse_RateLimit_YEAR), 365 * 24 * time.Hour},
			{"every_5_minutes", limitOf("", 10, minute), 5 * time.Minute}, // 50 per 5 minutes, as a rate per unit
		} {
			resp := e.mustCall(request("units", desc(tc.key, "x")))
			checkResponse(t, tc.key, resp, ok, wantStatus{code: ok, limit: tc.limit, remaining: uint32(tc.limit.RequestsPerUnit*uint32(tc.reset/unitOf(tc.limit.Unit))) - 1, reset: tc.reset})
		}
	})
}

// unitOf is the length of a unit of the API.
func unitOf(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}
