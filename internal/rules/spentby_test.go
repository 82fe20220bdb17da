package rules

import (
	"strings"
	"testing"
	"time"
)

const reportRulesYAML = `
rules:
  - id: login-failures
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [user_id]
    algorithm: fixed_window
    limits: [{requests: 5, per: 15m}]
    spent_by: report
    statuses: [401, 403]
  - id: llm-tokens
    match: {endpoints: ["/v1/chat/**"]}
    key: ["attr:api_key"]
    algorithm: sliding_window
    limits: [{requests: 100000, per: 1m}, {requests: 2000000, per: 24h}]
    spent_by: report
  - id: login-per-ip
    match: {endpoints: ["/api/login"]}
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 10, per: 1m}]
`

func TestMatchSpentByReport(t *testing.T) {
	set := mustCompile(t, reportRulesYAML)
	now := time.Now()
	login := &Request{UserID: "alice", IP: "203.0.113.7", Endpoint: "/api/login", Method: "POST", Cost: 3}
	checks := set.Match(login, now, nil)
	if len(checks) != 2 {
		t.Fatalf("check matched %d rules, want 2", len(checks))
	}
	for _, a := range checks {
		c := a.Call
		switch a.Rule.ID {
		case "login-failures": // a probe: is a unit left?
			if !c.Probe || c.Cost != 1 || c.DebitDenied {
				t.Errorf("check of login-failures: %+v, want a probe of cost 1", c)
			}
		case "login-per-ip":
			if c.Probe || c.Cost != 3 {
				t.Errorf("check of login-per-ip: %+v, want cost 3, no probe", c)
			}
		}
	}
	for _, tc := range []struct {
		status int
		want   []string
	}{{401, []string{"login-failures"}}, {403, []string{"login-failures"}}, {200, nil}, {500, nil}} {
		got := set.MatchReport(login, tc.status, now, nil)
		var ids []string
		for _, a := range got {
			ids = append(ids, a.Rule.ID)
			if c := a.Call; c.Probe || !c.DebitDenied || c.Cost != 3 {
				t.Errorf("report %d on %s: %+v, want a debit of 3 whether it fits or not", tc.status, a.Rule.ID, c)
			}
		}
		if strings.Join(ids, ",") != strings.Join(tc.want, ",") {
			t.Errorf("report %d spends %v, want %v", tc.status, ids, tc.want)
		}
	}
	chat := &Request{IP: "203.0.113.7", Endpoint: "/v1/chat/completions", Method: "POST", Cost: 1500, Attributes: map[string]string{"api_key": "k-1"}}
	if got := set.MatchReport(chat, 200, now, nil); len(got) != 1 || got[0].Rule.ID != "llm-tokens" || len(got[0].Call.Limits) != 2 {
		t.Fatalf("LLM report spends %+v, want llm-tokens with both limits", got)
	}
}

func TestValidateSpentBy(t *testing.T) {
	for _, tc := range []struct{ name, extra, want string }{
		{"unknown", "spent_by: response", `spent_by: unknown "response"`},
		{"statuses without report", "statuses: [401]", "statuses: only with spent_by: report"},
		{"bad status", "spent_by: report\n    statuses: [401, 99]", "statuses[1]: 99 is not an HTTP status"},
		{"debit admitted", "spent_by: report\n    debit: admitted", "debit: admitted contradicts spent_by: report"},
		{"penalty", "spent_by: report\n    penalty: 1m", "spent_by: report does not take penalty or escalate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(`
rules:
  - id: r
    key: [ip]
    algorithm: fixed_window
    limits: [{requests: 5, per: 1m}]
    ` + tc.extra + "\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
