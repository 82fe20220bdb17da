package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// batchLimiter is a fake limiter that answers checks one by one and in
// batches as the real one does, each check by its endpoint: "/n/<k>"
// allowed with k remaining (and its rate-limit headers), "/deny-rule" the
// 503 of a deny rule it could not decide, "/err" an entry of another
// error. The first call whose endpoint is "/held" waits for release.
type batchLimiter struct {
	*recordingLimiter
	release   chan struct{}
	batches   atomic.Int64 // batch calls answered
	batchSize chan int     // each batch's size, when not nil
	// refuse, when set, is the 400 (refuseStatus when set) answered to
	// every batch (of checks or reports).
	refuse       string
	refuseStatus int
	// fail, when set, answers every call 500.
	fail atomic.Bool
	// onCall, when set (before the first call), is called first on every
	// call.
	onCall func(r *http.Request, body string)
}

func newBatchLimiter(t *testing.T) *batchLimiter {
	l := &batchLimiter{release: make(chan struct{})}
	l.recordingLimiter = newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if l.onCall != nil {
			l.onCall(r, body)
		}
		if strings.Contains(body, `"/held"`) {
			<-l.release
		}
		w.Header().Set("Content-Type", "application/json")
		if l.fail.Load() {
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"error":"down"}`))
			return
		}
		switch r.URL.Path {
		case "/v1/check":
			var c struct{ Endpoint string }
			_ = json.Unmarshal([]byte(body), &c)
			status, answer, headers := fakeDecision(c.Endpoint)
			for name, v := range headers {
				w.Header().Set(name, v)
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte("{" + answer + "}"))
		case "/v1/check/batch":
			if l.refuse != "" {
				w.WriteHeader(cmp.Or(l.refuseStatus, 400))
				_, _ = w.Write([]byte(l.refuse))
				return
			}
			var b struct {
				Headers bool
				Checks  []struct{ Endpoint string }
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || !b.Headers {
				w.WriteHeader(400)
				_, _ = fmt.Fprintf(w, `{"error":"bad batch %v"}`, err)
				return
			}
			l.batches.Add(1)
			if l.batchSize != nil {
				l.batchSize <- len(b.Checks)
			}
			entries := make([]string, len(b.Checks))
			for i, c := range b.Checks {
				status, answer, headers := fakeDecision(c.Endpoint)
				h, _ := json.Marshal(headers)
				entries[i] = `{"status":` + strconv.Itoa(status) + `,` + answer
				if status == 200 {
					entries[i] += `,"headers":` + string(h)
				}
				entries[i] += "}"
			}
			_, _ = w.Write([]byte(`{"decisions":[` + strings.Join(entries, ",") + `]}`))
		case "/v1/report":
			_, _ = w.Write([]byte(`{"mode":"redis","rules":[]}`))
		case "/v1/report/batch":
			if l.refuse != "" {
				w.WriteHeader(cmp.Or(l.refuseStatus, 400))
				_, _ = w.Write([]byte(l.refuse))
				return
			}
			var b struct{ Reports []json.RawMessage }
			_ = json.Unmarshal([]byte(body), &b)
			_, _ = w.Write([]byte(`{"reports":[` + strings.TrimSuffix(strings.Repeat(`{"mode":"redis","rules":[]},`, len(b.Reports)), ",") + `]}`))
		}
	})
	t.Cleanup(l.open)
	return l
}

var releaseOnce sync.Map

func (l *batchLimiter) open() {
	if _, loaded := releaseOnce.LoadOrStore(l, true); !loaded {
		close(l.release)
	}
}

// fakeDecision is the answer to a check of endpoint: its status, its
// fields, and the rate-limit headers a single check's answer has.
func fakeDecision(endpoint string) (int, string, map[string]string) {
	switch {
	case endpoint == "/deny-rule":
		return 503, `"error":"rule strict cannot be decided","rule_id":"strict","on_redis_failure":"deny"`, nil
	case endpoint == "/err":
		return 500, `"error":"boom"`, nil
	case strings.HasPrefix(endpoint, "/n/"):
		k := strings.TrimPrefix(endpoint, "/n/")
		return 200, `"allowed":true,"reason":"ok","rule_id":"per-ip","algorithm":"sliding_window","limit":1000,"remaining":` + k +
				`,"reset_after_ms":1000,"retry_after_ms":0,"mode":"redis","shadow":false,"event_id":"e-` + k + `"`,
			map[string]string{"Ratelimit-Policy": `"per-ip/1s";q=1000;w=1`, "Ratelimit": `"per-ip/1s";r=` + k + `;t=1`, "X-Ratelimit-Remaining": k}
	}
	return 200, `"allowed":true,"reason":"no_rule","rule_id":"","algorithm":"","limit":0,"remaining":0,"reset_after_ms":0,"retry_after_ms":0,"mode":"redis","shadow":false,"event_id":"e"`, map[string]string{}
}

// gathering is the number of checks waiting to go with others.
func gathering(c *Client) int { return waiting(c.checks) }

// gatheringReports is the number of reports waiting to go with others.
func gatheringReports(c *Client) int { return waiting(c.reportQ) }

// waiting is the number of calls of q waiting to go with others.
func waiting(q *checkQueue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.group == nil {
		return 0
	}
	return len(q.group.entries)
}

type result struct {
	d   Decision
	err error
}

// holdOne starts a check that the fake holds until l.open, and waits until
// it is on its way: the checks that come next gather.
func holdOne(t *testing.T, l *batchLimiter, c *Client) chan result {
	t.Helper()
	out := make(chan result, 1)
	before := len(l.sent("/v1/check"))
	go func() {
		d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/held"})
		out <- result{d, err}
	}()
	for len(l.sent("/v1/check")) == before {
		time.Sleep(time.Millisecond)
	}
	return out
}

// gather starts a check of each endpoint, and waits until they all gather
// (or, with leftOver, until all but that many do).
func gather(t *testing.T, c *Client, ctx context.Context, endpoints []string) []chan result {
	t.Helper()
	outs := make([]chan result, len(endpoints))
	for i, ep := range endpoints {
		outs[i] = make(chan result, 1)
		go func() {
			d, err := c.Check(ctx, &Request{IP: "203.0.113.2", Endpoint: ep})
			outs[i] <- result{d, err}
		}()
	}
	for gathering(c) < len(endpoints) {
		time.Sleep(time.Millisecond)
	}
	return outs
}

// A check alone goes alone, at once, as /v1/check, whatever its number:
// nothing is in flight beside it.
func TestLoneChecksGoAlone(t *testing.T) {
	l := newBatchLimiter(t)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	for i := range 5 {
		d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/" + strconv.Itoa(i)})
		if err != nil || d.Remaining != int64(i) {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
	}
	if n, b := len(l.sent("/v1/check")), len(l.sent("/v1/check/batch")); n != 5 || b != 0 {
		t.Fatalf("%d single calls, %d batches; want 5 and 0", n, b)
	}
}

// Checks that arrive while a call is on its way gather, and go together
// when it returns, in one batch asking for the rate-limit headers: each
// caller gets its own decision and headers, as its own call gives them; a
// per-check error goes to its check only (a deny rule's refusal to one,
// the failure policy to another), and the breaker hears of neither as a
// failure of the others.
func TestConcurrentChecksShareABatch(t *testing.T) {
	l := newBatchLimiter(t)
	var errs errorLog
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute, OnFailure: FailClosed, OnError: errs.hook, BreakerFailures: 2})
	held := holdOne(t, l, c)
	endpoints := []string{"/n/1", "/n/2", "/deny-rule", "/n/3", "/err", "/n/4"}
	outs := gather(t, c, context.Background(), endpoints)
	l.open()
	if r := <-held; r.err != nil || r.d.Reason != ReasonNoRule {
		t.Fatalf("the held check: %+v, %v", r.d, r.err)
	}
	for i, ep := range endpoints {
		r := <-outs[i]
		switch ep {
		case "/deny-rule":
			if r.d.Reason != ReasonUndecidable || r.d.RuleID != "strict" || !errors.Is(r.err, ErrUndecidable) || clientErr(r.err).Op != "check" {
				t.Errorf("%s: %+v, %v", ep, r.d, r.err)
			}
		case "/err":
			if !r.d.Fallback || r.d.Allowed || clientErr(r.err).Status != 500 || clientErr(r.err).Op != "check" {
				t.Errorf("%s: %+v, %v", ep, r.d, r.err)
			}
		default:
			k := strings.TrimPrefix(ep, "/n/")
			var headers []string
			r.d.EachRateLimitHeader(func(name, value string) { headers = append(headers, name+": "+value) })
			want := []string{`Ratelimit-Policy: "per-ip/1s";q=1000;w=1`, `Ratelimit: "per-ip/1s";r=` + k + `;t=1`, "X-Ratelimit-Remaining: " + k}
			if r.err != nil || !r.d.Allowed || strconv.FormatInt(r.d.Remaining, 10) != k || r.d.EventID != "e-"+k || fmt.Sprint(headers) != fmt.Sprint(want) {
				t.Errorf("%s: %+v %q, %v; want remaining %s and headers %q", ep, r.d, headers, r.err, k, want)
			}
		}
	}
	if b := len(l.sent("/v1/check/batch")); b != 1 {
		t.Fatalf("%d batches, want 1", b)
	}
	if !strings.HasPrefix(l.sent("/v1/check/batch")[0], `{"headers":true,"checks":[`) {
		t.Fatalf("batch body %s", l.sent("/v1/check/batch")[0])
	}
	if got := errs.all(); len(got) != 2 {
		t.Fatalf("OnError got %q, want the two checks' errors", got)
	}
	// One failure (the /err entry) with BreakerFailures 2: still closed.
	if d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/9"}); err != nil || d.Remaining != 9 {
		t.Fatalf("the next check: %+v, %v (the breaker opened?)", d, err)
	}
}

func clientErr(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{}
}

// A batch that fails counts for the breaker as its checks' own calls
// would: one failure per check. A failed batch of 3 (BreakerFailures 5)
// leaves the breaker closed, as 3 failed calls do; 2 more failures open
// it. A failed batch of 30 opens it at once, as 30 failed calls would.
func TestFailedBatchCountsEachCheck(t *testing.T) {
	for _, tc := range []struct {
		n          int
		openAfter  bool
		failsAfter int // single failures then needed to open it
	}{{3, false, 2}, {30, true, 0}} {
		t.Run(strconv.Itoa(tc.n), func(t *testing.T) {
			l := newBatchLimiter(t)
			c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute, BreakerFailures: 5, BreakerOpen: time.Hour})
			held := holdOne(t, l, c)
			outs := gather(t, c, context.Background(), slicesRepeat("/n/1", tc.n))
			l.fail.Store(true)
			l.open()
			<-held // the held one failed too: one more failure, before the batch
			for i := range outs {
				if r := <-outs[i]; !r.d.Fallback || clientErr(r.err).Status != 500 {
					t.Fatalf("check %d: %+v, %v", i, r.d, r.err)
				}
			}
			// 1 + n failures so far.
			_, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/1"})
			if open := errors.Is(err, ErrBreakerOpen); open != tc.openAfter {
				t.Fatalf("after a failed batch of %d: breaker open %v, want %v (%v)", tc.n, open, tc.openAfter, err)
			}
			if tc.openAfter {
				return
			}
			// That check failed too: 1 + n + 1 = 5 with n = 3.
			if _, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/1"}); !errors.Is(err, ErrBreakerOpen) {
				t.Fatalf("after 5 failures in all, the breaker is not open: %v", err)
			}
		})
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Half open, the breaker lets one probe through, as with single calls:
// of a batch gathered then, one check is sent and the others are decided
// by the failure policy at once (ErrBreakerOpen).
func TestHalfOpenBatchSendsOneProbe(t *testing.T) {
	l := newBatchLimiter(t)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Millisecond, BreakerFailures: 1, BreakerOpen: 20 * time.Millisecond, Timeout: time.Minute})
	l.fail.Store(true)
	if _, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/1"}); clientErr(err).Status != 500 {
		t.Fatalf("first check: %v", err)
	}
	l.fail.Store(false)
	time.Sleep(40 * time.Millisecond) // past BreakerOpen: half open
	held := holdOne(t, l, c)          // the probe, held
	// Gathered while the probe is out, they go after BatchWait.
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			if d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/2"}); !errors.Is(err, ErrBreakerOpen) || !d.Fallback {
				t.Errorf("check %d while the probe was out: %+v, %v; want ErrBreakerOpen", i, d, err)
			}
		})
	}
	wg.Wait()
	l.open()
	if r := <-held; r.err != nil {
		t.Fatalf("the probe: %v", r.err)
	}
	if b := len(l.sent("/v1/check/batch")); b != 0 {
		t.Fatalf("%d batches sent while half open", b)
	}
}

// A caller whose context ends while its check gathers leaves at once,
// refused (ReasonCallerGone), its check never sent; the others go and are
// decided.
func TestCallerLeavesTheGathering(t *testing.T) {
	l := newBatchLimiter(t)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	held := holdOne(t, l, c)
	stay := gather(t, c, context.Background(), []string{"/n/1", "/n/2"})
	ctx, cancel := context.WithCancel(context.Background())
	leave := gather(t, c, ctx, []string{"/n/7"})
	for gathering(c) < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if r := <-leave[0]; r.d.Reason != ReasonCallerGone || !errors.Is(r.err, ErrCallerGone) || r.d.Fallback {
		t.Fatalf("the caller that left: %+v, %v", r.d, r.err)
	}
	l.open()
	<-held
	for i, out := range stay {
		if r := <-out; r.err != nil || r.d.Remaining != int64(i+1) {
			t.Fatalf("check %d: %+v, %v", i, r.d, r.err)
		}
	}
	if bodies := l.sent("/v1/check/batch"); len(bodies) != 1 || strings.Contains(bodies[0], "/n/7") {
		t.Fatalf("batches %q: want one, without the check that left", bodies)
	}
	if s := c.Stats(); s.CallerGone != 1 || s.Fallbacks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A check the limiter would refuse as invalid never joins a batch, which
// it would refuse whole: it goes alone, and gets its own refusal.
func TestInvalidCheckGoesAlone(t *testing.T) {
	l := newBatchLimiter(t)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	held := holdOne(t, l, c)
	out := make(chan result, 1)
	go func() {
		d, err := c.Check(context.Background(), &Request{IP: "not-an-ip", Endpoint: "/n/5"})
		out <- result{d, err}
	}()
	for len(l.sent("/v1/check")) < 2 {
		time.Sleep(time.Millisecond)
	}
	if gathering(c) != 0 {
		t.Fatal("the invalid check gathered")
	}
	l.open()
	<-held
	<-out
}

// At 100 checks, a group goes at once, full, without waiting for the
// call in flight.
func TestFullGroupGoesAtOnce(t *testing.T) {
	l := newBatchLimiter(t)
	l.batchSize = make(chan int, 200)
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	held := holdOne(t, l, c)
	outs := gather(t, c, context.Background(), slicesRepeat("/n/1", 99))
	last := make(chan result, 1)
	go func() { // the 100th: the group goes
		d, err := c.Check(context.Background(), &Request{IP: "203.0.113.2", Endpoint: "/n/1"})
		last <- result{d, err}
	}()
	outs = append(outs, last)
	if n := <-l.batchSize; n != 100 {
		t.Fatalf("a batch of %d, want 100", n)
	}
	l.open()
	<-held
	for i, out := range outs {
		if r := <-out; r.err != nil || r.d.Remaining != 1 {
			t.Fatalf("check %d: %+v, %v", i, r.d, r.err)
		}
	}
}

// A limiter that does not know "headers" (older than batched checks with
// rate-limit headers) refuses the batch, deciding none of it: each check
// is sent again alone, and the client batches no more.
func TestOlderLimiterTurnsBatchingOff(t *testing.T) {
	l := newBatchLimiter(t)
	l.refuse = `{"error":"invalid JSON: unknown field \"headers\""}`
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
	held := holdOne(t, l, c)
	outs := gather(t, c, context.Background(), []string{"/n/1", "/n/2", "/n/3"})
	l.open()
	<-held
	for i, out := range outs {
		var headers int
		r := <-out
		r.d.EachRateLimitHeader(func(string, string) { headers++ })
		if r.err != nil || r.d.Remaining != int64(i+1) || headers != 3 {
			t.Fatalf("check %d: %+v (%d headers), %v", i, r.d, headers, r.err)
		}
	}
	if s := c.Stats(); s.Invalid != 0 || s.Fallbacks != 0 {
		t.Fatalf("stats %+v", s)
	}
	if !c.checks.off {
		t.Fatal("batching still on")
	}
	if n := len(l.sent("/v1/check")); n != 4 {
		t.Fatalf("%d single calls, want 4", n)
	}
}

// A limiter (or a proxy in front of it) with no batch routes answers 404
// or 405 to a batch, deciding none of it: each check (or report) is sent
// again alone, and the client batches no more. Before, the batch's checks
// went to the failure policy, every time; and reports kept being batched.
func TestNoBatchRouteTurnsBatchingOff(t *testing.T) {
	for _, op := range []string{"check", "report"} {
		for _, status := range []int{http.StatusNotFound, http.StatusMethodNotAllowed} {
			t.Run(op+" "+strconv.Itoa(status), func(t *testing.T) {
				l := &concurrentLimiter{batchLimiter: newBatchLimiter(t)}
				l.refuse, l.refuseStatus = "404 page not found", status
				c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute})
				held, outs := gatherBehindHeld(t, l, c, op, []string{"/n/1", "/n/2", "/n/3"})
				l.open()
				if r := <-held; r.err != nil {
					t.Fatalf("the held call: %v", r.err)
				}
				for i, out := range outs {
					if r := <-out; r.err != nil || (op == "check" && r.d.Remaining != int64(i+1)) {
						t.Fatalf("%s %d: %+v, %v", op, i, r.d, r.err)
					}
				}
				q := c.checks
				if op == "report" {
					q = c.reportQ
				}
				if s := c.Stats(); s.Fallbacks != 0 || !q.off {
					t.Fatalf("stats %+v, batching off %v", s, q.off)
				}
				if n := len(l.sent("/v1/" + op)); n != 4 {
					t.Fatalf("%d single calls, want 4", n)
				}
				// Another call on its way: the next one goes alone, at
				// once, rather than gathering for BatchWait (an hour).
				q.mu.Lock()
				q.inflight++
				q.mu.Unlock()
				next := make(chan error, 1)
				go func() {
					var err error
					if op == "check" {
						_, err = c.Check(context.Background(), &Request{IP: "203.0.113.3", Endpoint: "/n/4"})
					} else {
						_, err = c.Report(context.Background(), &Outcome{IP: "203.0.113.3", Endpoint: "/n/4", Status: 200})
					}
					next <- err
				}()
				select {
				case err := <-next:
					if err != nil {
						t.Fatal(err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("a %s with batching off waited to gather", op)
				}
				q.returned()
			})
		}
	}
}

// panickyTransport holds the first call until release, and panics on a
// batch.
type panickyTransport struct {
	release chan struct{}
	first   atomic.Bool
	sent    atomic.Int64
}

func (p *panickyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/check/batch" {
		panic("a transport's bug")
	}
	p.sent.Add(1)
	if p.first.CompareAndSwap(false, true) {
		<-p.release
	}
	return http.DefaultTransport.RoundTrip(r)
}

// A Transport that panics on a batch has no caller's goroutine to panic
// in: the batch's checks fail (the failure policy decides them, the
// breaker counts them) and the application goes on.
func TestPanickingTransportFailsTheBatch(t *testing.T) {
	l := newBatchLimiter(t)
	l.open()
	tr := &panickyTransport{release: make(chan struct{})}
	c := newClient(t, Config{URL: l.URL, BatchWait: time.Hour, Timeout: time.Minute, Transport: tr, BreakerFailures: 100})
	held := make(chan result, 1)
	go func() {
		d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/1"})
		held <- result{d, err}
	}()
	for tr.sent.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	outs := gather(t, c, context.Background(), slicesRepeat("/n/2", 3))
	close(tr.release)
	if r := <-held; r.err != nil {
		t.Fatalf("the held check: %v", r.err)
	}
	for i, out := range outs {
		if r := <-out; !errors.Is(r.err, errPanicked) || !r.d.Fallback || !r.d.Allowed {
			t.Fatalf("check %d: %+v, %v; want FailOpen's, the panic", i, r.d, r.err)
		}
	}
	if d, err := c.Check(context.Background(), &Request{IP: "203.0.113.1", Endpoint: "/n/3"}); err != nil || d.Remaining != 3 {
		t.Fatalf("the next check: %+v, %v", d, err)
	}
}

// Reports that arrive while a report is on its way gather and go together
// (POST /v1/report/batch), each answered with its own entry; a batch the
// limiter refuses is sent again one report at a time; an outcome the
// limiter would refuse never joins a batch.
func TestConcurrentReportsShareABatch(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused %v", refuse), func(t *testing.T) {
			release := make(chan struct{})
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
				if strings.Contains(body, `"/held"`) {
					<-release
				}
				w.Header().Set("Content-Type", "application/json")
				entry := func(status int) string {
					return `{"event_id":"r-` + strconv.Itoa(status) + `","mode":"redis","rules":[{"rule_id":"fails","limit":9,"remaining":` +
						strconv.Itoa(status-400) + `,"reset_after_ms":1000,"spent":false}]}`
				}
				switch r.URL.Path {
				case "/v1/report":
					var o struct{ Status int }
					_ = json.Unmarshal([]byte(body), &o)
					_, _ = w.Write([]byte(entry(o.Status)))
				case "/v1/report/batch":
					if refuse {
						w.WriteHeader(400)
						_, _ = w.Write([]byte(`{"error":"reports[1]: something new"}`))
						return
					}
					var b struct{ Reports []struct{ Status int } }
					_ = json.Unmarshal([]byte(body), &b)
					var es []string
					for _, o := range b.Reports {
						es = append(es, entry(o.Status))
					}
					_, _ = w.Write([]byte(`{"reports":[` + strings.Join(es, ",") + `]}`))
				}
			})
			c := newClient(t, Config{URL: f.URL, BatchWait: time.Hour, Timeout: time.Minute})
			held := make(chan error, 1)
			go func() {
				_, err := c.Report(context.Background(), &Outcome{IP: "203.0.113.1", Endpoint: "/held", Status: 401})
				held <- err
			}()
			for len(f.sent("/v1/report")) == 0 {
				time.Sleep(time.Millisecond)
			}
			type res struct {
				r   ReportResult
				err error
			}
			outs := make([]chan res, 3)
			for i := range outs {
				outs[i] = make(chan res, 1)
				go func() {
					r, err := c.Report(context.Background(), &Outcome{IP: "203.0.113.2", Endpoint: "/x", Status: 402 + i})
					outs[i] <- res{r, err}
				}()
			}
			for gatheringReports(c) < 3 {
				time.Sleep(time.Millisecond)
			}
			// Invalid (no IP): alone, the limiter's own answer.
			invalid := make(chan struct{})
			go func() {
				_, _ = c.Report(context.Background(), &Outcome{IP: "nope", Endpoint: "/x", Status: 403})
				close(invalid)
			}()
			<-invalid
			close(release)
			if err := <-held; err != nil {
				t.Fatal(err)
			}
			for i, out := range outs {
				r := <-out
				if r.err != nil || r.r.EventID != "r-"+strconv.Itoa(402+i) || len(r.r.Rules) != 1 || r.r.Rules[0].Remaining != int64(2+i) {
					t.Fatalf("report %d: %+v, %v", i, r.r, r.err)
				}
			}
			batches, singles := len(f.sent("/v1/report/batch")), len(f.sent("/v1/report"))
			wantSingles := 2 // the held one and the invalid one
			if refuse {
				wantSingles += 3
			}
			if batches != 1 || singles != wantSingles {
				t.Fatalf("%d batches and %d single reports, want 1 and %d", batches, singles, wantSingles)
			}
		})
	}
}
