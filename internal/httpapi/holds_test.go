package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// The worked example of docs/rules.md: 5 exports in flight per customer.
const holdRules = `
rules:
  - id: exports
    match: {endpoints: ["/api/exports/**"], methods: [POST]}
    key: ["attr:customer"]
    algorithm: concurrency
    limits: [{concurrent: 5, hold: 10m}]
`

// holdAnswer is a /v1/check answer with its hold, or a report's with its
// rules' releases.
type holdAnswer struct {
	Allowed bool   `json:"allowed"`
	RuleID  string `json:"rule_id"`
	EventID string `json:"event_id"`
	Hold    *string
	Rules   []struct {
		RuleID   string `json:"rule_id"`
		Released *bool  `json:"released"`
	} `json:"rules"`
	Reports []json.RawMessage `json:"reports"`
}

func (s *stack) holdPost(path, body string) (int, holdAnswer) {
	s.t.Helper()
	resp, raw := s.send(http.MethodPost, path, body, nil)
	var a struct {
		holdAnswer
		Hold *string `json:"hold"`
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &a); err != nil {
			s.t.Fatalf("undecodable answer %q: %v", raw, err)
		}
	}
	a.holdAnswer.Hold = a.Hold
	return resp.StatusCode, a.holdAnswer
}

const exportCheck = `{"ip":"203.0.113.7","endpoint":"/api/exports/1","method":"POST","attributes":{"customer":"c-1"}}`

func exportReport(hold string) string {
	return `{"ip":"203.0.113.7","endpoint":"/api/exports/1","method":"POST","attributes":{"customer":"c-1"},"status":200,"hold":"` + hold + `"}`
}

// An admitted check answers its hold; a refused one answers none; the
// report naming the hold releases it and says so; a replay releases
// nothing. The decision and outcome events carry the hold.
func TestHoldsOverHTTP(t *testing.T) {
	s := newStack(t, stackOptions{rules: holdRules, overLimitCache: 1000})
	var holds []string
	for range 5 {
		_, a := s.holdPost("/v1/check", exportCheck)
		if !a.Allowed || a.Hold == nil || !decide.ValidHoldID(*a.Hold) {
			t.Fatalf("admitted check: allowed %v, hold %v", a.Allowed, a.Hold)
		}
		holds = append(holds, *a.Hold)
	}
	_, refused := s.holdPost("/v1/check", exportCheck)
	if refused.Allowed || refused.RuleID != "exports" || refused.Hold != nil {
		t.Fatalf("sixth check: allowed %v, rule %q, hold %v", refused.Allowed, refused.RuleID, refused.Hold)
	}
	if _, other := s.holdPost("/v1/check", `{"ip":"203.0.113.7","endpoint":"/api/books/1"}`); other.Hold != nil {
		t.Fatalf("a check no concurrency rule applies to answered hold %q", *other.Hold)
	}

	status, r := s.holdPost("/v1/report", exportReport(holds[0]))
	if status != http.StatusOK || len(r.Rules) != 1 || r.Rules[0].RuleID != "exports" || r.Rules[0].Released == nil || !*r.Rules[0].Released {
		t.Fatalf("report of a held id: %d %+v", status, r)
	}
	if _, r := s.holdPost("/v1/report", exportReport(holds[0])); len(r.Rules) != 1 || *r.Rules[0].Released {
		t.Fatalf("replayed report: %+v, want released false", r)
	}
	if _, a := s.holdPost("/v1/check", exportCheck); !a.Allowed {
		t.Fatal("the released slot is still taken")
	}
	if _, r := s.holdPost("/v1/report", `{"ip":"203.0.113.7","endpoint":"/api/exports/1","status":200}`); len(r.Rules) != 0 {
		t.Fatalf("a report without hold touched %+v", r.Rules)
	}

	// The batch form releases each report's hold.
	status, b := s.holdPost("/v1/report/batch", `{"reports":[`+exportReport(holds[1])+`,`+exportReport(holds[2])+`]}`)
	if status != http.StatusOK || len(b.Reports) != 2 {
		t.Fatalf("batch: %d %+v", status, b)
	}
	for i, raw := range b.Reports {
		if !strings.Contains(string(raw), `"released":true`) {
			t.Errorf("batch report %d: %s", i, raw)
		}
	}
	if got := s.metric("rate_limit_holds_total", map[string]string{"rule": "exports", "result": "released"}); got != 3 {
		t.Errorf("released %v, want 3", got)
	}
	if got := s.metric("rate_limit_holds_total", map[string]string{"rule": "exports", "result": "unknown"}); got != 1 {
		t.Errorf("unknown %v, want 1", got)
	}

	decisions := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), topic, 8, 20*time.Second)
	held := 0
	for _, m := range decisions {
		if strings.Contains(string(m.Value), `"hold":"`+holds[0]+`"`) {
			held++
		}
	}
	if held != 1 {
		t.Errorf("%d decision events carry the first hold, want 1", held)
	}
	outcomes := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), outcomesTopic, 5, 20*time.Second)
	if !strings.Contains(string(outcomes[0].Value), `"hold":"`+holds[0]+`"`) {
		t.Errorf("the first outcome event lacks its hold: %s", outcomes[0].Value)
	}
}

