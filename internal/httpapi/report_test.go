package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/limiter"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// The two examples of the docs: failed logins per user, refused after 5 in
// 15 minutes; LLM tokens per API key, 100 000 a minute and 2 000 000 a day,
// debited from reports.
const reportRules = `
rules:
  - id: login-failures
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [user_id]
    algorithm: sliding_window
    limits: [{requests: 5, per: 15m}]
    spent_by: report
    statuses: [401, 403]
  - id: llm-tokens
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:api_key"]
    algorithm: sliding_window
    limits: [{requests: 100000, per: 1m}, {requests: 2000000, per: 24h}]
    spent_by: report
`

type reportAnswer struct {
	EventID string `json:"event_id"`
	Mode    string `json:"mode"`
	Rules   []struct {
		RuleID       string `json:"rule_id"`
		Limit        int64  `json:"limit"`
		Remaining    int64  `json:"remaining"`
		ResetAfterMS int64  `json:"reset_after_ms"`
		Spent        bool   `json:"spent"`
	} `json:"rules"`
	Reports []json.RawMessage `json:"reports"`
}

func (s *stack) report(body string) (int, reportAnswer) {
	s.t.Helper()
	resp, raw := s.send(http.MethodPost, "/v1/report", body, nil)
	var a reportAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a); err != nil {
			s.t.Fatalf("undecodable report answer %q: %v", raw, err)
		}
	}
	return resp.StatusCode, a
}

// With the over-limit cache on, refused checks are answered from memory,
// and reports must still reach Redis.
func TestReportFailedLogins(t *testing.T) {
	for _, cache := range []int{0, 1000} {
		t.Run(fmt.Sprintf("over-limit cache %d", cache), func(t *testing.T) {
			testReportFailedLogins(t, newStack(t, stackOptions{rules: reportRules, overLimitCache: cache}))
		})
	}
}

func testReportFailedLogins(t *testing.T, s *stack) {
	login := func(user string) response {
		return s.check(`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"` + user + `"}`)
	}
	failed := func(user string, status int) reportAnswer {
		code, a := s.report(fmt.Sprintf(`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":%q,"status":%d}`, user, status))
		if code != http.StatusOK {
			t.Fatalf("report answered %d", code)
		}
		return a
	}
	for i := range 5 {
		if r := login("alice"); !r.Allowed || r.RuleID != "login-failures" || r.Remaining != int64(5-i) {
			t.Fatalf("login %d of alice: %+v, want allowed with %d left", i+1, r, 5-i)
		}
		status := 401
		if i == 2 {
			status = 403
		}
		a := failed("alice", status)
		if len(a.Rules) != 1 || a.Rules[0].RuleID != "login-failures" || a.Rules[0].Remaining != int64(4-i) || a.Rules[0].Spent != (i == 4) {
			t.Fatalf("report %d: %+v", i+1, a)
		}
		if a := failed("alice", 200); len(a.Rules) != 0 { // a success spends nothing
			t.Fatalf("a 200 report debited %+v", a.Rules)
		}
	}
	for range 3 { // refused now, and checks spend nothing
		if r := login("alice"); r.Allowed || r.Reason != "rate_limited" || r.RuleID != "login-failures" || r.RetryAfterMs <= 0 {
			t.Fatalf("login after 5 failures: %+v, want refused", r)
		}
	}
	if r := login("bob"); !r.Allowed {
		t.Fatalf("bob refused: %+v", r)
	}
	if a := failed("alice", 401); a.Rules[0].Remaining != 0 || !a.Rules[0].Spent { // past the limit, still debited
		t.Fatalf("a sixth failure: %+v", a)
	}
	// Every report is an event on the outcomes topic: 11 of them.
	msgs := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), outcomesTopic, 11, 20*time.Second)
	statuses := map[int]int{}
	for _, m := range msgs {
		o, err := event.DecodeOutcome(m.Value)
		if err != nil {
			t.Fatalf("decode %s: %v", m.Value, err)
		}
		if string(m.Key) != o.IP || o.UserID != "alice" || o.Endpoint != "/api/login" || o.Method != "POST" || o.Cost != 1 ||
			o.Banned || o.Instance != "test" || time.Since(o.TS) > time.Minute {
			t.Errorf("outcome %+v (key %q)", o, m.Key)
		}
		statuses[o.Status]++
	}
	if statuses[401] != 5 || statuses[403] != 1 || statuses[200] != 5 {
		t.Fatalf("outcome statuses %v", statuses)
	}
}

