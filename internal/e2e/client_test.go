package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/client"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
	"github.com/ratewarden/ratewarden/internal/testkit/proctest"
)

// clientRulesYAML limits /api/** to clientLimit requests a minute per
// address, in a sliding window so that no window edge frees a request
// during a test.
const (
	clientLimit     = 5
	clientRulesYAML = `
rules:
  - id: per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 5, per: 1m}]
`
)

// newClient returns a client of cfg, closed at the end of the test.
func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// fullDecision is the whole answer of POST /v1/check, as the API documents it.
type fullDecision struct {
	Allowed      bool   `json:"allowed"`
	Reason       string `json:"reason"`
	RuleID       string `json:"rule_id"`
	Algorithm    string `json:"algorithm"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	Mode         string `json:"mode"`
	Shadow       bool   `json:"shadow"`
	EventID      string `json:"event_id"`
}

// rawCheck asks the limiter at addr for a decision with net/http and
// encoding/json, not the client.
func rawCheck(t *testing.T, addr, ip, endpoint string) fullDecision {
	t.Helper()
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json",
		strings.NewReader(`{"ip":"`+ip+`","endpoint":"`+endpoint+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d fullDecision
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/check: %d, %v", resp.StatusCode, err)
	}
	return d
}

// decisionFields are the exported fields of a client.Decision, which
// also holds the limiter's headers for the middleware.
type decisionFields struct {
	Allowed                   bool
	Reason, RuleID, Algorithm string
	Limit, Remaining          int64
	Reset, RetryAfter         time.Duration
	Mode                      string
	Shadow                    bool
	EventID                   string
	Fallback                  bool
}

func fields(d client.Decision) decisionFields {
	return decisionFields{d.Allowed, d.Reason, d.RuleID, d.Algorithm, d.Limit, d.Remaining, d.Reset, d.RetryAfter, d.Mode, d.Shadow, d.EventID, d.Fallback}
}

// clientError returns err as an *Error, failing the test if it is none.
func clientError(t *testing.T, err error) *client.Error {
	t.Helper()
	var e *client.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want a *client.Error", err, err)
	}
	return e
}

// A budget of 5 a minute through the client: 5 allowed, counting down, the
// 6th refused; every decision is the one /v1/check gives for the same
// history (a twin address asked with net/http alongside).
func TestClientAllowedThenDenied(t *testing.T) {
	t.Parallel() // mostly waits on the limiter's start
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, OnFailure: client.FailClosed})
	ctx := context.Background()
	for i := range clientLimit + 1 {
		d, err := c.Check(ctx, &client.Request{IP: "198.51.100.1", Endpoint: "/api/books/1"})
		if err != nil {
			t.Fatalf("check %d: %v", i+1, err)
		}
		raw := rawCheck(t, limiter.addr, "198.51.100.2", "/api/books/1")
		denied := i == clientLimit
		want := client.Decision{Allowed: !denied, Reason: client.ReasonOK, RuleID: "per-ip", Algorithm: "sliding_window",
			Limit: clientLimit, Remaining: int64(clientLimit - 1 - i), Mode: "redis"}
		if denied {
			want.Reason, want.Remaining = client.ReasonRateLimited, 0
		}
		got := fields(d)
		got.Reset, got.RetryAfter, got.EventID = 0, 0, ""
		if got != fields(want) {
			t.Fatalf("check %d: %+v, want %+v", i+1, d, want)
		}
		if raw.Allowed != d.Allowed || raw.Reason != d.Reason || raw.RuleID != d.RuleID || raw.Algorithm != d.Algorithm ||
			raw.Limit != d.Limit || raw.Remaining != d.Remaining || raw.Mode != d.Mode || raw.Shadow != d.Shadow {
			t.Fatalf("check %d: the client's %+v, /v1/check's %+v", i+1, d, raw)
		}
		if d.EventID == "" || d.EventID == raw.EventID {
			t.Fatalf("check %d: event ids %q and %q", i+1, d.EventID, raw.EventID)
		}
		if d.Reset <= 0 || d.Reset > time.Minute+time.Second || (raw.ResetAfterMS > 0) != (d.Reset > 0) {
			t.Fatalf("check %d: reset %v (/v1/check's %d ms), want within the minute", i+1, d.Reset, raw.ResetAfterMS)
		}
		if denied != (d.RetryAfter > 0) || denied != (raw.RetryAfterMS > 0) || d.RetryAfter > time.Minute {
			t.Fatalf("check %d: retry after %v (/v1/check's %d ms)", i+1, d.RetryAfter, raw.RetryAfterMS)
		}
	}
	if s := c.Stats(); s.Checks != clientLimit+1 || s.Fallbacks != 0 || s.BreakerOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A manual ban through the admin API: the client's next check is refused
