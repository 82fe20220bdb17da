package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit"
)

// reserveRules is an LLM token budget priced after the response: 1000
// tokens per API key an hour, each check reserving 100 (its max_tokens)
// unless it names its own estimate; and, on the same endpoint, at most 3
// checks per address an hour, to refuse a request the budget admits.
func reserveRules(algorithm, limits, reserve string) string {
	return fmt.Sprintf(`
rules:
  - id: llm-tokens
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:api_key"]
    algorithm: %s
    limits: %s
    spent_by: report
%s
  - id: chat-per-ip
    match: {endpoints: ["/v1/chat/limited"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 3, per: 1h}]
`, algorithm, limits, reserve)
}

const (
	fixedBudget  = "[{requests: 1000, per: 1h}]"
	bucketBudget = "[{rate: 1, per: 1h, burst: 1000}]" // a token an hour: nothing refills within a test
)

// settleAnswer is a report's answer with the settle of each rule.
type settleAnswer struct {
	Rules []struct {
		RuleID    string `json:"rule_id"`
		Remaining int64  `json:"remaining"`
		Spent     bool   `json:"spent"`
		Settled   *bool  `json:"settled"`
		Reserved  int64  `json:"reserved"`
		Refunded  int64  `json:"refunded"`
	} `json:"rules"`
}

func (s *stack) settle(body string) settleAnswer {
	s.t.Helper()
	resp, raw := s.send(http.MethodPost, "/v1/report", body, nil)
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("report answered %d %q", resp.StatusCode, raw)
	}
	var a settleAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		s.t.Fatalf("undecodable report answer %q: %v", raw, err)
	}
	if len(a.Rules) != 1 || a.Rules[0].RuleID != "llm-tokens" {
		s.t.Fatalf("report answer %q: want the rule llm-tokens alone", raw)
	}
	return a
}

func chatCheck(key, extra string) string {
	return `{"ip":"203.0.113.7","endpoint":"/v1/chat/completions","attributes":{"api_key":"` + key + `"}` + extra + `}`
}

func chatReport(key, hold string, cost int64) string {
	h := ""
	if hold != "" {
		h = `,"hold":"` + hold + `"`
	}
	return fmt.Sprintf(`{"ip":"203.0.113.7","endpoint":"/v1/chat/completions","attributes":{"api_key":%q},"status":200,"cost":%d%s}`, key, cost, h)
}

// left returns what the key has left of its budget, read by a report of
// cost 0 naming no reservation (which debits nothing).
func (s *stack) left(key string) int64 {
	s.t.Helper()
	return s.settle(chatReport(key, "", 0)).Rules[0].Remaining
}

// 50 requests at once against a budget of 10 requests' worth: probed, all
// 50 pass; reserving each request's estimate, exactly 10 do, each with the
// id its report settles.
func TestReserveFiftyParallel(t *testing.T) {
	for _, tc := range []struct{ algorithm, limits string }{{"fixed_window", fixedBudget}, {"token_bucket", bucketBudget}} {
		t.Run(tc.algorithm, func(t *testing.T) {
			testkit.AvoidHourEnd(t)
			probed := newStack(t, stackOptions{rules: reserveRules(tc.algorithm, tc.limits, "")})
			if got, _ := fiftyAtOnce(t, probed); got != 50 {
				t.Fatalf("without reserve: %d of 50 admitted, want all 50 (the budget is only probed)", got)
			}
			s := newStack(t, stackOptions{rules: reserveRules(tc.algorithm, tc.limits, "    reserve: 100"), overLimitCache: 1000})
			admitted, holds := fiftyAtOnce(t, s)
			if admitted != 10 || len(holds) != 10 {
				t.Fatalf("with reserve: %d of 50 admitted (%d holds), want exactly 10", admitted, len(holds))
			}
			if left := s.left("k-50"); left != 0 {
				t.Fatalf("after 10 reservations of 100: %d left, want 0", left)
			}
			for _, h := range holds {
				if a := s.settle(chatReport("k-50", h, 100)); !*a.Rules[0].Settled || a.Rules[0].Reserved != 100 || a.Rules[0].Refunded != 0 {
					t.Fatalf("report of the estimate: %+v", a)
				}
			}
			if left := s.left("k-50"); left != 0 {
				t.Fatalf("after 10 reports of 100: %d left, want 0", left)
			}
		})
	}
}

// fiftyAtOnce sends 50 checks of key k-50 at once and returns how many
// were admitted and the holds they answered.
func fiftyAtOnce(t *testing.T, s *stack) (int, []string) {
	t.Helper()
	var mu sync.Mutex
	var admitted int
	var holds []string
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			code, a := s.holdPost("/v1/check", chatCheck("k-50", ""))
			if code != http.StatusOK {
				t.Errorf("check answered %d", code)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if a.Allowed {
				admitted++
				if a.Hold != nil {
					holds = append(holds, *a.Hold)
				}
			}
		})
	}
	wg.Wait()
	return admitted, holds
}