// A hold that is not one a check answers is refused with 400, in a report
// and in a batch; a check takes no hold field.
func TestHoldInput(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: holdRules})
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/report", exportReport("short"), "hold: not a hold id"},
		{"/v1/report", exportReport(strings.Repeat("A", 21) + "B"), "hold: not a hold id"}, // unused bits set
		{"/v1/report", exportReport(strings.Repeat("*", 22)), "hold: not a hold id"},
		{"/v1/report", `{"ip":"203.0.113.7","endpoint":"/a","status":200,"hold":5}`, "hold"},
		{"/v1/report/batch", `{"reports":[` + exportReport("x") + `]}`, "reports[0]: hold: not a hold id"},
		{"/v1/check", `{"ip":"203.0.113.7","endpoint":"/a","hold":"` + decide.NewHoldID() + `"}`, "unknown field"},
	} {
		r := s.do(http.MethodPost, tc.path, tc.body, nil)
		if r.Status != http.StatusBadRequest || !strings.Contains(r.Error, tc.want) {
			t.Errorf("%s %s: answered %d %q, want 400 with %q", tc.path, tc.body, r.Status, r.Error, tc.want)
		}
	}
	for _, body := range []string{exportReport(decide.NewHoldID()), `{"ip":"203.0.113.7","endpoint":"/a","status":200,"hold":null}`} {
		if r := s.do(http.MethodPost, "/v1/report", body, nil); r.Status != http.StatusOK {
			t.Errorf("%s: answered %d %q", body, r.Status, r.Error)
		}
	}
}