// as banned.
func TestClientBanned(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + limiter.addr})
	const ip = "198.51.100.66"
	req := &client.Request{IP: ip, Endpoint: "/api/books/1"}
	if d, err := c.Check(context.Background(), req); err != nil || !d.Allowed || d.Reason != client.ReasonOK {
		t.Fatalf("before the ban: %+v, %v", d, err)
	}
	if code, body := admin(t, limiter, "POST", "/v1/admin/bans", adminToken,
		`{"scope":"ip","subject":"`+ip+`","duration":"1h","reason":"client test"}`); code != http.StatusCreated {
		t.Fatalf("ban: %d %s", code, body)
	}
	d, err := c.Check(context.Background(), req)
	if err != nil || d.Allowed || d.Reason != client.ReasonBanned || d.Fallback || d.EventID == "" {
		t.Fatalf("after the ban: %+v, %v", d, err)
	}
	if d.RetryAfter <= 50*time.Minute || d.RetryAfter > time.Hour {
		t.Fatalf("after a ban of 1h: retry after %v", d.RetryAfter)
	}
	if d, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.67", Endpoint: "/api/books/1"}); err != nil || d.Reason != client.ReasonOK {
		t.Fatalf("another address: %+v, %v", d, err)
	}
}

// A limiter with API_TOKENS: a client without the token, or with another,
// fails Ping with ErrUnauthorized; its checks are refused 401, decided by
// its failure policy, counted apart and handed to OnError, and, as its
// reports, count against its breaker (it gets no decision from this
// limiter). With the token, Ping passes and the checks are decided.
func TestClientAPITokens(t *testing.T) {
	t.Parallel()
	const token, other = "client-e2e-api-token-0123", "client-e2e-other-token-456"
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter", "API_TOKENS", token+","+other)
	req := &client.Request{IP: "198.51.100.3", Endpoint: "/api/books/1"}
	failOpen := client.Decision{Allowed: true, Reason: client.ReasonUnavailable, Fallback: true}
	for _, tok := range []string{"", "not-one-of-the-tokens-xyz"} {
		var mu sync.Mutex
		var seen []string
		c := newClient(t, client.Config{URL: "http://" + limiter.addr, Token: tok, BreakerFailures: 3, BreakerOpen: time.Hour,
			OnError: func(op string, err error) {
				mu.Lock()
				defer mu.Unlock()
				seen = append(seen, op+": "+err.Error())
			}})
		err := c.Ping(context.Background())
		if e := clientError(t, err); !errors.Is(err, client.ErrUnauthorized) || e.Op != "ping" || e.Status != http.StatusUnauthorized {
			t.Fatalf("token %q: Ping: %v, want ErrUnauthorized", tok, err)
		}
		for i := range 2 {
			d, err := c.Check(context.Background(), req)
			if e := clientError(t, err); !e.Answered || e.Status != http.StatusUnauthorized || e.Op != "check" ||
				e.Message != "missing or invalid bearer token" || e.Err != nil || !errors.Is(err, client.ErrUnauthorized) {
				t.Fatalf("token %q, check %d: %+v", tok, i+1, e)
			}
			if d != failOpen {
				t.Fatalf("token %q, check %d: %+v, want FailOpen's", tok, i+1, d)
			}
		}
		if _, err := c.Report(context.Background(), &client.Outcome{IP: req.IP, Endpoint: req.Endpoint, Status: 200}); !errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("token %q: report: %v", tok, err)
		}
		for i := range 2 { // the third refusal, a report's, opened the breaker
			if d, err := c.Check(context.Background(), req); !errors.Is(err, client.ErrBreakerOpen) || d != failOpen {
				t.Fatalf("token %q, check %d with the breaker open: %+v, %v", tok, i+3, d, err)
			}
		}
		want := client.Stats{Checks: 4, Fallbacks: 4, BreakerOpen: 2, Unauthorized: 4}
		if s := c.Stats(); s != want {
			t.Fatalf("token %q: stats %+v, want %+v", tok, s, want)
		}
		mu.Lock()
		if len(seen) != 5 || !strings.HasPrefix(seen[0], "check: ratewarden check: the limiter answered 401") ||
			!strings.HasPrefix(seen[2], "report: ratewarden report: the limiter answered 401") || !strings.Contains(seen[4], "circuit breaker open") {
			t.Fatalf("token %q: OnError saw %q", tok, seen)
		}
		mu.Unlock()
	}
	// The refused calls counted nothing: the budget is whole.
	for i, tok := range []string{token, other} {
		c := newClient(t, client.Config{URL: "http://" + limiter.addr, Token: tok})
		if err := c.Ping(context.Background()); err != nil {
			t.Fatalf("token %q: Ping: %v", tok, err)
		}
		d, err := c.Check(context.Background(), req)
		if err != nil || !d.Allowed || d.Reason != client.ReasonOK || d.RuleID != "per-ip" || d.Remaining != int64(clientLimit-1-i) || d.Fallback {
			t.Fatalf("token %q: %+v, %v", tok, d, err)
		}
	}
}

