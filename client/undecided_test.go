package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// errorLog records what Config.OnError gets.
type errorLog struct {
	mu   sync.Mutex
	seen []string // "op: error"
}

func (l *errorLog) hook(op string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, op+": "+err.Error())
}

func (l *errorLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.seen...)
}

// cancelled is a context that has ended, as a request's does once its
// client has gone.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// The caller's context does not cut a call short: a check whose caller has
// gone still gets the limiter's decision. When the limiter cannot decide,
// such a check is refused (ReasonCallerGone), not decided by the failure
// policy, and says so in its error.
func TestCheckCallerGone(t *testing.T) {
	t.Run("the limiter decides", func(t *testing.T) {
		f := newFake(t, answer(200, "application/json", bannedJSON))
		c := newClient(t, Config{URL: f.URL})
		d, err := c.Check(cancelled(), &Request{IP: "203.0.113.7", Endpoint: "/a"})
		if err != nil || d.Allowed || d.Reason != ReasonBanned || len(f.sent("/v1/check")) != 1 {
			t.Fatalf("%+v, %v (%d checks sent), want the limiter's refusal", d, err, len(f.sent("/v1/check")))
		}
	})
	t.Run("the limiter fails", func(t *testing.T) {
		f := newFake(t, answer(503, "application/json", `{"error":"down"}`))
		var log errorLog
		c := newClient(t, Config{URL: f.URL, OnError: log.hook, BreakerFailures: 100}) // FailOpen
		d, err := c.Check(cancelled(), &Request{IP: "203.0.113.7", Endpoint: "/a"})
		if d != (Decision{Reason: ReasonCallerGone}) || !errors.Is(err, ErrCallerGone) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%+v, %v: want a refusal, ErrCallerGone and context.Canceled", d, err)
		}
		ds, err := c.CheckBatch(cancelled(), []Request{{IP: "203.0.113.7", Endpoint: "/a"}, {IP: "203.0.113.8", Endpoint: "/b"}})
		if ds[0] != (Decision{Reason: ReasonCallerGone}) || ds[1] != ds[0] || !errors.Is(err, ErrCallerGone) {
			t.Fatalf("batch: %+v, %v", ds, err)
		}
		if s := c.Stats(); s != (Stats{Checks: 3, CallerGone: 3}) {
			t.Fatalf("stats %+v", s)
		}
		if seen := log.all(); len(seen) != 2 || !strings.Contains(seen[0], "503") || !strings.Contains(seen[1], "caller had gone") {
			t.Fatalf("OnError saw %q", seen)
		}
		// A caller still there gets the failure policy's decision.
		if d, _ := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a"}); !d.Allowed || !d.Fallback {
			t.Fatalf("a caller still there: %+v, want FailOpen's", d)
		}
	})
}