// Each admitted check of a batch answers a hold of its own; the check
// refused for want of a slot answers none.
func TestHoldsInCheckBatch(t *testing.T) {
	s := newStack(t, stackOptions{rules: holdRules})
	check := `{"ip":"203.0.113.7","endpoint":"/api/exports/1","method":"POST","attributes":{"customer":"c-9"}}`
	body := `{"checks":[` + strings.Repeat(check+",", 5) + check + `]}`
	resp, raw := s.send(http.MethodPost, "/v1/check/batch", body, nil)
	var a struct {
		Decisions []struct {
			Allowed bool    `json:"allowed"`
			Hold    *string `json:"hold"`
		} `json:"decisions"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &a) != nil || len(a.Decisions) != 6 {
		t.Fatalf("batch answered %d %s", resp.StatusCode, raw)
	}
	seen := map[string]bool{}
	for i, d := range a.Decisions[:5] {
		if !d.Allowed || d.Hold == nil || seen[*d.Hold] {
			t.Fatalf("check %d: %s", i, raw)
		}
		seen[*d.Hold] = true
	}
	if last := a.Decisions[5]; last.Allowed || last.Hold != nil {
		t.Fatalf("sixth check: %s", raw)
	}
}

// A forward-auth gateway gets the hold in X-RateLimit-Hold and releases it
// with an outcome report to /v1/report/auth, its subject from the same
// headers as the check (nginx's post_action sends no body). A check to
// /v1/auth carrying the report's headers (a client's, forwarded by a
// gateway) is still a check: it releases nothing.
func TestHoldsOverForwardAuth(t *testing.T) {
	s := newStack(t, stackOptions{rules: holdRules, overLimitCache: 1000})
	subject := map[string]string{"X-Forwarded-Uri": "/api/exports/1", "X-Forwarded-Method": "POST", "X-Attr-Customer": "c-1"}
	with := func(extra ...string) map[string]string {
		h := map[string]string{}
		for k, v := range subject {
			h[k] = v
		}
		for i := 0; i < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	var holds []string
	for range 5 {
		resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject)
		hold := resp.Header.Get("X-RateLimit-Hold")
		if resp.StatusCode != http.StatusOK || !decide.ValidHoldID(hold) {
			t.Fatalf("admitted auth check: %d, hold %q", resp.StatusCode, hold)
		}
		holds = append(holds, hold)
	}
	// A client's own report headers, forwarded with its request: a check.
	resp, _ := s.send(http.MethodGet, "/v1/auth", "", with("X-RateLimit-Status", "200", "X-RateLimit-Hold", holds[0]))
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-RateLimit-Hold") != "" {
		t.Fatalf("sixth auth check: %d, hold %q; want 429 and no hold", resp.StatusCode, resp.Header.Get("X-RateLimit-Hold"))
	}

	resp, raw := s.send(http.MethodPost, "/v1/report/auth", "", with("X-RateLimit-Status", "200", "X-RateLimit-Hold", holds[0]))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"rule_id":"exports"`) || !strings.Contains(string(raw), `"released":true`) {
		t.Fatalf("report of a held id: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject); resp.StatusCode != http.StatusOK {
		t.Fatalf("the released slot is still taken: %d", resp.StatusCode)
	}
	if _, raw := s.send(http.MethodPost, "/v1/report/auth", "", with("X-RateLimit-Status", "200", "X-RateLimit-Hold", holds[0])); !strings.Contains(string(raw), `"released":false`) {
		t.Fatalf("replayed report: %s, want released false", raw)
	}
	// Without X-RateLimit-Status the report only releases the hold.
	if _, raw := s.send(http.MethodPost, "/v1/report/auth", "", with("X-RateLimit-Hold", holds[2])); !strings.Contains(string(raw), `"released":true`) ||
		strings.Contains(string(raw), "event_id") {
		t.Fatalf("release-only report: %s, want released and no event", raw)
	}
	// Another customer's report cannot free c-1's slots.
	other := with("X-RateLimit-Status", "200", "X-RateLimit-Hold", holds[1], "X-Attr-Customer", "c-2")
	if _, raw := s.send(http.MethodPost, "/v1/report/auth", "", other); !strings.Contains(string(raw), `"released":false`) {
		t.Fatalf("another key's report: %s, want released false", raw)
	}

	for _, tc := range []struct {
		method string
		header map[string]string
		status int
		want   string
	}{
		{http.MethodGet, with("X-RateLimit-Status", "200"), http.StatusMethodNotAllowed, "use POST"},
		{http.MethodPost, subject, http.StatusBadRequest, "X-RateLimit-Status: required"},
		{http.MethodPost, with("X-RateLimit-Status", "99"), http.StatusBadRequest, "X-RateLimit-Status: required"},
		{http.MethodPost, with("X-RateLimit-Status", "200", "X-RateLimit-Hold", "short"), http.StatusBadRequest, "X-RateLimit-Hold: not a hold id"},
		{http.MethodPost, with("X-RateLimit-Status", "200", "X-RateLimit-Cost", "-1"), http.StatusBadRequest, "X-RateLimit-Cost: must be"},
		{http.MethodPost, map[string]string{"X-RateLimit-Status": "200"}, http.StatusBadRequest, "endpoint"},
	} {
		resp, raw := s.send(tc.method, "/v1/report/auth", "", tc.header)
		if resp.StatusCode != tc.status || !strings.Contains(string(raw), tc.want) {
			t.Errorf("%s %v: %d %s, want %d with %q", tc.method, tc.header, resp.StatusCode, raw, tc.status, tc.want)
		}
	}
}

// A report without status only releases its hold: the application
// declined to report an outcome, so none is published and no budget is
// spent. Without status or hold, a report is refused.
func TestReleaseOnlyReport(t *testing.T) {
	s := newStack(t, stackOptions{rules: holdRules, overLimitCache: 1000})
	_, first := s.holdPost("/v1/check", exportCheck)
	if first.Hold == nil {
		t.Fatal("no hold")
	}
	release := `{"ip":"203.0.113.7","endpoint":"/api/exports/1","method":"POST","attributes":{"customer":"c-1"},"hold":"` + *first.Hold + `"}`
	resp, raw := s.send(http.MethodPost, "/v1/report", release, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"released":true`) || strings.Contains(string(raw), "event_id") {
		t.Fatalf("release-only report: %d %s, want released and no event", resp.StatusCode, raw)
	}
	// The outcome topic's first message is the next, full report's: the
	// release published none (same address, same partition, in order).
	_, second := s.holdPost("/v1/check", exportCheck)
	if status, _ := s.holdPost("/v1/report", exportReport(*second.Hold)); status != http.StatusOK {
		t.Fatalf("report: %d", status)
	}
	outcomes := kafkatest.ReadMessages(t, s.opts.broker.Brokers(), outcomesTopic, 1, 20*time.Second)
	if !strings.Contains(string(outcomes[0].Value), *second.Hold) {
		t.Errorf("first outcome event %s, want the full report's (hold %s): the release-only report published one", outcomes[0].Value, *second.Hold)
	}
	if got := s.metric("rate_limit_holds_total", map[string]string{"rule": "exports", "result": "released"}); got != 2 {
		t.Errorf("released %v, want 2", got)
	}
	resp, raw = s.send(http.MethodPost, "/v1/report", `{"ip":"203.0.113.7","endpoint":"/api/exports/1"}`, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "unless the report only releases a hold") {
		t.Errorf("a report without status or hold: %d %s", resp.StatusCode, raw)
	}
}

// Below /v1/auth/ the path is the client's (Envoy's ext_authz
// path_prefix), which Envoy's normalize_path leaves with its escaped
// slashes: "/..%2freport" asks for /v1/auth/..%2freport. Decoded and
// cleaned, that is /v1/report; such a path is a forward-auth check all
// the same, never another route of the port: a client must not turn its
// check into a report (releasing a hold, spending budgets of a subject
// its body names) or into a check of a subject of its choosing.
func TestAuthPathStaysAuth(t *testing.T) {
	s := newStack(t, stackOptions{rules: holdRules})
	var holds []string
	for range 5 {
		code, a := s.holdPost("/v1/check", exportCheck)
		if code != http.StatusOK || a.Hold == nil {
			t.Fatalf("admitted check: %d %+v", code, a)
		}
		holds = append(holds, *a.Hold)
	}
	for _, path := range []string{
		"/v1/auth/..%2freport",
		"/v1/auth/..%2Freport",
		"/v1/auth/%2e%2e%2freport",
		"/v1/auth/api/..%2f..%2freport",
		"/v1/auth/..%2freport/batch",
		"/v1/auth/..%2fcheck",
		"/v1/auth/..%2fcheck/batch",
	} {
		body := exportReport(holds[0])
		if strings.HasSuffix(path, "batch") {
			body = `{"reports":[` + body + `]}`
		}
		resp, raw := s.send(http.MethodPost, path, body, nil)
		var a struct {
			Reason *string         `json:"reason"`
			Rules  json.RawMessage `json:"rules"`
		}
		_ = json.Unmarshal(raw, &a)
		if resp.StatusCode != http.StatusOK || a.Reason == nil || a.Rules != nil {
			t.Errorf("POST %s: %d %s; want a forward-auth check's answer", path, resp.StatusCode, raw)
		}
	}
	// A decision route's own path is still served cleaned (a client whose
	// base URL ends in a slash).
	if code, a := s.holdPost("/v1//check", exportCheck); code != http.StatusOK || a.Allowed || a.RuleID != "exports" {
		t.Fatalf("sixth check: %d %+v; want refused by exports, every slot still held", code, a)
	}
}
