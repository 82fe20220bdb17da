package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// A decision's answer as the limiter writes it, with a field this client
// does not know (a newer limiter's).
const allowedAnswer = `{"allowed":true,"reason":"ok","rule_id":"per-ip","algorithm":"sliding_window","limit":5,` +
	`"remaining":4,"reset_after_ms":1001,"retry_after_ms":0,"mode":"redis","shadow":false,"event_id":"e-1","future":{"x":[1,2.5,null]}}`

// recordingLimiter serves answer for every path and records the bodies.
type recordingLimiter struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string][]string
}

func newFake(t *testing.T, serve func(w http.ResponseWriter, r *http.Request, body string)) *recordingLimiter {
	f := &recordingLimiter{bodies: map[string][]string{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies[r.URL.Path] = append(f.bodies[r.URL.Path], string(b))
		f.mu.Unlock()
		serve(w, r, string(b))
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *recordingLimiter) sent(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.bodies[path]...)
}

func answer(status int, contentType, body string, headers ...string) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, _ *http.Request, _ string) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestCheck(t *testing.T) {
	f := newFake(t, answer(200, "application/json", allowedAnswer, "RateLimit-Policy", `"per-ip/1s";q=5;w=1`, "RateLimit", `"per-ip/1s";r=4;t=2`, "X-RateLimit-Remaining", "4"))
	c := newClient(t, Config{URL: f.URL, Token: "tok-123"})
	d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/api/\"x\"", UserID: "u-1", Method: "POST", Cost: 2,
		Attributes: map[string]string{"app": "k"}})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Reason != ReasonOK || d.RuleID != "per-ip" || d.Limit != 5 || d.Remaining != 4 || d.Reset != 1001*time.Millisecond ||
		d.Mode != "redis" || d.EventID != "e-1" || d.Fallback {
		t.Fatalf("decision %+v", d)
	}
	got := map[string]string{}
	d.headers.each(func(i int, v string) { got[limitHeaderNames[i]] = v })
	if got["Ratelimit"] != `"per-ip/1s";r=4;t=2` || got["X-Ratelimit-Remaining"] != "4" || len(got) != 3 {
		t.Fatalf("headers %v", got)
	}
	if b := f.sent("/v1/check"); len(b) != 1 || b[0] != `{"ip":"203.0.113.7","endpoint":"/api/\"x\"","user_id":"u-1","method":"POST","attributes":{"app":"k"},"cost":2}` {
		t.Fatalf("sent %q", b)
	}
}

// What the failure policy answers, and the *Error, for every way a call
// can go wrong; and the refusal, whatever the policy, of a request the
// limiter refused as invalid.
func TestCheckFailures(t *testing.T) {
	slow := func(w http.ResponseWriter, r *http.Request, _ string) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	for _, tc := range []struct {
		name     string
		serve    func(http.ResponseWriter, *http.Request, string)
		answered bool
		status   int
		message  string
		invalid  bool // refused as invalid, not decided by the policy
	}{
		{"truncated", answer(200, "application/json", allowedAnswer[:40], "X", "y"), true, 200, "not the API's answer", false},
		{"html from a proxy", answer(200, "text/html", "<html>ok</html>"), true, 200, `content type "text/html"`, false},
		{"bad gateway", answer(502, "text/html", "<html>bad gateway</html>"), true, 502, "<html>bad gateway", false},
		{"a token refused", answer(401, "application/json", `{"error":"missing or invalid bearer token"}`), true, 401, "missing or invalid bearer token", false},
		{"not found", answer(404, "text/plain", "404 page not found"), true, 404, "404 page not found", false},
		{"not a decision", answer(200, "application/json", `{"hello":1}`), true, 200, "not the API's answer", false},
		{"slow", slow, false, 0, "", false},
		{"an invalid request", answer(400, "application/json", `{"error":"ip: not an IP address"}`), true, 400, "ip: not an IP address", true},
		{"too large", answer(413, "application/json", `{"error":"body too large"}`), true, 413, "body too large", true},
		{"unprocessable", answer(422, "application/json", `{"error":"no"}`), true, 422, "no", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.serve)
			for _, p := range []struct {
				policy FailurePolicy
				allow  bool
			}{{FailOpen, true}, {FailClosed, false}} {
				c := newClient(t, Config{URL: f.URL, OnFailure: p.policy, Timeout: 50 * time.Millisecond})
				d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a"})
				var e *Error
				if !errors.As(err, &e) || e.Answered != tc.answered || e.Status != tc.status || !strings.Contains(e.Message, tc.message) {
					t.Fatalf("error %#v, want answered %v, status %d, message with %q", err, tc.answered, tc.status, tc.message)
				}
				if tc.name == "slow" && !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("slow: %v, want a deadline", err)
				}
				if errors.Is(err, ErrInvalid) != tc.invalid || errors.Is(err, ErrUnauthorized) != (tc.status == 401) {
					t.Fatalf("error %v: Is(ErrInvalid) %v, Is(ErrUnauthorized) %v", err, errors.Is(err, ErrInvalid), errors.Is(err, ErrUnauthorized))
				}
				want, stats := p.policy.decide(context.Background(), nil), Stats{Checks: 1, Fallbacks: 1}
				if tc.invalid {
					want, stats = Decision{Reason: ReasonInvalid}, Stats{Checks: 1, Invalid: 1}
				}
				if tc.status == 401 {
					stats.Unauthorized = 1
				}
				if d != want {
					t.Fatalf("decision %+v, want %+v", d, want)
				}
				if s := c.Stats(); s != stats {
					t.Fatalf("stats %+v, want %+v", s, stats)
				}
			}
		})
	}
}