// The middleware serves no request whose client has gone when the limiter
// fails: 503, next never runs, whatever the failure policy.
func TestMiddlewareCallerGone(t *testing.T) {
	f := newFake(t, answer(503, "application/json", `{"error":"down"}`))
	c := newClient(t, Config{URL: f.URL}) // FailOpen
	var served atomic.Int64
	h := Middleware(c, MiddlewareConfig{})(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/x", nil).WithContext(cancelled()))
	if rec.Code != http.StatusServiceUnavailable || served.Load() != 0 {
		t.Fatalf("client gone: %d, served %d times", rec.Code, served.Load())
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/x", nil))
	if rec.Code != http.StatusOK || served.Load() != 1 {
		t.Fatalf("client there: %d, served %d times, want FailOpen's", rec.Code, served.Load())
	}
}

// A request the limiter refuses as invalid is refused, whatever the
// failure policy: the middleware answers 400 (Denied may say otherwise),
// the interceptor InvalidArgument, and neither serves it.
func TestRefusedAsInvalid(t *testing.T) {
	f := newFake(t, answer(400, "application/json", `{"error":"attributes: at most 32 entries"}`))
	c := newClient(t, Config{URL: f.URL}) // FailOpen
	var served atomic.Int64
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) })
	rec := httptest.NewRecorder()
	Middleware(c, MiddlewareConfig{})(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/x", nil))
	if rec.Code != http.StatusBadRequest || served.Load() != 0 {
		t.Fatalf("middleware: %d, served %d times", rec.Code, served.Load())
	}
	var reason string
	rec = httptest.NewRecorder()
	Middleware(c, MiddlewareConfig{Denied: func(w http.ResponseWriter, _ *http.Request, d Decision) {
		reason = d.Reason
		w.WriteHeader(http.StatusTeapot)
	}})(next).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/x", nil))
	if rec.Code != http.StatusTeapot || reason != ReasonInvalid || served.Load() != 0 {
		t.Fatalf("Denied: %d, reason %q, served %d times", rec.Code, reason, served.Load())
	}
	if s := c.Stats(); s.Invalid != 2 || s.Fallbacks != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A check whose body would be over the API's 64 KiB, which the limiter
// would refuse, is refused without a call, and the breaker never hears of
// it.
func TestCheckOverTheBodyBound(t *testing.T) {
	f := newFake(t, answer(200, "application/json", allowedAnswer))
	c := newClient(t, Config{URL: f.URL, BreakerFailures: 1})
	attrs := map[string]string{}
	for i := range maxAttributes {
		attrs[strings.Repeat("k", i+1)] = strings.Repeat("<", maxAttrValue) // 6 bytes each in JSON
	}
	for range 3 {
		d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a", Attributes: attrs})
		if d != (Decision{Reason: ReasonInvalid}) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("%+v, %v: want a refusal, ErrInvalid", d, err)
		}
	}
	if n := len(f.sent("/v1/check")); n != 0 {
		t.Fatalf("%d checks sent", n)
	}
	if d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a"}); err != nil || !d.Allowed {
		t.Fatalf("the next check: %+v, %v (the breaker opened?)", d, err)
	}
}

// Checks beyond MaxConns wait for a connection, within Timeout: none is
// handed to the failure policy for want of one, nor counted against the
// breaker. (Each check a call of its own: batched, they would share one.)
func TestChecksBeyondMaxConnsWait(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		<-release
		answer(200, "application/json", bannedJSON)(w, r, body)
	})
	c := newClient(t, Config{URL: f.URL, MaxConns: 1, BreakerFailures: 1, Timeout: time.Minute, DisableBatching: true}) // FailOpen
	const n = 6
	ds := make([]Decision, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ds[i], _ = c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a"}) })
	}
	// Every check is on the connection or waiting for it, or, refused
	// one, done already.
	for waitingForAConnection() < n-1 && c.Stats().Fallbacks == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	for i, d := range ds {
		if d.Allowed || d.Reason != ReasonBanned {
			t.Errorf("check %d: %+v, want the limiter's refusal", i, d)
		}
	}
	if s := c.Stats(); s.Fallbacks != 0 || s.BreakerOpen != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A check whose caller has gone does not wait for a connection: with
// every connection busy, it is refused at once (ReasonCallerGone), as is a
// check whose caller goes while it waits; neither is a failure of the
// limiter for the breaker.
func TestCallerGoneDoesNotWaitForAConnection(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if strings.Contains(body, "/held") {
			<-release
		}
		answer(200, "application/json", bannedJSON)(w, r, body)
	})
	c := newClient(t, Config{URL: f.URL, MaxConns: 1, BreakerFailures: 1, Timeout: time.Minute})
	held := make(chan Decision)
	go func() {
		d, _ := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/held"})
		held <- d
	}()
	for len(f.sent("/v1/check")) == 0 {
		time.Sleep(time.Millisecond)
	}
	if d, err := c.Check(cancelled(), &Request{IP: "203.0.113.7", Endpoint: "/a"}); d.Reason != ReasonCallerGone || !errors.Is(err, ErrCallerGone) {
		t.Fatalf("caller gone: %+v, %v", d, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error)
	go func() {
		d, err := c.Check(ctx, &Request{IP: "203.0.113.7", Endpoint: "/a"})
		if d.Reason != ReasonCallerGone {
			err = fmt.Errorf("%+v, %v", d, err)
		}
		gone <- err
	}()
	for waitingForAConnection() < 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gone; !errors.Is(err, ErrCallerGone) {
		t.Fatalf("caller gone while waiting: %v", err)
	}
	close(release)
	if d := <-held; d.Reason != ReasonBanned {
		t.Fatalf("the held check: %+v", d)
	}
	if d, err := c.Check(context.Background(), &Request{IP: "203.0.113.7", Endpoint: "/a"}); d.Reason != ReasonBanned {
		t.Fatalf("the next check: %+v, %v (the breaker opened?)", d, err)
	}
	if s := c.Stats(); s.CallerGone != 2 || s.Fallbacks != 0 || s.BreakerOpen != 0 || len(f.sent("/v1/check")) != 2 {
		t.Fatalf("stats %+v, %d checks sent", s, len(f.sent("/v1/check")))
	}
}