// A report settles its reservation: a cost below the estimate gives the
// difference back, one above it debits the excess; a check's own estimate
// replaces the rule's; a replayed report, and a report naming the id on
// another key, settle nothing.
func TestReserveSettles(t *testing.T) {
	for _, tc := range []struct{ algorithm, limits string }{{"fixed_window", fixedBudget}, {"token_bucket", bucketBudget}} {
		t.Run(tc.algorithm, func(t *testing.T) {
			testkit.AvoidHourEnd(t)
			s := newStack(t, stackOptions{rules: reserveRules(tc.algorithm, tc.limits, "    reserve: 100")})
			hold := s.take(chatCheck("k-1", ""))
			if left := s.left("k-1"); left != 900 {
				t.Fatalf("after a reservation of 100: %d left, want 900", left)
			}
			a := s.settle(chatReport("k-1", hold, 30))
			if r := a.Rules[0]; !*r.Settled || r.Reserved != 100 || r.Refunded != 70 || r.Remaining != 970 {
				t.Fatalf("report of 30 for a reservation of 100: %+v, want 70 back, 970 left", r)
			}
			if r := s.settle(chatReport("k-1", hold, 30)).Rules[0]; *r.Settled || r.Remaining != 970 {
				t.Fatalf("replayed report: %+v, want nothing settled, 970 left", r)
			}

			own := s.take(chatCheck("k-1", `,"reserve":500`))
			if left := s.left("k-1"); left != 470 {
				t.Fatalf("after a check's own estimate of 500: %d left, want 470", left)
			}
			if r := s.settle(chatReport("k-2", own, 0)).Rules[0]; *r.Settled || r.Remaining != 1000 {
				t.Fatalf("the id reported on another key: %+v, want nothing settled there", r)
			}
			if r := s.settle(chatReport("k-1", own, 600)).Rules[0]; !*r.Settled || r.Reserved != 500 || r.Refunded != 0 || r.Remaining != 370 {
				t.Fatalf("report of 600 for a reservation of 500: %+v, want 100 more debited, 370 left", r)
			}
			if r := s.settle(chatReport("k-1", decide.NewHoldID(), 5)).Rules[0]; *r.Settled || r.Remaining != 370 {
				t.Fatalf("a report naming an id never taken: %+v, want nothing settled or debited", r)
			}
			if r := s.settle(chatReport("k-1", "", 70)).Rules[0]; r.Settled != nil || r.Remaining != 300 {
				t.Fatalf("a report naming no id: %+v, want its cost debited as before reservations", r)
			}
			if r := s.check(chatCheck("k-1", `,"reserve":301`)); r.Allowed || r.RuleID != "llm-tokens" {
				t.Fatalf("an estimate above what is left: %+v, want refused", r)
			}
			if left := s.left("k-1"); left != 300 {
				t.Fatalf("after a refused estimate: %d left, want 300", left)
			}
		})
	}
}

// take checks body, which must be admitted with a hold, and returns it.
func (s *stack) take(body string) string {
	s.t.Helper()
	code, a := s.holdPost("/v1/check", body)
	if code != http.StatusOK || !a.Allowed || a.Hold == nil {
		s.t.Fatalf("check %s: %d, allowed %v, hold %v", body, code, a.Allowed, a.Hold)
	}
	return *a.Hold
}

// A request refused by another rule takes no reservation: its estimate
// goes back at once, and it answers no id.
func TestReserveRefusedRequestTakesNone(t *testing.T) {
	testkit.AvoidHourEnd(t)
	s := newStack(t, stackOptions{rules: reserveRules("fixed_window", fixedBudget, "    reserve: 100")})
	limited := `{"ip":"203.0.113.7","endpoint":"/v1/chat/limited","attributes":{"api_key":"k-r"}}`
	for range 3 {
		s.take(limited)
	}
	code, a := s.holdPost("/v1/check", limited)
	if code != http.StatusOK || a.Allowed || a.RuleID != "chat-per-ip" || a.Hold != nil {
		t.Fatalf("fourth check: %d, allowed %v, rule %q, hold %v; want refused by chat-per-ip without a hold", code, a.Allowed, a.RuleID, a.Hold)
	}
	if left := s.left("k-r"); left != 700 {
		t.Fatalf("after 3 admitted and 1 refused: %d left, want 700", left)
	}
}

