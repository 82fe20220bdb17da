package e2e

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
)

// statusCounter is a client Transport that counts the answers of each
// path by status.
type statusCounter struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	status map[string]map[int]int
}

func newStatusCounter() *statusCounter {
	return &statusCounter{rt: &http.Transport{MaxIdleConnsPerHost: 64}, status: map[string]map[int]int{}}
}

func (s *statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if err == nil {
		s.mu.Lock()
		if s.status[r.URL.Path] == nil {
			s.status[r.URL.Path] = map[int]int{}
		}
		s.status[r.URL.Path][resp.StatusCode]++
		s.mu.Unlock()
	}
	return resp, err
}

func (s *statusCounter) count(path string, status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status[path][status]
}

// 50 requests at once, three times over, through client.Middleware with
// batching (the default) against a concurrency rule of 2 slots: each time
// exactly 2 are in their handlers and 48 refused, their checks in batches;
// the 2 holds are released once each (none lost), and the slots are free
// again after each round.
func TestClientBatchedHoldsExact(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, holdRulesYAML)
	limiter := e.start("limiter")
	counter := newStatusCounter()
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, Transport: counter, Timeout: 5 * time.Second, OnFailure: client.FailClosed})
	app := newHoldApp(t, c, client.MiddlewareConfig{ReportIf: client.NeverReport})
	for round := range 3 {
		admitted, refused := burst(t, app.slots, c, 50, app.blocking("198.51.100.230", http.StatusOK))
		if admitted != holdSlots || refused != 50-holdSlots {
			t.Fatalf("round %d: %d admitted, %d refused; want %d and %d", round, admitted, refused, holdSlots, 50-holdSlots)
		}
		wantFree(t, app.slots, c, app.blocking("198.51.100.230", http.StatusOK))
	}
	if counter.count("/v1/check/batch", http.StatusOK) == 0 {
		t.Fatalf("no batch sent: %v", counter.status)
	}
	if s := c.Stats(); s.Fallbacks != 0 || s.Invalid != 0 || s.HoldsLost != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// An attacker's requests through client.Middleware (the path as sent, a
// user id and attributes from its own headers, a cost from a header) with
// every field the limiter bounds or refuses: long paths (8000 escaped
// '<', 48 KB of JSON each), control characters and invalid UTF-8,
// attribute names that escape alike, user ids over the bound, costs out of
// bounds. Beside them, at once, an innocent address's requests against a
// limit of 20 a minute. No batch is refused (400 or 413), so no innocent
// is refused as invalid nor left to the failure policy: exactly 20 of
// them are admitted; and no attacker's request is decided by the failure
// policy (FailOpen would admit it).
func TestClientBatchHostileFieldsStayTheirs(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, `
rules:
  - id: per-ip
    match: {endpoints: ["/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 20, per: 1m}]
  - id: per-attr
    match: {endpoints: ["/**"]}
    key: [attr:k]
    algorithm: sliding_window
    limits: [{requests: 100000, per: 1m}]
`)
	limiter := e.start("limiter")
	counter := newStatusCounter()
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, Transport: counter, Timeout: 10 * time.Second, OnFailure: client.FailOpen})
	h := client.Middleware(c, client.MiddlewareConfig{
		TrustedProxies: loopback,
		User:           func(r *http.Request) string { return r.Header.Get("X-User") },
		Attributes: func(r *http.Request) map[string]string {
			attrs := map[string]string{}
			for name, v := range r.Header {
				if n, ok := strings.CutPrefix(name, "X-Attr-"); ok {
					attrs[n] = v[0]
				}
			}
			if v := r.Header.Get("X-Raw-Attr"); v != "" { // names that escape alike
				attrs["a\x00"], attrs["a%00"], attrs["k"] = v, v, v
			}
			return attrs
		},
		Cost: func(r *http.Request) int64 {
			n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
			return n
		},
		ReportIf: client.NeverReport,
	})(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv := httptest.NewServer(h)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	type attack struct {
		path    string
		headers map[string]string
	}
	attacks := []attack{
		{"/" + strings.Repeat("%3C", 2700), nil},
		{"/" + strings.Repeat("%22%5C", 1300), nil},
		{"/a%00b%01%7F", map[string]string{"X-User": "\xff\xfe" + strings.Repeat("\xc3", 600)}},
		{"/x", map[string]string{"X-User": strings.Repeat("é", 2000), "X-Attr-Long": strings.Repeat("<", 1000)}},
		{"/x", map[string]string{"X-Raw-Attr": strings.Repeat("<", 900)}},
		{"/x", map[string]string{"X-Cost": "-5"}},
		{"/x", map[string]string{"X-Cost": "99999999999"}},
		{"/x%3Fq%23f/../..//%2e%2e/", map[string]string{"X-User": "\u2028\u2029"}},
	}
	get := func(ip, path string, headers map[string]string) int {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Error(err)
			return 0
		}
		req.Header.Set("X-Forwarded-For", ip)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	const innocents, limit = 64, 20
	var mu sync.Mutex
	statuses := map[int]int{}
	var wg sync.WaitGroup
	for i := range innocents {
		wg.Go(func() {
			a := attacks[i%len(attacks)]
			_ = get("198.51.100."+strconv.Itoa(i%200+1), a.path, a.headers) // the attackers, each on its own address
		})
		wg.Go(func() {
			s := get("203.0.113.240", "/books/"+strconv.Itoa(i), nil)
			mu.Lock()
			statuses[s]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if statuses[http.StatusOK] != limit || statuses[http.StatusTooManyRequests] != innocents-limit {
		t.Errorf("the innocent address: %v, want %d admitted and %d refused 429", statuses, limit, innocents-limit)
	}
	for _, status := range []int{http.StatusBadRequest, http.StatusRequestEntityTooLarge} {
		if n := counter.count("/v1/check/batch", status); n != 0 {
			t.Errorf("%d batches answered %d: %v", n, status, counter.status)
		}
	}
	if counter.count("/v1/check/batch", http.StatusOK) == 0 {
		t.Errorf("no batch sent: %v", counter.status)
	}
	if s := c.Stats(); s.Fallbacks != 0 || s.CallerGone != 0 {
		t.Errorf("stats %+v: checks left to the failure policy", s)
	}
	t.Logf("calls: %v; stats %+v", counter.status, c.Stats())
}
