package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratewarden/ratewarden/internal/testkit"
)

// ruleFor returns a one-rule file keyed on the client IP.
func ruleFor(algorithm, limits string) string {
	return fmt.Sprintf(`
rules:
  - id: r
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: %s
    limits: %s
`, algorithm, limits)
}

// exactCases limit one key to 100 requests. The fixed windows are an hour
// long, aligned on the hour, and each test that counts in them starts with
// testkit.AvoidHourEnd: a window that restarted mid-test would rightly
// admit more (a minute's window needed a wait in a quarter of the runs).
var exactCases = []struct {
	algorithm, limits string
}{
	{"fixed_window", "[{requests: 100, per: 1h}]"},
	{"sliding_window", "[{requests: 100, per: 1m}]"},
	{"token_bucket", "[{rate: 1, per: 1h, burst: 100}]"},
	{"sliding_window_counter", "[{requests: 100, per: 1h}]"},
}

// hammer sends clients×perClient checks concurrently, spread over the given
// stacks, and returns how many were admitted.
func hammer(t *testing.T, stacks []*stack, clients, perClient int) (admitted, denied int64) {
	t.Helper()
	var ok, no atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		s := stacks[c%len(stacks)]
		wg.Go(func() {
			for range perClient {
				r := s.check(`{"ip":"198.51.100.9","endpoint":"/api/books/1"}`)
				switch {
				case r.Status != http.StatusOK:
					t.Errorf("status %d: %s", r.Status, r.Error)
				case r.Allowed:
					ok.Add(1)
				case r.Reason == "rate_limited":
					no.Add(1)
				default:
					t.Errorf("unexpected decision %+v", r)
				}
			}
		})
	}
	wg.Wait()
	return ok.Load(), no.Load()
}

// 200 clients × 5 requests against a limit of 100: exactly 100 admitted,
// with and without the over-limit cache answering repeated denials.
func TestExactUnderConcurrency(t *testing.T) {
	for _, tc := range exactCases {
		for _, cache := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/over-limit cache %d", tc.algorithm, cache), func(t *testing.T) {
				s := newStack(t, stackOptions{rules: ruleFor(tc.algorithm, tc.limits), overLimitCache: cache})
				testkit.AvoidHourEnd(t)
				admitted, denied := hammer(t, []*stack{s}, 200, 5)
				if admitted != 100 || denied != 900 {
					t.Fatalf("admitted %d, denied %d; want exactly 100 and 900", admitted, denied)
				}
				hits := s.metric("rate_limit_over_limit_cache_hits_total", nil)
				if (cache > 0) != (hits > 0) {
					t.Fatalf("over-limit cache hits = %v with a cache of %d", hits, cache)
				}
				t.Logf("%v of 900 denials answered from the over-limit cache", hits)
			})
		}
	}
}

// Two limiter instances on one Redis share one limit exactly.
func TestTwoInstancesShareLimit(t *testing.T) {
	for _, tc := range exactCases {
		t.Run(tc.algorithm, func(t *testing.T) {
			first := newStack(t, stackOptions{rules: ruleFor(tc.algorithm, tc.limits), overLimitCache: 1000})
			rdb, prefix, broker := first.shared()
			second := newStack(t, stackOptions{rules: ruleFor(tc.algorithm, tc.limits), rdb: rdb, prefix: prefix, broker: broker, overLimitCache: 1000})
			testkit.AvoidHourEnd(t)
			admitted, denied := hammer(t, []*stack{first, second}, 200, 5)
			if admitted != 100 || denied != 900 {
				t.Fatalf("admitted %d, denied %d across two instances; want exactly 100 and 900", admitted, denied)
			}
		})
	}
}