// A check's estimate is bounded; a report carries no estimate.
func TestReserveInput(t *testing.T) {
	s := newFixedStack(t, stackOptions{rules: reserveRules("fixed_window", fixedBudget, "    reserve: 100")})
	for _, tc := range []struct{ name, path, body, want string }{
		{"negative", "/v1/check", chatCheck("k", `,"reserve":-1`), "reserve: must be between 1 and 1000000"},
		{"too large", "/v1/check", chatCheck("k", `,"reserve":1000001`), "reserve: must be between"},
		{"not an integer", "/v1/check", chatCheck("k", `,"reserve":1.5`), "reserve"},
		{"in a batch", "/v1/check/batch", `{"checks":[` + chatCheck("k", `,"reserve":-1`) + `]}`, "checks[0]: reserve"},
		{"in a report", "/v1/report", strings.Replace(chatReport("k", "", 1), `"status"`, `"reserve":5,"status"`, 1), "reserve: a check's estimate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := s.do(http.MethodPost, tc.path, tc.body, nil)
			if r.Status != http.StatusBadRequest || !strings.Contains(r.Error, tc.want) {
				t.Fatalf("answered %d %q, want 400 with %q", r.Status, r.Error, tc.want)
			}
		})
	}
}

// The checks of a batch reserve one after the other, each admitted one
// with an id of its own; a batch of reports settles each.
func TestReserveInBatches(t *testing.T) {
	testkit.AvoidHourEnd(t)
	s := newStack(t, stackOptions{rules: reserveRules("fixed_window", fixedBudget, "    reserve: 100")})
	check := chatCheck("k-b", `,"reserve":300`)
	resp, raw := s.send(http.MethodPost, "/v1/check/batch", `{"checks":[`+strings.Repeat(check+",", 3)+check+`]}`, nil)
	var a struct {
		Decisions []struct {
			Allowed bool    `json:"allowed"`
			Hold    *string `json:"hold"`
		} `json:"decisions"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &a) != nil || len(a.Decisions) != 4 {
		t.Fatalf("batch answered %d %s", resp.StatusCode, raw)
	}
	var reports []string
	for i, d := range a.Decisions[:3] {
		if !d.Allowed || d.Hold == nil {
			t.Fatalf("check %d of 3 × 300 in 1000: %s", i, raw)
		}
		reports = append(reports, chatReport("k-b", *d.Hold, 100))
	}
	if last := a.Decisions[3]; last.Allowed || last.Hold != nil {
		t.Fatalf("a fourth 300 in 1000: %s", raw)
	}
	resp, raw = s.send(http.MethodPost, "/v1/report/batch", `{"reports":[`+strings.Join(reports, ",")+`]}`, nil)
	if resp.StatusCode != http.StatusOK || strings.Count(string(raw), `"settled":true,"reserved":300,"refunded":200`) != 3 {
		t.Fatalf("report batch answered %d %s", resp.StatusCode, raw)
	}
	if left := s.left("k-b"); left != 700 {
		t.Fatalf("after 3 reservations of 300 settled at 100: %d left, want 700", left)
	}
}

// A forward-auth gateway reserves the rule's estimate with each /v1/auth
// check, gets the id in X-RateLimit-Hold, and settles it with the cost of
// its report to /v1/report/auth.
func TestReserveOverForwardAuth(t *testing.T) {
	testkit.AvoidHourEnd(t)
	s := newStack(t, stackOptions{rules: `
rules:
  - id: llm-tokens
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:tenant"]
    algorithm: fixed_window
    limits: [{requests: 1000, per: 1h}]
    spent_by: report
    reserve: 100
`})
	subject := map[string]string{"X-Forwarded-Uri": "/v1/chat/completions", "X-Forwarded-Method": "POST", "X-Attr-Tenant": "t-1"}
	var holds []string
	for range 10 {
		resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject)
		hold := resp.Header.Get("X-RateLimit-Hold")
		if resp.StatusCode != http.StatusOK || !decide.ValidHoldID(hold) {
			t.Fatalf("admitted auth check: %d, hold %q", resp.StatusCode, hold)
		}
		holds = append(holds, hold)
	}
	if resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-RateLimit-Hold") != "" {
		t.Fatalf("an eleventh estimate of 100 in 1000: %d, hold %q", resp.StatusCode, resp.Header.Get("X-RateLimit-Hold"))
	}
	report := map[string]string{"X-RateLimit-Status": "200", "X-RateLimit-Cost": "30", "X-RateLimit-Hold": holds[0]}
	for k, v := range subject {
		report[k] = v
	}
	resp, raw := s.send(http.MethodPost, "/v1/report/auth", "", report)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), `"remaining":70,"reset_after_ms"`) ||
		!strings.Contains(string(raw), `"settled":true,"reserved":100,"refunded":70`) {
		t.Fatalf("report of 30: %d %s", resp.StatusCode, raw)
	}
	if resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("an estimate of 100 with 70 left: %d, want 429", resp.StatusCode)
	}
	report["X-RateLimit-Cost"], report["X-RateLimit-Hold"] = "0", holds[1]
	if _, raw := s.send(http.MethodPost, "/v1/report/auth", "", report); !strings.Contains(string(raw), `"remaining":170,"reset_after_ms"`) {
		t.Fatalf("report of 0: %s, want its 100 back", raw)
	}
	if resp, _ := s.send(http.MethodGet, "/v1/auth", "", subject); resp.StatusCode != http.StatusOK {
		t.Fatalf("an estimate of 100 with 170 left: %d", resp.StatusCode)
	}
}
