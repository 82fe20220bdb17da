package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// batchResponse is a decoded POST /v1/check/batch answer: each decision
// decodes as a /v1/check answer, its "status" into Status.
type batchResponse struct {
	Status    int
	Header    http.Header
	Error     string     `json:"error"`
	Decisions []response `json:"decisions"`
}

// batch sends checks (JSON objects) as one POST /v1/check/batch.
func (s *stack) batch(header map[string]string, checks ...string) batchResponse {
	s.t.Helper()
	return s.batchBody(header, `{"checks":[`+strings.Join(checks, ",")+`]}`)
}

func (s *stack) batchBody(header map[string]string, body string) batchResponse {
	s.t.Helper()
	resp, raw := s.send(http.MethodPost, "/v1/check/batch", body, header)
	r := batchResponse{Status: resp.StatusCode, Header: resp.Header}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields() // an entry carries nothing /v1/check's answer does not
	if err := dec.Decode(&r); err != nil {
		s.t.Fatalf("undecodable batch answer %q: %v", raw, err)
	}
	return r
}

// A batch is decided as its checks would be one after the other: in order
// (three checks of one key against a limit of 2: the third is denied), each
// with its own reason, event and metrics; the answer carries no rate-limit
// headers, which would describe one decision of several.
func TestBatchDecidesEachCheckInOrder(t *testing.T) {
	s := newStack(t, stackOptions{rules: `
rules:
  - id: per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 2, per: 1h}]
exempt:
  tiers: [SUPER_ADMIN]
`})
	testkit.AvoidHourEnd(t)
	a, b := `{"ip":"192.0.2.1","endpoint":"/api/x"}`, `{"ip":"192.0.2.2","endpoint":"/api/x","user_id":"u-2"}`
	r := s.batch(nil, a, a, a, b, `{"ip":"192.0.2.1","endpoint":"/elsewhere"}`, `{"ip":"192.0.2.1","endpoint":"/api/x","tier":"super_admin"}`)
	if r.Status != http.StatusOK || len(r.Decisions) != 6 {
		t.Fatalf("status %d, %d decisions (%q), want 200 and 6", r.Status, len(r.Decisions), r.Error)
	}
	want := []struct {
		allowed   bool
		reason    string
		remaining int64
	}{{true, "ok", 1}, {true, "ok", 0}, {false, "rate_limited", 0}, {true, "ok", 1}, {true, "no_rule", 0}, {true, "exempt", 0}}
	ids := map[string]response{}
	for i, d := range r.Decisions {
		w := want[i]
		if d.Status != http.StatusOK || d.Allowed != w.allowed || d.Reason != w.reason || d.Remaining != w.remaining || d.EventID == "" {
			t.Errorf("decision %d: %+v, want status 200, allowed %v, reason %s, remaining %d", i, d, w.allowed, w.reason, w.remaining)
		}
		if w.reason == "rate_limited" && (d.RuleID != "per-ip" || d.RetryAfterMs <= 0 || d.Mode != "redis") {
			t.Errorf("denial %d lacks its rule, retry or mode: %+v", i, d)
		}
		ids[d.EventID] = d
	}
	if len(ids) != 6 {
		t.Fatalf("%d distinct event ids, want 6", len(ids))
	}
	if h := r.Header.Get("RateLimit"); h != "" || r.Header.Get("Retry-After") != "" {
		t.Fatalf("a batch answer carries rate-limit headers: %v", r.Header)
	}
	for _, m := range kafkatest.ReadMessages(t, s.opts.broker.Brokers(), topic, 6, 20*time.Second) {
		ev, err := event.DecodeDecision(m.Value)
		if err != nil {
			t.Fatal(err)
		}
		d, ok := ids[ev.EventID]
		if !ok || ev.Allowed != d.Allowed || ev.Reason != d.Reason || string(m.Key) != ev.IP {
			t.Errorf("event %+v (key %q) matches no decision of the batch", ev, m.Key)
		}
		if ev.IP == "192.0.2.2" && ev.UserID != "u-2" {
			t.Errorf("event of the second client lost its user: %+v", ev)
		}
		delete(ids, ev.EventID)
	}
	if got := s.metric("rate_limit_requests_total", nil); got != 6 {
		t.Fatalf("%v decisions counted, want 6", got)
	}
}