func TestReportLLMTokens(t *testing.T) {
	s := newStack(t, stackOptions{rules: reportRules})
	chat := `{"ip":"203.0.113.7","endpoint":"/v1/chat/completions","method":"POST","attributes":{"api_key":"k-1"}`
	if r := s.check(chat + `}`); !r.Allowed || r.RuleID != "llm-tokens" {
		t.Fatalf("first chat: %+v", r)
	}
	_, a := s.report(chat + `,"status":200,"cost":60000}`)
	if len(a.Rules) != 1 || a.Rules[0].Remaining != 40000 || a.Rules[0].Spent {
		t.Fatalf("after 60 000 tokens: %+v", a)
	}
	_, a = s.report(chat + `,"status":200,"cost":70000}`) // known after the response: debited past the limit
	if a.Rules[0].Remaining != 0 || !a.Rules[0].Spent {
		t.Fatalf("after 130 000 tokens: %+v", a)
	}
	if r := s.check(chat + `}`); r.Allowed || r.RuleID != "llm-tokens" || r.RetryAfterMs <= 0 {
		t.Fatalf("chat over budget: %+v, want refused", r)
	}
	_, a = s.report(chat + `,"status":200,"cost":0}`) // nothing used: nothing debited, and still answered
	if len(a.Rules) != 1 || !a.Rules[0].Spent {
		t.Fatalf("report of cost 0: %+v", a)
	}
	if r := s.check(`{"ip":"203.0.113.7","endpoint":"/v1/chat/completions","attributes":{"api_key":"k-2"}}`); !r.Allowed {
		t.Fatalf("another key refused: %+v", r)
	}
}

// Reports from many clients at once, on two limiter instances, debit
// exactly: each unit once.
func TestReportExactUnderConcurrency(t *testing.T) {
	a := newStack(t, stackOptions{rules: reportRules})
	rdb, prefix, broker := a.shared()
	b := newStack(t, stackOptions{rules: reportRules, rdb: rdb, prefix: prefix, broker: broker})
	const reports = 300
	chat := `{"ip":"203.0.113.7","endpoint":"/v1/chat/completions","attributes":{"api_key":"k-c"},"status":200,"cost":7}`
	var wg sync.WaitGroup
	for i := range reports {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Go(func() {
			if code, _ := s.report(chat); code != http.StatusOK {
				t.Errorf("report answered %d", code)
			}
		})
	}
	wg.Wait()
	_, ans := a.report(strings.Replace(chat, `"cost":7`, `"cost":1`, 1))
	if want := int64(100000 - reports*7 - 1); len(ans.Rules) != 1 || ans.Rules[0].Remaining != want {
		t.Fatalf("after %d reports of 7 and one of 1: %+v, want %d remaining", reports, ans, want)
	}
}

func TestReportInput(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: reportRules})
	for _, tc := range []struct{ name, body, want string }{
		{"no status", `{"ip":"203.0.113.7","endpoint":"/a"}`, "status: required"},
		{"status 99", `{"ip":"203.0.113.7","endpoint":"/a","status":99}`, "status: must be an HTTP status"},
		{"status as text", `{"ip":"203.0.113.7","endpoint":"/a","status":"401"}`, "status"},
		{"negative cost", `{"ip":"203.0.113.7","endpoint":"/a","status":200,"cost":-1}`, "cost"},
		{"no ip", `{"endpoint":"/a","status":200}`, "ip: required"},
		{"unknown field", `{"ip":"203.0.113.7","endpoint":"/a","status":200,"x":1}`, "unknown field"},
		{"empty batch", `{"reports":[]}`, "reports: required"},
		{"batch item without status", `{"reports":[{"ip":"203.0.113.7","endpoint":"/a"}]}`, "reports[0]: status: required"},
		{"bad batch item", `{"reports":[{"ip":"203.0.113.7","endpoint":"/a","status":200},{"ip":"x","endpoint":"/a","status":200}]}`, "reports[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/v1/report"
			if strings.HasPrefix(tc.body, `{"reports"`) {
				path = "/v1/report/batch"
			}
			r := s.do(http.MethodPost, path, tc.body, nil)
			if r.Status != http.StatusBadRequest || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("answered %d %q, want 400 with %q", r.Status, r.Error, tc.want)
			}
		})
	}
}