// Nothing listens at the limiter's address: each failure policy decides,
// and the error says that nothing answered.
func TestClientLimiterDown(t *testing.T) {
	t.Parallel()
	url := "http://" + proctest.FreeAddr(t) // closed: nothing listens there
	local := client.Decision{Allowed: true, Reason: "local", RuleID: "in-process", Limit: 7, Remaining: 6}
	for _, tc := range []struct {
		name   string
		policy client.FailurePolicy
		want   client.Decision
	}{
		{"FailOpen", client.FailOpen, client.Decision{Allowed: true, Reason: client.ReasonUnavailable, Fallback: true}},
		{"FailClosed", client.FailClosed, client.Decision{Allowed: false, Reason: client.ReasonUnavailable, RetryAfter: time.Second, Fallback: true}},
		{"Fallback", client.Fallback(func(_ context.Context, req *client.Request) client.Decision {
			if req.IP != "198.51.100.4" || req.Endpoint != "/api/books/1" {
				return client.Decision{Reason: "wrong request " + req.IP + " " + req.Endpoint}
			}
			return local
		}), func() client.Decision { d := local; d.Fallback = true; return d }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, client.Config{URL: url, OnFailure: tc.policy})
			d, err := c.Check(context.Background(), &client.Request{IP: "198.51.100.4", Endpoint: "/api/books/1"})
			if e := clientError(t, err); e.Answered || e.Status != 0 || e.Op != "check" || !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("error %+v (%v), want no answer, connection refused", e, err)
			}
			if d != tc.want {
				t.Fatalf("decision %+v, want %+v", d, tc.want)
			}
			if s := c.Stats(); s.Checks != 1 || s.Fallbacks != 1 {
				t.Fatalf("stats %+v", s)
			}
		})
	}
}

