package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// The limiter's 503 for a check that a rule whose on_redis_failure is deny
// could not decide (Redis down), as it writes it.
const (
	undecidableMessage = "rule login-deny cannot be decided: redis unavailable and its failure policy is deny"
	undecidableAnswer  = `{"error":"` + undecidableMessage + `","rule_id":"login-deny","on_redis_failure":"deny"}` + "\n"
)

// undecidableRefusal is the decision on such a check.
var undecidableRefusal = Decision{Reason: ReasonUndecidable, RuleID: "login-deny", RetryAfter: time.Second}

// A check the limiter could not decide for a rule whose policy is deny is
// that rule's refusal, whatever the client's failure policy: it is never
// admitted, and the breaker never hears of it (the limiter answered), so
// FailOpen does not admit everything once it would have opened.
func TestCheckUndecidable(t *testing.T) {
	for _, p := range []struct {
		name   string
		policy FailurePolicy
	}{
		{"fail open", FailOpen},
		{"fail closed", FailClosed},
		{"a fallback", Fallback(func(context.Context, *Request) Decision { return Decision{Allowed: true, Reason: "local"} })},
	} {
		t.Run(p.name, func(t *testing.T) {
			f := newFake(t, answer(503, "application/json", undecidableAnswer))
			var log errorLog
			const failures, n = 3, 20
			c := newClient(t, Config{URL: f.URL, OnFailure: p.policy, OnError: log.hook, BreakerFailures: failures, BreakerOpen: time.Hour})
			admitted, wrong := 0, 0
			for i := range n {
				ctx := context.Background()
				if i == n-1 {
					ctx = cancelled() // refused as the rule says, not for the caller gone
				}
				d, err := c.Check(ctx, &Request{IP: "203.0.113.7", Endpoint: "/login"})
				if d.Allowed {
					admitted++
				}
				var e *Error
				if d != undecidableRefusal || !errors.As(err, &e) || !e.Answered || e.Status != 503 || e.Message != undecidableMessage ||
					!errors.Is(err, ErrUndecidable) || errors.Is(err, ErrCallerGone) {
					if wrong++; wrong == 1 {
						t.Errorf("check %d: %+v, %v; want the rule's refusal and ErrUndecidable", i+1, d, err)
					}
				}
			}
			s := c.Stats()
			t.Logf("%d of %d checks admitted, %d not the rule's refusal; %d reached the limiter; stats %+v",
				admitted, n, wrong, len(f.sent("/v1/check")), s)
			if admitted != 0 || wrong != 0 || len(f.sent("/v1/check")) != n || s != (Stats{Checks: n, Undecidable: n}) {
				t.Fatalf("%d of %d admitted, %d reached the limiter (the breaker opened?), stats %+v", admitted, n, len(f.sent("/v1/check")), s)
			}
			if seen := log.all(); len(seen) != n {
				t.Fatalf("OnError saw %d errors, want %d", len(seen), n)
			}
		})
	}
}

// Only the limiter's own answer is a refusal: a 503 without the marker (a
// proxy's, a limiter of an older version), or with a marker in another
// answer, is the limiter unavailable: the failure policy decides and the
// breaker counts it.
func TestUndecidableNeedsTheLimitersAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"a bare 503", "application/json", `{"error":"service unavailable"}`, 503},
		{"a proxy's page", "text/html", undecidableAnswer, 503},
		{"another policy", "application/json", `{"error":"x","rule_id":"login-deny","on_redis_failure":"local"}`, 503},
		{"no rule", "application/json", `{"error":"x","on_redis_failure":"deny"}`, 503},
		{"another status", "application/json", undecidableAnswer, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, answer(tc.status, tc.contentType, tc.body))
			const failures = 3
			c := newClient(t, Config{URL: f.URL, BreakerFailures: failures, BreakerOpen: time.Hour}) // FailOpen
			for i := range failures + 1 {
				d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/login"})
				if !d.Allowed || !d.Fallback || errors.Is(err, ErrUndecidable) {
					t.Fatalf("check %d: %+v, %v; want FailOpen's", i+1, d, err)
				}
			}
			if s := c.Stats(); s != (Stats{Checks: failures + 1, Fallbacks: failures + 1, BreakerOpen: 1}) {
				t.Fatalf("stats %+v, want the breaker open after %d failures", s, failures)
			}
		})
	}
}

// In a batch, each check the limiter could not decide for a deny rule is
// that rule's refusal; one without the marker gets the failure policy's
// decision, as a single check would.
func TestCheckBatchUndecidable(t *testing.T) {
	f := newFake(t, answer(200, "application/json", `{"decisions":[{"status":200,`+allowedAnswer[1:]+`,`+
		`{"status":503,"error":"`+undecidableMessage+`","rule_id":"login-deny","on_redis_failure":"deny"},`+
		`{"status":503,"error":"down"}]}`))
	c := newClient(t, Config{URL: f.URL, BreakerFailures: 1, BreakerOpen: time.Hour}) // FailOpen
	for range 3 {
		reqs := []Request{{IP: "203.0.113.7", Endpoint: "/a"}, {IP: "203.0.113.7", Endpoint: "/login"}, {IP: "203.0.113.7", Endpoint: "/b"}}
		ds, err := c.CheckBatch(context.Background(), reqs)
		if !ds[0].Allowed || ds[0].Fallback || ds[1] != undecidableRefusal || !ds[2].Allowed || !ds[2].Fallback {
			t.Fatalf("decisions %+v", ds)
		}
		if !errors.Is(err, ErrUndecidable) {
			t.Fatalf("error %v, want ErrUndecidable", err)
		}
	}
	if s := c.Stats(); s != (Stats{Checks: 9, Undecidable: 3, Fallbacks: 3}) {
		t.Fatalf("stats %+v", s)
	}
}

// The middleware answers such a request 503 with Retry-After, as the
// limiter's own forward auth answers 503, and never serves it; Denied, when
// set, answers it.
func TestMiddlewareUndecidable(t *testing.T) {
	f := newFake(t, answer(503, "application/json", undecidableAnswer))
	c := newClient(t, Config{URL: f.URL, BreakerFailures: 1, BreakerOpen: time.Hour}) // FailOpen
	var served atomic.Int64
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })
	for range 3 {
		rec := httptest.NewRecorder()
		Middleware(c, MiddlewareConfig{})(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/login", nil))
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "1" || served.Load() != 0 {
			t.Fatalf("%d, Retry-After %q, served %d times; want 503, 1, none", rec.Code, rec.Header().Get("Retry-After"), served.Load())
		}
	}
	var reason string
	rec := httptest.NewRecorder()
	Middleware(c, MiddlewareConfig{Denied: func(w http.ResponseWriter, _ *http.Request, d Decision) {
		reason = d.Reason
		w.WriteHeader(http.StatusTeapot)
	}})(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/login", nil))
	if rec.Code != http.StatusTeapot || reason != ReasonUndecidable || served.Load() != 0 {
		t.Fatalf("Denied: %d, reason %q, served %d times", rec.Code, reason, served.Load())
	}
}