// A batch of reports debits as its reports would one by one.
func TestReportBatchDebits(t *testing.T) {
	s := newStack(t, stackOptions{rules: reportRules})
	r := s.do(http.MethodPost, "/v1/report/batch", `{"reports":[`+
		`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"carol","status":401},`+
		`{"ip":"203.0.113.8","endpoint":"/x","status":404}]}`, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("batch answered %d %q", r.Status, r.Error)
	}
	_, a := s.report(`{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"carol","status":401}`)
	if a.Rules[0].Remaining != 3 {
		t.Fatalf("after a batch failure and one more: %+v, want 3 left", a)
	}
}

// Reports take the decision API's tokens, as checks do.
func TestReportNeedsAToken(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: reportRules, configure: func(c *stackConfig) { c.APITokens = []string{"report-token-0123456789"} }})
	body := `{"ip":"203.0.113.7","endpoint":"/api/login","method":"POST","user_id":"alice","status":401}`
	for _, path := range []string{"/v1/report", "/v1/report/batch"} {
		if r := s.do(http.MethodPost, path, body, nil); r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("%s without a token: %d, want 401 with a challenge", path, r.Status)
		}
	}
	if r := s.do(http.MethodPost, "/v1/report", body, map[string]string{"Authorization": "Bearer report-token-0123456789"}); r.Status != http.StatusOK {
		t.Fatalf("with the token: %d %q", r.Status, r.Error)
	}
	if r := s.do(http.MethodGet, "/v1/report", "", map[string]string{"Authorization": "Bearer report-token-0123456789"}); r.Status != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d, want 405", r.Status)
	}
}

// countingDecider counts the submissions that reach the decider: one per
// round trip the limiter asks for.
type countingDecider struct {
	limiter.Decider
	submissions, calls atomic.Int64
}

func (c *countingDecider) Decide(ctx context.Context, calls []decide.Call) ([]decide.Result, error) {
	c.submissions.Add(1)
	c.calls.Add(int64(len(calls)))
	return c.Decider.Decide(ctx, calls)
}

// A batch of reports is debited as a batch of checks is decided: all its
// calls in one submission to the decider (one round trip per Redis node),
// and its answers are those of the same reports sent one by one, in
// order (15 users reported over and over: the sixth failure of each is
// past the limit of 5).
func TestReportBatchIsOneRoundTrip(t *testing.T) {
	var batched, single *countingDecider
	a := newStack(t, stackOptions{rules: reportRules, wrapDecider: func(d limiter.Decider) limiter.Decider {
		batched = &countingDecider{Decider: d}
		return batched
	}})
	rdb, _, broker := a.shared()
	b := newStack(t, stackOptions{rules: reportRules, rdb: rdb, broker: broker, wrapDecider: func(d limiter.Decider) limiter.Decider {
		single = &countingDecider{Decider: d}
		return single
	}})
	const n = 100
	reports := make([]string, n)
	for i := range reports {
		status := 401
		if i%7 == 3 {
			status = 200 // debits nothing
		}
		reports[i] = fmt.Sprintf(`{"ip":"203.0.113.%d","endpoint":"/api/login","method":"POST","user_id":"u-%d","status":%d}`, i%50, i%15, status)
	}
	resp, raw := a.send(http.MethodPost, "/v1/report/batch", `{"reports":[`+strings.Join(reports, ",")+`]}`, nil)
	var got reportAnswer
	if err := json.Unmarshal(raw, &got); resp.StatusCode != http.StatusOK || err != nil || len(got.Reports) != n {
		t.Fatalf("batch answered %d %q (%v)", resp.StatusCode, raw, err)
	}
	if s, c := batched.submissions.Load(), batched.calls.Load(); s != 1 || c != n-n/7 {
		t.Errorf("a batch of %d reports made %d submissions of %d calls to the decider, want 1 of %d", n, s, c, n-n/7)
	}
	for i, body := range reports {
		_, want := b.report(body)
		var one reportAnswer
		if err := json.Unmarshal(got.Reports[i], &one); err != nil {
			t.Fatal(err)
		}
		if len(one.Rules) != len(want.Rules) {
			t.Fatalf("report %d: batched %+v, single %+v", i, one.Rules, want.Rules)
		}
		for j, r := range one.Rules {
			w := want.Rules[j]
			if r.RuleID != w.RuleID || r.Limit != w.Limit || r.Remaining != w.Remaining || r.Spent != w.Spent || one.Mode != want.Mode || one.EventID == "" {
				t.Errorf("report %d rule %d: batched %+v, single %+v", i, j, r, w)
			}
		}
	}
	if s := single.submissions.Load(); s != n-n/7 {
		t.Errorf("%d single reports that debit made %d submissions", n-n/7, s)
	}
}