// The limiter cut off behind a proxy: BreakerFailures failed calls open
// the breaker, whose calls then fail with ErrBreakerOpen without a round
// trip, even once the limiter is reachable again; after BreakerOpen a
// probe finds it and decisions come back.
func TestClientBreaker(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter")
	px := startProxy(t, limiter.addr)
	const failures = 3
	url := "http://" + px.addr
	recovering := newClient(t, client.Config{URL: url, BreakerFailures: failures, BreakerOpen: 200 * time.Millisecond})
	held := newClient(t, client.Config{URL: url, BreakerFailures: failures, BreakerOpen: time.Hour})
	clients := map[string]*client.Client{"recovering": recovering, "held": held}
	req := &client.Request{IP: "198.51.100.5", Endpoint: "/api/books/1"}
	ctx := context.Background()
	for name, c := range clients {
		if d, err := c.Check(ctx, req); err != nil || d.Reason != client.ReasonOK {
			t.Fatalf("%s: before the cut: %+v, %v", name, d, err)
		}
	}

	px.cut()
	for name, c := range clients {
		for i := range failures {
			d, err := c.Check(ctx, req)
			if e := clientError(t, err); e.Answered || errors.Is(err, client.ErrBreakerOpen) || e.Err == nil {
				t.Fatalf("%s: failure %d: %+v, want no answer from the limiter", name, i+1, e)
			}
			if !d.Allowed || !d.Fallback {
				t.Fatalf("%s: failure %d: %+v, want FailOpen's", name, i+1, d)
			}
		}
		for i := range 2 {
			d, err := c.Check(ctx, req)
			if e := clientError(t, err); e.Answered || !errors.Is(err, client.ErrBreakerOpen) {
				t.Fatalf("%s: after %d failures: %+v, want ErrBreakerOpen", name, failures, e)
			}
			if !d.Allowed || !d.Fallback {
				t.Fatalf("%s: breaker open: %+v, want FailOpen's", name, d)
			}
			if s := c.Stats(); s.BreakerOpen != uint64(i+1) {
				t.Fatalf("%s: stats %+v, want %d calls refused by the breaker", name, s, i+1)
			}
		}
	}

	px.restore(t)
	for i := range 3 {
		if _, err := held.Check(ctx, req); !errors.Is(err, client.ErrBreakerOpen) {
			t.Fatalf("held, call %d with the limiter back: %v, want ErrBreakerOpen for the hour", i+1, err)
		}
	}
	var d client.Decision
	testkit.WaitFor(t, 10*time.Second, "the breaker to close", func() bool {
		var err error
		d, err = recovering.Check(ctx, req)
		if err != nil && !errors.Is(err, client.ErrBreakerOpen) {
			t.Fatalf("probe with the limiter back: %v", err)
		}
		return err == nil
	})
	if !d.Allowed || d.Reason != client.ReasonOK || d.Fallback || d.RuleID != "per-ip" {
		t.Fatalf("first decision after the breaker closed: %+v", d)
	}
	// Two checks before the cut, one now: the limiter counted only those it decided.
	if d.Remaining != clientLimit-3 {
		t.Fatalf("remaining %d after 3 decided checks, want %d", d.Remaining, clientLimit-3)
	}
	if d, err := recovering.Check(ctx, req); err != nil || d.Remaining != clientLimit-4 {
		t.Fatalf("closed breaker: %+v, %v", d, err)
	}
}

// holdingProxy forwards TCP to a target but holds every answer until
// released: a limiter as slow as the test wants, with no timing.
type holdingProxy struct {
	addr    string
	release chan struct{}
	once    sync.Once
	mu      sync.Mutex
	conns   []net.Conn
}

func startHoldingProxy(t *testing.T, target string) *holdingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdingProxy{addr: ln.Addr().String(), release: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { <-p.release; _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		p.open()
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

// open releases the answers held and lets the next ones through.
func (p *holdingProxy) open() { p.once.Do(func() { close(p.release) }) }

// Config.Timeout shorter than the limiter's answer: the call returns while
// the answer is held, with an *Error wrapping context.DeadlineExceeded,
// and the failure policy decides; unless the caller's own deadline has
// passed by then (it does not cut the call short): the check is refused,
// FailOpen notwithstanding. The answer that comes later is never taken for
// the next call's.
func TestClientDeadlineBeforeTheAnswer(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, clientRulesYAML)
	limiter := e.start("limiter")
	for _, tc := range []struct {
		name        string
		ctxDeadline time.Duration // 0: none
		policy      client.FailurePolicy
		want        client.Decision
	}{
		{"Config.Timeout", 0, client.FailClosed, client.Decision{Reason: client.ReasonUnavailable, RetryAfter: time.Second, Fallback: true}},
		{"context deadline", 20 * time.Millisecond, client.FailOpen, client.Decision{Reason: client.ReasonCallerGone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			px := startHoldingProxy(t, limiter.addr)
			c := newClient(t, client.Config{URL: "http://" + px.addr, Timeout: 100 * time.Millisecond, OnFailure: tc.policy})
			ctx := context.Background()
			if tc.ctxDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxDeadline)
				defer cancel()
			}
			type result struct {
				d   client.Decision
				err error
			}
			done := make(chan result, 1)
			go func() {
				d, err := c.Check(ctx, &client.Request{IP: "198.51.100.6", Endpoint: "/api/books/1"})
				done <- result{d, err}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(10 * time.Second):
				px.open()
				t.Fatal("the check did not return while the limiter's answer was held")
			}
			if e := clientError(t, r.err); e.Answered || !errors.Is(r.err, context.DeadlineExceeded) ||
				errors.Is(r.err, client.ErrCallerGone) != (tc.ctxDeadline > 0) {
				t.Fatalf("error %+v (%v), want no answer, context.DeadlineExceeded, the caller gone %v", e, r.err, tc.ctxDeadline > 0)
			}
			if r.d != tc.want {
				t.Fatalf("decision %+v, want %+v", r.d, tc.want)
			}

			px.open()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d, err := c.Check(ctx, &client.Request{IP: "198.51.100.6", Endpoint: "/elsewhere"})
			if err != nil || d.Reason != client.ReasonNoRule || !d.Allowed {
				t.Fatalf("the next check, answers released: %+v, %v, want no_rule", d, err)
			}
		})
	}
}