// Batches from many clients, alone and mixed with single checks, share a
// limit exactly: 20 clients × 5 batches of 9 checks + 1 single check, all
// of one key, against a limit of 100.
func TestBatchExactUnderConcurrency(t *testing.T) {
	for _, tc := range exactCases {
		t.Run(tc.algorithm, func(t *testing.T) {
			s := newStack(t, stackOptions{rules: ruleFor(tc.algorithm, tc.limits), overLimitCache: 1000})
			testkit.AvoidHourEnd(t)
			const check = `{"ip":"198.51.100.9","endpoint":"/api/books/1"}`
			checks := strings.TrimSuffix(strings.Repeat(check+",", 9), ",")
			var admitted, denied atomic.Int64
			count := func(d response) {
				switch {
				case d.Status != http.StatusOK:
					t.Errorf("status %d: %s", d.Status, d.Error)
				case d.Allowed:
					admitted.Add(1)
				case d.Reason == "rate_limited":
					denied.Add(1)
				default:
					t.Errorf("unexpected decision %+v", d)
				}
			}
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					for range 5 {
						r := s.batch(nil, checks)
						if r.Status != http.StatusOK || len(r.Decisions) != 9 {
							t.Errorf("batch: status %d, %d decisions: %s", r.Status, len(r.Decisions), r.Error)
							return
						}
						for _, d := range r.Decisions {
							count(d)
						}
						count(s.check(check))
					}
				})
			}
			wg.Wait()
			if admitted.Load() != 100 || denied.Load() != 900 {
				t.Fatalf("admitted %d, denied %d; want exactly 100 and 900", admitted.Load(), denied.Load())
			}
		})
	}
}

func TestBatchBadInput(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: ruleFor("fixed_window", "[{requests: 5, per: 1s}]")})
	ok := `{"ip":"1.2.3.4","endpoint":"/a"}`
	tests := []struct {
		name, body  string
		status      int
		errContains string
	}{
		{"empty body", ``, 400, "empty body"},
		{"no checks", `{}`, 400, "checks: required"},
		{"empty checks", `{"checks":[]}`, 400, "checks: required"},
		{"null checks", `{"checks":null}`, 400, "invalid JSON"},
		{"checks not an array", `{"checks":{}}`, 400, "invalid JSON"},
		{"checks twice", `{"checks":[` + ok + `],"checks":[` + ok + `]}`, 400, "given twice"},
		{"unknown field", `{"checks":[` + ok + `],"color":"red"}`, 400, "unknown field"},
		{"headers twice", `{"headers":true,"checks":[` + ok + `],"headers":false}`, 400, "headers: given twice"},
		{"headers not a bool", `{"headers":"yes","checks":[` + ok + `]}`, 400, "invalid JSON"},
		{"unknown field in a check", `{"checks":[` + ok + `,{"ip":"1.2.3.4","endpoint":"/a","color":"red"}]}`, 400, "checks[1]: unknown field"},
		{"invalid check", `{"checks":[` + ok + `,` + ok + `,{"ip":"999.1.1.1","endpoint":"/a"}]}`, 400, "checks[2]: ip: not an IP"},
		{"check not an object", `{"checks":[` + ok + `,7]}`, 400, "checks[1]"},
		{"trailing data", `{"checks":[` + ok + `]} {}`, 400, "unexpected data"},
		{"unterminated", `{"checks":[` + ok, 400, "invalid JSON"},
		{"too many checks", `{"checks":[` + strings.TrimSuffix(strings.Repeat(ok+",", 101), ",") + `]}`, 400, "at most 100"},
		{"oversized body", `{"checks":[{"ip":"1.2.3.4","endpoint":"/a","user_id":"` + strings.Repeat("u", 70<<10) + `"}]}`, 413, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.batchBody(nil, tt.body)
			if r.Status != tt.status || !strings.Contains(r.Error, tt.errContains) || r.Decisions != nil {
				t.Fatalf("got %d %q (%d decisions), want %d containing %q and none", r.Status, r.Error, len(r.Decisions), tt.status, tt.errContains)
			}
		})
	}
	if r := s.do(http.MethodGet, "/v1/check/batch", "", nil); r.Status != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d (Allow %q), want 405 with Allow: POST", r.Status, r.Header.Get("Allow"))
	}
	if got := s.fixed.decided.Load(); got != 0 {
		t.Fatalf("%v decisions counted from refused batches, want 0", got)
	}
	if r := s.batch(nil, ok, ok); r.Status != 200 || len(r.Decisions) != 2 || !r.Decisions[1].Allowed {
		t.Fatalf("the service keeps serving batches after bad input: %+v", r)
	}
}