func TestCheckHeadersAndBody(t *testing.T) {
	s := newStack(t, stackOptions{rules: `
rules:
  - id: login
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 2, per: 1s}, {requests: 10, per: 1m}]
`})
	body := `{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST"}`
	first := s.check(body)
	if first.Status != 200 || !first.Allowed || first.Reason != "ok" || first.RuleID != "login" ||
		first.Algorithm != "sliding_window" || first.Limit != 2 || first.Remaining != 1 || first.Mode != "redis" || first.EventID == "" {
		t.Fatalf("first decision: %+v", first)
	}
	wantHeaders := map[string]string{
		"RateLimit-Policy": `"login/1s";q=2;w=1, "login/1m";q=10;w=60`,
		// The window is inclusive ([now-1s, now]), so the request just
		// counted leaves it 1001 ms from now: rounded up, 2 s.
		"RateLimit":             `"login/1s";r=1;t=2`,
		"X-RateLimit-Limit":     "2",
		"X-RateLimit-Remaining": "1",
		"X-RateLimit-Reset":     "2",
		"Retry-After":           "",
	}
	for k, v := range wantHeaders {
		if got := first.Header.Get(k); got != v {
			t.Errorf("first %s = %q, want %q", k, got, v)
		}
	}
	s.check(body)
	third := s.check(body)
	if third.Status != 200 || third.Allowed || third.Reason != "rate_limited" || third.Remaining != 0 ||
		third.RetryAfterMs <= 0 || third.RetryAfterMs > 1001 {
		t.Fatalf("third decision: %+v", third)
	}
	if got, want := third.Header.Get("Retry-After"), fmt.Sprint((third.RetryAfterMs+999)/1000); got != want {
		t.Errorf("Retry-After = %q, want %s (retry_after_ms %d rounded up)", got, want, third.RetryAfterMs)
	}
	if got := third.Header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining = %q, want 0", got)
	}
	if got := s.metric("rate_limit_requests_total", map[string]string{"result": "rate_limited", "rule": "login"}); got != 1 {
		t.Errorf("rate_limited requests metric = %v, want 1", got)
	}
}

func TestAuthStatuses(t *testing.T) {
	rulesYAML := `
rules:
  - id: one
    match: {endpoints: ["/api/**"]}
    key: [ip, method]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
`
	tests := []struct {
		name       string
		denyStatus int
		path       string
		header     map[string]string
		want       int
	}{
		{"traefik headers", 0, "/v1/auth", map[string]string{"X-Forwarded-Uri": "/api/a?x=1", "X-Forwarded-Method": "GET"}, http.StatusTooManyRequests},
		{"nginx with 403", http.StatusForbidden, "/v1/auth", map[string]string{"X-Original-URI": "/api/a", "X-Original-Method": "POST"}, http.StatusForbidden},
		{"envoy path suffix", 0, "/v1/auth/api/a", nil, http.StatusTooManyRequests},
		// The path is the client's: normalized as an endpoint, never
		// redirected to a cleaned path as a mux would.
		{"envoy path suffix, unclean", 0, "/v1/auth//api//b/../a", nil, http.StatusTooManyRequests},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			testkit.AvoidHourEnd(t) // the second request must find the first counted
			s := newStack(t, stackOptions{rules: rulesYAML, configure: func(c *stackConfig) { c.AuthDenyStatus = tt.denyStatus }})
			first := s.do(http.MethodGet, tt.path, "", tt.header)
			if first.Status != http.StatusOK || !first.Allowed || first.Header.Get("X-RateLimit-Remaining") != "0" {
				t.Fatalf("first: status %d %+v", first.Status, first)
			}
			second := s.do(http.MethodGet, tt.path, "", tt.header)
			if second.Status != tt.want || second.Allowed || second.Header.Get("Retry-After") == "" {
				t.Fatalf("second: status %d want %d, %+v", second.Status, tt.want, second)
			}
		})
	}
	t.Run("no endpoint", func(t *testing.T) {
		s := newFixedStack(t, stackOptions{rules: rulesYAML})
		r := s.do(http.MethodGet, "/v1/auth", "", nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Error, "X-Forwarded-Uri") {
			t.Fatalf("got %d %q", r.Status, r.Error)
		}
	})
}