// After BreakerFailures failures in a row the breaker opens: calls fail
// at once without reaching the limiter, and the policy decides; after
// BreakerOpen a probe goes through, and a good answer closes it.
func TestBreaker(t *testing.T) {
	var mu sync.Mutex
	up := false
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		mu.Lock()
		defer mu.Unlock()
		if up {
			answer(200, "application/json", allowedAnswer)(w, r, body)
			return
		}
		answer(503, "application/json", `{"error":"down"}`)(w, r, body)
	})
	c := newClient(t, Config{URL: f.URL, BreakerFailures: 3, BreakerOpen: 50 * time.Millisecond,
		OnFailure: Fallback(func(context.Context, *Request) Decision { return Decision{Allowed: true, Reason: "local"} })})
	ctx := context.Background()
	for range 3 {
		if d, err := c.Check(ctx, &Request{IP: "203.0.113.7", Endpoint: "/a"}); err == nil || d.Reason != "local" || !d.Fallback {
			t.Fatalf("limiter down: %+v, %v", d, err)
		}
	}
	for range 5 {
		if _, err := c.Check(ctx, &Request{IP: "203.0.113.7", Endpoint: "/a"}); !errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("breaker not open: %v", err)
		}
	}
	if n := len(f.sent("/v1/check")); n != 3 {
		t.Fatalf("%d calls reached the limiter, want 3", n)
	}
	if s := c.Stats(); s.BreakerOpen != 5 || s.Fallbacks != 8 {
		t.Fatalf("stats %+v", s)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, err := c.Check(ctx, &Request{IP: "203.0.113.7", Endpoint: "/a"})
		if err == nil && d.Allowed && !d.Fallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the breaker never closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ReportAsync sends in batches and Close flushes what is queued.
func TestReportAsync(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		n := strings.Count(body, `"status":`)
		answer(200, "application/json", `{"reports":[`+strings.TrimSuffix(strings.Repeat(`{"event_id":"x","mode":"redis","rules":[]},`, n), ",")+`]}`)(w, r, body)
	})
	c, err := New(Config{URL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	const n = 250
	for i := range n {
		o := Outcome{IP: "203.0.113.7", Endpoint: "/login", Status: 401, Cost: int64(i % 3)}
		if i == 0 {
			o.Cost = CostNone
		}
		if !c.ReportAsync(&o) {
			t.Fatal("dropped")
		}
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.ReportsSent != n || s.ReportsDropped != 0 || s.ReportsFailed != 0 {
		t.Fatalf("stats %+v", s)
	}
	sent := strings.Join(f.sent("/v1/report/batch"), "\n") // batches go out together, in any order
	if total := strings.Count(sent, `"status":401`); total != n || !strings.Contains(sent, `"cost":0`) {
		t.Fatalf("%d outcomes reported, want %d, one with cost 0 (batches %s)", total, n, sent)
	}
	if c.ReportAsync(&Outcome{IP: "203.0.113.7", Endpoint: "/", Status: 200}) {
		t.Fatal("queued after Close")
	}
	if _, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("check after Close: %v", err)
	}
}

func TestNewRefusesBadURLs(t *testing.T) {
	for _, u := range []string{"", "limiter:8080", "ftp://x", "http://", "http://x/v1/check", "http://x?a=1"} {
		if _, err := New(Config{URL: u}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}