// waitingForAConnection counts the goroutines waiting in acquire.
func waitingForAConnection() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), ").acquire(")
}

// CheckBatch sends as many calls as its checks need to keep each within
// 100 checks and 64 KiB; every check is decided.
func TestCheckBatchSplits(t *testing.T) {
	var calls atomic.Int64
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		calls.Add(1)
		n := strings.Count(body, `"ip":`)
		if len(body) > maxBody || n > maxBatch {
			answer(413, "application/json", `{"error":"too large"}`)(w, r, body)
			return
		}
		answer(200, "application/json", `{"decisions":[`+strings.TrimSuffix(strings.Repeat(`{"status":200,`+allowedAnswer[1:]+`,`, n), ",")+`]}`)(w, r, body)
	})
	c := newClient(t, Config{URL: f.URL})
	reqs := make([]Request, 250)
	for i := range reqs {
		reqs[i] = Request{IP: "203.0.113.7", Endpoint: "/a"}
		if i%2 == 0 {
			reqs[i].Endpoint = "/" + strings.Repeat("x", 4000)
		}
	}
	ds, err := c.CheckBatch(context.Background(), reqs)
	for i, d := range ds {
		if !d.Allowed || d.Fallback {
			t.Fatalf("check %d: %+v (%v)", i, d, err)
		}
	}
	if err != nil || calls.Load() < 3 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
}

// Ping passes when the limiter answers the API's refusal of an empty batch
// (it took the token), and tells a refused token from a limiter down.
func TestPing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(http.ResponseWriter, *http.Request, string)
		want  func(error) bool
	}{
		{"token taken", answer(400, "application/json", `{"error":"checks: required, 1 to 100 of them"}`), func(err error) bool { return err == nil }},
		{"token refused", answer(401, "application/json", `{"error":"missing or invalid bearer token"}`),
			func(err error) bool { return errors.Is(err, ErrUnauthorized) }},
		{"a proxy's 400", answer(400, "text/html", "<html>bad request</html>"), func(err error) bool { return err != nil && !errors.Is(err, ErrUnauthorized) }},
		{"a proxy's 502", answer(502, "text/html", "<html>bad gateway</html>"), func(err error) bool { return err != nil && !errors.Is(err, ErrUnauthorized) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.serve)
			c := newClient(t, Config{URL: f.URL, Token: "t"})
			if err := c.Ping(context.Background()); !tc.want(err) {
				t.Fatalf("Ping: %v", err)
			}
			if b := f.sent("/v1/check/batch"); len(b) != 1 || b[0] != `{"checks":[]}` {
				t.Fatalf("sent %q", b)
			}
		})
	}
}