// With "headers": true, each decision of a batch carries the rate-limit
// headers /v1/check sets on the same decision: the same history on a twin
// key, one check at a time, gives the same headers, policy, limit and
// remaining; the reset and Retry-After each names are its own decision's.
func TestBatchHeadersAsSingleChecks(t *testing.T) {
	s := newStack(t, stackOptions{rules: `
rules:
  - id: per-ip
    match: {endpoints: ["/api/**"]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 2, per: 1m}, {requests: 100, per: 1h}]
`})
	batched, single := `{"ip":"192.0.2.31","endpoint":"/api/x"}`, `{"ip":"192.0.2.32","endpoint":"/api/x"}`
	resp, raw := s.send(http.MethodPost, "/v1/check/batch", `{"headers":true,"checks":[`+batched+`,`+batched+`,`+batched+
		`,{"ip":"192.0.2.31","endpoint":"/elsewhere"}]}`, nil)
	var r struct {
		Decisions []struct {
			Status  int               `json:"status"`
			Allowed bool              `json:"allowed"`
			Reset   int64             `json:"reset_after_ms"`
			Retry   int64             `json:"retry_after_ms"`
			Headers map[string]string `json:"headers"`
		} `json:"decisions"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || resp.StatusCode != http.StatusOK || len(r.Decisions) != 4 {
		t.Fatalf("batch: %d %s (%v)", resp.StatusCode, raw, err)
	}
	for i, d := range r.Decisions {
		body := single
		if i == 3 {
			body = `{"ip":"192.0.2.32","endpoint":"/elsewhere"}`
		}
		one := s.check(body)
		if d.Headers == nil {
			t.Fatalf("decision %d: no headers field", i)
		}
		want := map[string]string{}
		for name, v := range one.Header {
			if strings.HasPrefix(name, "Ratelimit") || strings.HasPrefix(name, "X-Ratelimit") || name == "Retry-After" {
				want[name] = v[0]
			}
		}
		if d.Allowed != one.Allowed || len(d.Headers) != len(want) || (i < 3 && len(want) < 5) || (i == 3 && len(want) != 0) {
			t.Fatalf("decision %d: allowed %v, headers %q; the single check's: allowed %v, %q", i, d.Allowed, d.Headers, one.Allowed, want)
		}
		for name, v := range want {
			got := d.Headers[name]
			switch name { // the times left: each decision's own
			case "Ratelimit":
				v = v[:strings.LastIndexAny(v, "=")+1] + fmt.Sprint((d.Reset+999)/1000)
			case "X-Ratelimit-Reset":
				v = fmt.Sprint((d.Reset + 999) / 1000)
			case "Retry-After":
				v = fmt.Sprint(max((d.Retry+999)/1000, 1))
			}
			if got != v {
				t.Errorf("decision %d: %s %q, want %q", i, name, got, v)
			}
		}
	}
}

// With Redis not answering, each check of a batch follows its rule's
// failure policy, a deny-policy rule's check answering 503 inside the
// batch's 200; the batch's shared round trip counts once towards the
// breaker.
func TestBatchFailurePolicies(t *testing.T) {
	testkit.AvoidHourEnd(t) // the local limit counts in memory, in the hour's window
	s := deadRedisStack(t)
	local := `{"ip":"192.0.2.7","endpoint":"/local"}`
	r := s.batch(nil, local, local, local, `{"ip":"192.0.2.7","endpoint":"/allow"}`, `{"ip":"192.0.2.7","endpoint":"/deny"}`)
	if r.Status != http.StatusOK || len(r.Decisions) != 5 {
		t.Fatalf("status %d, %d decisions, want 200 and 5: %q", r.Status, len(r.Decisions), r.Error)
	}
	got := make([]string, 5)
	for i, d := range r.Decisions {
		got[i] = fmt.Sprintf("%d %v %s %s", d.Status, d.Allowed, d.Reason, d.Mode)
	}
	want := []string{"200 true ok local", "200 true ok local", "200 false rate_limited local", "200 true ok local", "503 false  "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("decisions %q, want %q", got, want)
	}
	if d := r.Decisions[4]; d.Error != denyRuleError || d.RuleID != "deny-rule" || d.OnRedisFailure != "deny" || d.EventID != "" {
		t.Fatalf("the deny-policy check: %+v", d)
	}
	if got := s.metric("rate_limit_redis_errors_total", nil); got != 1 {
		t.Fatalf("redis errors counted = %v, want 1: the batch made one round trip", got)
	}
}
