package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// pathCounter is a client Transport that counts the calls of each path.
type pathCounter struct {
	rt    http.RoundTripper
	mu    sync.Mutex
	calls map[string]int
}

func newPathCounter() *pathCounter {
	return &pathCounter{rt: &http.Transport{MaxIdleConnsPerHost: 64}, calls: map[string]int{}}
}

func (p *pathCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.calls[r.URL.Path]++
	p.mu.Unlock()
	return p.rt.RoundTrip(r)
}

func (p *pathCounter) count(path string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[path]
}

// 64 requests at once, 4 times over, of one address through
// client.Middleware against a limit of 20 a minute: the checks go in
// batches, and exactly 20 are admitted, each with its own remaining count
// (19 down to 0, each once) and the rate-limit headers a check of its own
// gets (the policy as /v1/check gives it, X-Ratelimit-Remaining as the
// decision's); the 236 others are refused 429 with Retry-After.
func TestClientBatchesExactlyThroughMiddleware(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `
rules:
  - id: per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 20, per: 1m}, {requests: 1000, per: 1h}]
`)
	limiter := e.start("limiter")
	counter := newPathCounter()
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, Transport: counter, OnFailure: client.FailClosed, Timeout: 5 * time.Second})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/books/{id}", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "book") })
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	srv := httptest.NewServer(client.Middleware(c, client.MiddlewareConfig{Mux: mux, TrustedProxies: trusted, ReportIf: client.NeverReport})(mux))
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	get := func(ip string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/books/1", nil)
		req.Header.Set("X-Forwarded-For", ip)
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	// The policy a check of its own gets, from a twin address.
	one := get("198.51.100.201")
	policy := one.Header.Get("Ratelimit-Policy")
	if one.StatusCode != http.StatusOK || policy == "" {
		t.Fatalf("a lone request: %d, policy %q", one.StatusCode, policy)
	}
	const workers, each, limit = 64, 4, 20
	var mu sync.Mutex
	var remaining []int
	var refused int
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				resp := get("198.51.100.200")
				if resp == nil {
					return
				}
				mu.Lock()
				switch resp.StatusCode {
				case http.StatusOK:
					n, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Remaining"))
					if err != nil || resp.Header.Get("Ratelimit-Policy") != policy || resp.Header.Get("Ratelimit") == "" {
						t.Errorf("admitted without its headers: %v", resp.Header)
					}
					remaining = append(remaining, n)
				case http.StatusTooManyRequests:
					if resp.Header.Get("Retry-After") == "" || resp.Header.Get("Ratelimit-Policy") != policy {
						t.Errorf("refused without its headers: %v", resp.Header)
					}
					refused++
				default:
					t.Errorf("status %d", resp.StatusCode)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(remaining)
	want := make([]int, limit)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(remaining, want) || refused != workers*each-limit {
		t.Fatalf("admitted with remaining %v, %d refused; want each of 0..%d once and %d refused", remaining, refused, limit-1, workers*each-limit)
	}
	if counter.count("/v1/check/batch") == 0 {
		t.Fatalf("no batch sent: %v", counter.calls)
	}
	if s := c.Stats(); s.Fallbacks != 0 || s.CallerGone != 0 || s.Invalid != 0 {
		t.Fatalf("stats %+v", s)
	}
	t.Logf("calls: %v", counter.calls)
}

// A limiter slower than Timeout (its answers held by a proxy): the checks
// gathered behind the first go in batches, time out, and each is decided
// by the failure policy, as its own call would have been; and the breaker
// counts each of them, as it would their own calls: 30 at once open a
// breaker of 10 failures, the next check fails at once with
// ErrBreakerOpen. With the limiter down (nothing listens), 30 failures at
// once leave a breaker of 40 closed, as 30 calls would; 10 more open it.
func TestClientBatchFailurePolicyAndBreaker(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter")
	burst := func(c *client.Client, n int) []error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				d, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.210", Endpoint: "/api/x"})
				if !d.Fallback {
					t.Errorf("check %d: %+v, %v: want the failure policy's", i, d, err)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		return errs
	}

	t.Run("slow", func(t *testing.T) {
		px := startHoldingProxy(t, limiter.addr)
		counter := newPathCounter()
		c := newClient(t, client.Config{URL: "http://" + px.addr, Transport: counter, Timeout: 300 * time.Millisecond,
			OnFailure: client.FailClosed, BreakerFailures: 10, BreakerOpen: time.Hour})
		for i, err := range burst(c, 30) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, client.ErrBreakerOpen) {
				t.Fatalf("check %d: %v, want a timeout (or the breaker, once open)", i, err)
			}
		}
		if counter.count("/v1/check/batch") == 0 {
			t.Fatalf("no batch sent: %v", counter.calls)
		}
		d, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.210", Endpoint: "/api/x"})
		if !errors.Is(err, client.ErrBreakerOpen) || d.Allowed || !d.Fallback {
			t.Fatalf("after 30 failed checks: %+v, %v; want FailClosed's refusal, ErrBreakerOpen", d, err)
		}
	})

	t.Run("down", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		c := newClient(t, client.Config{URL: "http://" + addr, BreakerFailures: 40, BreakerOpen: time.Hour})
		for i, err := range burst(c, 30) {
			if e := clientError(t, err); e.Answered || errors.Is(err, client.ErrBreakerOpen) {
				t.Fatalf("check %d: %v, want no answer", i, err)
			}
		}
		for i := range 10 {
			if _, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.210", Endpoint: "/api/x"}); errors.Is(err, client.ErrBreakerOpen) {
				t.Fatalf("the breaker open after %d failures, want 40", 30+i)
			}
		}
		if _, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.210", Endpoint: "/api/x"}); !errors.Is(err, client.ErrBreakerOpen) {
			t.Fatalf("the breaker closed after 40 failures: %v", err)
		}
	})
}

// 40 Report calls at once against a budget of 20 failed logins spent by
// reports: they go in batches, and each answer is its own: the budgets
// left are 19 down to 0 once each, then 0 for the 20 beyond, as 40 calls
// one after the other would have left them.
func TestClientBatchedReportsExact(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `
rules:
  - id: login-failures
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip, user_id]
    algorithm: sliding_window
    limits: [{requests: 20, per: 15m}]
    spent_by: report
    statuses: [401]
`)
	limiter := e.start("limiter")
	counter := newPathCounter()
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, Transport: counter, Timeout: 5 * time.Second})
	const n, limit = 40, 20
	left := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := c.Report(context.Background(), &client.Outcome{IP: "198.51.100.220", UserID: "dave", Endpoint: "/api/login", Method: "POST", Status: 401})
			if err != nil || len(r.Rules) != 1 || r.EventID == "" {
				t.Errorf("report %d: %+v, %v", i, r, err)
				return
			}
			left[i] = int(r.Rules[0].Remaining)
		})
	}
	wg.Wait()
	slices.Sort(left)
	want := make([]int, 0, n)
	for range n - limit {
		want = append(want, 0)
	}
	for i := range limit {
		want = append(want, i)
	}
	if !slices.Equal(left, want) {
		t.Fatalf("budgets left %v, want %v", left, want)
	}
	if counter.count("/v1/report/batch") == 0 {
		t.Fatalf("no batch sent: %v", counter.calls)
	}
	t.Logf("calls: %v", counter.calls)
}