// ReportAsync refuses what the limiter would refuse before it is queued,
// and OnError hears of each outcome not reported: refused, dropped, lost
// with a failed batch.
func TestReportAsyncRefusesInvalidOutcomes(t *testing.T) {
	f := newFake(t, answer(503, "application/json", `{"error":"down"}`))
	var log errorLog
	c, err := New(Config{URL: f.URL, OnError: log.hook, ReportQueue: 1, BreakerFailures: 100})
	if err != nil {
		t.Fatal(err)
	}
	good := Outcome{IP: "203.0.113.7", Endpoint: "/a", Status: 200}
	for _, o := range []Outcome{
		{IP: "203.0.113.7", Endpoint: "/a", Status: 99}, {IP: "203.0.113.7", Endpoint: "/a", Status: 600},
		{IP: "203.0.113.7", Endpoint: "/a", Status: 200, Cost: -2}, {IP: "203.0.113.7", Endpoint: "/a", Status: 200, Cost: maxCost + 1},
		{IP: "somewhere", Endpoint: "/a", Status: 200}, {IP: "203.0.113.7", Status: 200},
		{IP: "203.0.113.7", Endpoint: "/a", Status: 200, Attributes: map[string]string{"": "x"}},
	} {
		if c.ReportAsync(&o) {
			t.Fatalf("%+v queued", o)
		}
	}
	// Valid, whatever their text: sent in the form the limiter accepts.
	odd := Outcome{IP: "203.0.113.7", Endpoint: "/a%00", UserID: "\x00", Tier: strings.Repeat("t", 100), Method: "G3T", Status: 200, Cost: CostNone}
	if err := validOutcome(&odd); err != nil {
		t.Fatal(err)
	}
	for !c.ReportAsync(&good) { // the queue of 1 empties as the reporter takes it
	}
	queued := 1
	for c.ReportAsync(&good) {
		queued++
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.ReportsInvalid != 7 || s.ReportsDropped == 0 || s.ReportsFailed != uint64(queued) {
		t.Fatalf("stats %+v (%d queued)", s, queued)
	}
	var invalid, full, failed int
	for _, e := range log.all() {
		switch {
		case strings.HasPrefix(e, "report: ratewarden report: not sent: refused as invalid"):
			invalid++
		case strings.HasPrefix(e, "report: ratewarden report: no answer: report queue full"):
			full++
		case strings.HasPrefix(e, "report batch: ratewarden report batch: the limiter answered 503"):
			failed++
		default:
			t.Errorf("OnError saw %q", e)
		}
	}
	if invalid != 7 || full != int(s.ReportsDropped) || failed == 0 {
		t.Fatalf("OnError saw %d invalid, %d dropped, %d failed batches; stats %+v", invalid, full, failed, s)
	}
}

// A queued outcome holds its fields as they are sent, within the API's
// bounds, not as the request had them: outcomes of paths of 512 KiB (and
// a long user id, tier, method and attribute) waiting for a limiter that
// does not answer hold what their 8 KiB forms take.
func TestReportQueueHoldsBoundedOutcomes(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		<-release
		answer(503, "application/json", `{"error":"down"}`)(w, r, body)
	})
	const n = 100
	c := newClient(t, Config{URL: f.URL, ReportQueue: n})
	defer close(release)
	heap := func() int64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return int64(m.HeapAlloc)
	}
	before := heap()
	long := func(i int) string { return strings.Repeat(string(rune('a'+i%26)), 512<<10) + strconv.Itoa(i) }
	for i := range n {
		o := Outcome{IP: "203.0.113.7", Endpoint: "/api/" + long(i), Status: 200}
		if i%10 == 0 { // every other field too, now and then
			o.UserID, o.Tier, o.Method, o.Attributes = long(i), long(i), long(i), map[string]string{long(i): long(i)}
		}
		if !c.ReportAsync(&o) {
			t.Fatalf("outcome %d not queued: %+v", i, c.Stats())
		}
	}
	held := heap() - before
	t.Logf("%d outcomes of 512 KiB paths queued hold %d KiB", n, held>>10)
	if held > n*32<<10 {
		t.Fatalf("%d queued outcomes hold %d KiB, want at most 32 KiB each", n, held>>10)
	}
}