// reportRulesYAML has a budget of 3 failed logins (401) per address and
// user, spent by reports.
const reportRulesYAML = `
rules:
  - id: login-failures
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip, user_id]
    algorithm: sliding_window
    limits: [{requests: 3, per: 15m}]
    spent_by: report
    statuses: [401]
`

// outcomes reads the n outcome events of e's outcomes topic, failing if
// there are more.
func outcomes(t *testing.T, e *env, n int) []event.Outcome {
	t.Helper()
	var out []event.Outcome
	for _, m := range kafkatest.ReadMessages(t, e.broker.Brokers(), outcomesTopic, n, 15*time.Second) {
		o, err := event.DecodeOutcome(m.Value)
		if err != nil {
			t.Fatalf("outcome message %s: %v", m.Value, err)
		}
		out = append(out, o)
	}
	if got := kafkatest.CountMessages(t, e.broker.Brokers(), outcomesTopic); got != int64(n) {
		t.Fatalf("%d outcome events, want exactly %d", got, n)
	}
	return out
}

// Reports spend a rule spent by reports, down to refusing its checks; and
// the outcomes of ReportAsync are all sent by Close, each one event on the
// outcomes topic with its status, but for those the limiter would refuse,
// which ReportAsync refuses.
func TestClientReports(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, reportRulesYAML)
	limiter := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + limiter.addr})
	ctx := context.Background()
	const ip, async = "198.51.100.7", "198.51.100.8"
	failure := &client.Outcome{IP: ip, UserID: "alice", Endpoint: "/api/login", Method: "POST", Status: 401}
	for i := range 4 {
		r, err := c.Report(ctx, failure)
		if err != nil || r.EventID == "" || r.Mode != "redis" || len(r.Rules) != 1 {
			t.Fatalf("report %d: %+v, %v", i+1, r, err)
		}
		b := r.Rules[0]
		left := max(int64(2-i), 0)
		if b.RuleID != "login-failures" || b.Limit != 3 || b.Remaining != left || b.Spent != (left == 0) || b.Reset <= 0 || b.Reset > 16*time.Minute {
			t.Fatalf("report %d: budget %+v, want %d left", i+1, b, left)
		}
	}
	if r, err := c.Report(ctx, &client.Outcome{IP: ip, UserID: "alice", Endpoint: "/api/login", Method: "POST", Status: 200}); err != nil || len(r.Rules) != 0 {
		t.Fatalf("a 200 spent %+v (%v): the rule lists only 401", r, err)
	}
	login := &client.Request{IP: ip, UserID: "alice", Endpoint: "/api/login", Method: "POST"}
	if d, err := c.Check(ctx, login); err != nil || d.Allowed || d.Reason != client.ReasonRateLimited || d.RuleID != "login-failures" || d.RetryAfter <= 0 {
		t.Fatalf("check with the budget spent: %+v, %v", d, err)
	}
	login.UserID = "bob"
	if d, err := c.Check(ctx, login); err != nil || !d.Allowed || d.Remaining != 3 {
		t.Fatalf("check of another user: %+v, %v", d, err)
	}

	statuses := []int{200, 401, 404, 500, 302, 429}
	const k = 40
	sent := map[int]int{}
	for i := range k {
		o := &client.Outcome{IP: async, Endpoint: "/api/login", Method: "POST", UserID: "carol", Status: statuses[i%len(statuses)]}
		if !c.ReportAsync(o) {
			t.Fatalf("outcome %d dropped", i+1)
		}
		sent[o.Status]++
		if i%10 == 5 {
			// Outcomes the limiter would refuse (400) among them, refused
			// before they are queued: they never take a batch down.
			for _, bad := range []client.Outcome{{IP: "not-an-ip", Endpoint: "/api/login", Status: 401},
				{IP: async, Endpoint: "/api/login", Status: 600}, {IP: async, Endpoint: "/api/login", Status: 200, Cost: 2_000_000}} {
				if c.ReportAsync(&bad) {
					t.Fatalf("the invalid outcome %+v queued", bad)
				}
			}
		}
	}
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Close(closeCtx); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.ReportsSent != k || s.ReportsDropped != 0 || s.ReportsFailed != 0 || s.ReportsInvalid != 3*k/10 {
		t.Fatalf("stats after Close: %+v, want %d sent and %d refused before they were queued", s, k, 3*k/10)
	}
	if c.ReportAsync(&client.Outcome{IP: async, Endpoint: "/api/login", Status: 200}) || c.Stats().ReportsDropped != 1 {
		t.Fatalf("ReportAsync after Close queued; stats %+v", c.Stats())
	}
	if _, err := c.Check(ctx, login); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("check after Close: %v, want ErrClosed", err)
	}

	got := map[int]int{}
	var ids []string
	for _, o := range outcomes(t, e, 5+k) {
		switch o.IP {
		case ip:
			ids = append(ids, o.EventID)
		case async:
			if o.UserID != "carol" || o.Endpoint != "/api/login" || o.Method != "POST" || o.Cost != 1 || o.Banned {
				t.Fatalf("outcome %+v", o)
			}
			got[o.Status]++
		default:
			t.Fatalf("outcome of nobody's: %+v", o)
		}
	}
	if !maps.Equal(got, sent) || len(ids) != 5 {
		t.Fatalf("statuses on the topic %v, sent %v; %d synchronous reports, want 5", got, sent, len(ids))
	}
}