func TestReasons(t *testing.T) {
	testkit.AvoidHourEnd(t) // the second shadow check must find the first counted
	s := newStack(t, stackOptions{rules: `
rules:
  - id: shadowed
    match: {endpoints: ["/api/new/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 1, per: 1h}]
    shadow: true
exempt:
  tiers: [SUPER_ADMIN]
`})
	shadowBody := `{"ip":"192.0.2.1","endpoint":"/api/new/x"}`
	if r := s.check(shadowBody); !r.Allowed || r.Reason != "ok" || r.Shadow {
		t.Fatalf("first shadow check: %+v", r)
	}
	r := s.check(shadowBody)
	if !r.Allowed || r.Reason != "rate_limited" || !r.Shadow || r.Header.Get("Retry-After") != "" || r.Header.Get("RateLimit") != "" {
		t.Fatalf("shadow denial must be reported, not enforced, and not shown in headers: %+v %v", r, r.Header)
	}
	if r := s.check(`{"ip":"192.0.2.1","endpoint":"/api/new/x","tier":"super_admin"}`); !r.Allowed || r.Reason != "exempt" {
		t.Fatalf("exempt tier: %+v", r)
	}
	if r := s.check(`{"ip":"192.0.2.1","endpoint":"/elsewhere"}`); !r.Allowed || r.Reason != "no_rule" || r.Header.Get("RateLimit") != "" {
		t.Fatalf("no rule: %+v", r)
	}
	if got := s.metric("rate_limit_requests_total", map[string]string{"result": "rate_limited", "rule": "shadowed", "shadow": "true"}); got != 1 {
		t.Errorf("shadow rate_limited metric = %v, want 1", got)
	}
}

func TestBadInput(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: ruleFor("fixed_window", "[{requests: 5, per: 1s}]")})
	tests := []struct {
		name, method, body string
		status             int
		errContains        string
	}{
		{"invalid json", "POST", `{"ip":`, 400, "invalid JSON"},
		{"empty body", "POST", ``, 400, "empty body"},
		{"unknown field", "POST", `{"ip":"1.2.3.4","endpoint":"/a","color":"red"}`, 400, "unknown field"},
		{"trailing data", "POST", `{"ip":"1.2.3.4","endpoint":"/a"} {}`, 400, "unexpected data"},
		{"missing ip", "POST", `{"endpoint":"/a"}`, 400, "ip: required"},
		{"bad ip", "POST", `{"ip":"999.1.1.1","endpoint":"/a"}`, 400, "ip: not an IP"},
		{"missing endpoint", "POST", `{"ip":"1.2.3.4"}`, 400, "endpoint: required"},
		{"negative cost", "POST", `{"ip":"1.2.3.4","endpoint":"/a","cost":-1}`, 400, "cost"},
		{"bad method", "POST", `{"ip":"1.2.3.4","endpoint":"/a","method":"GET /x"}`, 400, "method"},
		{"wrong type", "POST", `{"ip":7,"endpoint":"/a"}`, 400, "invalid JSON"},
		{"huge user id", "POST", `{"ip":"1.2.3.4","endpoint":"/a","user_id":"` + strings.Repeat("u", 600) + `"}`, 400, "user_id"},
		{"oversized body", "POST", `{"ip":"1.2.3.4","endpoint":"/a","user_id":"` + strings.Repeat("u", 70<<10) + `"}`, 413, "larger than"},
		{"NUL in user id", "POST", `{"ip":"1.2.3.4","endpoint":"/a","user_id":"u\u0000"}`, 400, "user_id: control characters"},
		{"escape in tier", "POST", `{"ip":"1.2.3.4","endpoint":"/a","tier":"\u001b[31m"}`, 400, "tier: control characters"},
		{"NUL in endpoint", "POST", `{"ip":"1.2.3.4","endpoint":"/a\u0000"}`, 400, "endpoint: control characters"},
		{"encoded NUL in endpoint", "POST", `{"ip":"1.2.3.4","endpoint":"/a%00b"}`, 400, "endpoint: control characters"},
		{"encoded DEL in endpoint", "POST", `{"ip":"1.2.3.4","endpoint":"/a%7F"}`, 400, "endpoint: control characters"},
		{"wrong method", "GET", ``, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.do(tt.method, "/v1/check", tt.body, nil)
			if r.Status != tt.status || !strings.Contains(r.Error, tt.errContains) {
				t.Fatalf("got %d %q, want %d containing %q", r.Status, r.Error, tt.status, tt.errContains)
			}
		})
	}
	if r := s.check(`{"ip":"::ffff:1.2.3.4","endpoint":"/api/x"}`); r.Status != 200 || !r.Allowed {
		t.Fatalf("the service keeps serving after bad input: %+v", r)
	}
}