// What boundOutcome keeps of an outcome is sent as the outcome itself
// would be: the limiter sees the same report.
func TestBoundOutcomeSendsTheSame(t *testing.T) {
	long := strings.Repeat("ab\x00\xff%/..;?#é", 1000)
	for _, o := range []Outcome{
		{IP: "203.0.113.7", Endpoint: "/api/x", Status: 200},
		{IP: "203.0.113.7", Endpoint: "/" + long, UserID: long, Tier: long, Method: long, Status: 200,
			Attributes: map[string]string{long: long, "k": long, long[:100]: "v"}},
		{IP: "203.0.113.7", Endpoint: "/a/../" + strings.Repeat("b/", 5000) + "?" + long, Method: "G3T", Status: 200},
		{IP: "203.0.113.7", Endpoint: strings.Repeat("%25", 3000), Status: 200},
	} {
		b := boundOutcome(o)
		var want, got map[string]any // attributes go out in the map's order
		if err := json.Unmarshal(appendOutcome(nil, &o), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(appendOutcome(nil, &b), &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("bounded, %.200v\nis sent as %.200v", want, got)
		}
	}
}

// Outcomes come faster than one batch at a time carries them (a batch
// holds 7 outcomes of 8 KiB paths): the reporter sends up to reportSenders
// batches at once, as checks go out on several connections, so that a
// client's long paths leave the outcomes that feed detection neither
// waiting nor dropped.
func TestReportBatchesGoOutTogether(t *testing.T) {
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		inFlight.Add(-1)
		reports := strings.Repeat(`{"event_id":"e","mode":"redis","rules":[]},`, strings.Count(body, `"status":`))
		answer(200, "application/json", `{"reports":[`+strings.TrimSuffix(reports, ",")+`]}`)(w, r, body)
	})
	c := newClient(t, Config{URL: f.URL, Timeout: time.Minute}) // no batch abandoned, and another sent, for its wait
	const n = 10 * reportSenders * 7
	long := "/static/" + strings.Repeat("a", maxEndpoint)
	for i := range n {
		if !c.ReportAsync(&Outcome{IP: "203.0.113.7", Endpoint: long + strconv.Itoa(i), Status: 200}) {
			t.Fatalf("outcome %d not queued", i)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for most.Load() < reportSenders && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); most.Load() != reportSenders || s.ReportsSent != n {
		t.Fatalf("%d batches at most at once, want %d; stats %+v", most.Load(), reportSenders, s)
	}
}

// The reporter keeps every batch within the API's 64 KiB, so that no
// batch is refused for its size, and refuses an outcome over it alone.
func TestReportAsyncBatchesWithinTheBodyBound(t *testing.T) {
	var largest atomic.Int64
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body string) {
		if int64(len(body)) > largest.Load() {
			largest.Store(int64(len(body)))
		}
		if len(body) > maxBody {
			answer(413, "application/json", `{"error":"too large"}`)(w, r, body)
			return
		}
		n := strings.Count(body, `"status":`)
		answer(200, "application/json", `{"reports":[`+strings.TrimSuffix(strings.Repeat(`{"event_id":"x","mode":"redis","rules":[]},`, n), ",")+`]}`)(w, r, body)
	})
	c, err := New(Config{URL: f.URL})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	for range n {
		c.ReportAsync(&Outcome{IP: "203.0.113.7", Endpoint: "/" + strings.Repeat("<", 2000), Status: 200}) // 12 KB in JSON
	}
	huge := map[string]string{}
	for i := range maxAttributes {
		huge[strings.Repeat("k", i+1)] = strings.Repeat("<", maxAttrValue)
	}
	c.ReportAsync(&Outcome{IP: "203.0.113.7", Endpoint: "/a", Status: 200, Attributes: huge})
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.ReportsSent != n || s.ReportsFailed != 0 || s.ReportsInvalid != 1 || largest.Load() > maxBody {
		t.Fatalf("stats %+v, largest body %d bytes", s, largest.Load())
	}
	if single := len(f.sent("/v1/report")); single != 0 {
		t.Fatalf("%d outcomes sent one by one", single)
	}
}

// bannedJSON is the limiter's answer to a check of a banned client.
const bannedJSON = `{"allowed":false,"reason":"banned","rule_id":"","algorithm":"","limit":0,` +
	`"remaining":0,"reset_after_ms":0,"retry_after_ms":3600000,"mode":"redis","shadow":false,"event_id":"e3"}`