// bookRulesYAML gives each address 3 requests a minute per endpoint on the
// books: the middleware's endpoint is the route's pattern, so every book
// shares them.
const bookRulesYAML = `
rules:
  - id: books
    match: {endpoints: ["/api/books/**"]}
    key: [ip, endpoint]
    algorithm: sliding_window
    limits: [{requests: 3, per: 1m}]
`

// The middleware in front of a ServeMux, against the real limiter.
func TestClientMiddleware(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bookRulesYAML)
	limiter := e.start("limiter")
	c := newClient(t, client.Config{URL: "http://" + limiter.addr, OnFailure: client.FailClosed})
	var calls atomic.Int64
	books := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.PathValue("id") == "missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "book "+r.PathValue("id"))
	})
	mux := http.NewServeMux()
	mux.Handle("GET /api/books/{id}", books)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	behindProxy := httptest.NewServer(client.Middleware(c, client.MiddlewareConfig{Mux: mux, TrustedProxies: trusted})(mux))
	defer behindProxy.Close()
	direct := httptest.NewServer(client.Middleware(c, client.MiddlewareConfig{Mux: mux})(mux))
	defer direct.Close()
	// The middleware inside the mux, on one route: r.Pattern names it.
	inner := http.NewServeMux()
	inner.Handle("GET /api/books/{id}", client.Middleware(c, client.MiddlewareConfig{TrustedProxies: trusted})(books))
	routed := httptest.NewServer(inner)
	defer routed.Close()

	get := func(srv *httptest.Server, path, forwardedFor string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("X-Forwarded-For", forwardedFor)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	const alice, banned, carol = "203.0.113.10", "203.0.113.11", "203.0.113.12"
	t.Run("one budget for every book", func(t *testing.T) {
		for i, path := range []string{"/api/books/1", "/api/books/2", "/api/books/missing"} {
			resp, body := get(behindProxy, path, "192.0.2.99, "+alice)
			want := http.StatusOK
			if i == 2 {
				want = http.StatusNotFound
			}
			h := resp.Header
			if resp.StatusCode != want || calls.Load() != int64(i+1) {
				t.Fatalf("%s: %d %q, want %d from the handler", path, resp.StatusCode, body, want)
			}
			left := strconv.Itoa(2 - i)
			if h.Get("RateLimit-Policy") != `"books/1m";q=3;w=60` || !strings.HasPrefix(h.Get("RateLimit"), `"books/1m";r=`+left+";t=") ||
				h.Get("X-RateLimit-Limit") != "3" || h.Get("X-RateLimit-Remaining") != left || h.Get("X-RateLimit-Reset") == "" || h.Get("Retry-After") != "" {
				t.Fatalf("%s: headers %v, want the limiter's with %s left", path, h, left)
			}
		}
		resp, body := get(behindProxy, "/api/books/3", alice)
		if resp.StatusCode != http.StatusTooManyRequests || calls.Load() != 3 || body != `{"error":"too many requests"}` {
			t.Fatalf("4th book: %d %q, handler called %d times", resp.StatusCode, body, calls.Load())
		}
		if h := resp.Header; h.Get("Retry-After") == "" || h.Get("Retry-After") == "0" || h.Get("X-RateLimit-Remaining") != "0" ||
			h.Get("Content-Type") != "application/json" {
			t.Fatalf("4th book: headers %v", h)
		}
		resp, _ = get(behindProxy, "/health", alice)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" || resp.Header.Get("X-RateLimit-Limit") != "" {
			t.Fatalf("/health, no rule: %d, headers %v", resp.StatusCode, resp.Header)
		}
	})
	t.Run("banned", func(t *testing.T) {
		if code, body := admin(t, limiter, "POST", "/v1/admin/bans", adminToken,
			`{"scope":"ip","subject":"`+banned+`","duration":"1h","reason":"middleware test"}`); code != http.StatusCreated {
			t.Fatalf("ban: %d %s", code, body)
		}
		before := calls.Load()
		resp, body := get(behindProxy, "/api/books/1", banned)
		if resp.StatusCode != http.StatusForbidden || body != `{"error":"forbidden"}` || resp.Header.Get("Retry-After") == "" || calls.Load() != before {
			t.Fatalf("banned: %d %q, headers %v, handler called %d times", resp.StatusCode, body, resp.Header, calls.Load()-before)
		}
	})
	t.Run("X-Forwarded-For from an untrusted peer", func(t *testing.T) {
		before := calls.Load()
		for i := range 4 {
			resp, _ := get(direct, "/api/books/"+strconv.Itoa(i), "203.0.113."+strconv.Itoa(100+i))
			want := http.StatusOK
			if i == 3 {
				want = http.StatusTooManyRequests
			}
			if resp.StatusCode != want {
				t.Fatalf("request %d from 127.0.0.1 naming another client each time: %d, want %d", i+1, resp.StatusCode, want)
			}
		}
		if calls.Load() != before+3 {
			t.Fatalf("handler called %d times, want 3", calls.Load()-before)
		}
	})
	t.Run("middleware on a route", func(t *testing.T) {
		if resp, body := get(routed, "/api/books/9", carol); resp.StatusCode != http.StatusOK || resp.Header.Get("X-RateLimit-Remaining") != "2" {
			t.Fatalf("%d %q, headers %v", resp.StatusCode, body, resp.Header)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		ip, endpoint string
		status       int
	}
	want := []outcome{
		{alice, "/api/books/{id}", 200}, {alice, "/api/books/{id}", 200}, {alice, "/api/books/{id}", 404}, {alice, "/health", 200},
		{"127.0.0.1", "/api/books/{id}", 200}, {"127.0.0.1", "/api/books/{id}", 200}, {"127.0.0.1", "/api/books/{id}", 200},
		{carol, "/api/books/{id}", 200},
	}
	var got []outcome
	for _, o := range outcomes(t, e, len(want)) {
		if o.Method != http.MethodGet || o.Banned {
			t.Fatalf("outcome %+v", o)
		}
		got = append(got, outcome{o.IP, o.Endpoint, o.Status})
	}
	order := func(a, b outcome) int {
		return cmp.Or(strings.Compare(a.ip, b.ip), strings.Compare(a.endpoint, b.endpoint), a.status-b.status)
	}
	slices.SortFunc(got, order)
	slices.SortFunc(want, order)
	if !slices.Equal(got, want) {
		t.Fatalf("outcome events %v, want %v", got, want)
	}
}
