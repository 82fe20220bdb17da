package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// Failures priced per address and per account, and brute force at 20
// failures of one address.
const accountStateRules = `
rules:
  - id: failures-per-ip
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 100, per: 15m}]
    spent_by: report
    statuses: [401, 403]
  - id: failures-per-user
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [user_id]
    algorithm: sliding_window
    limits: [{requests: 5, per: 15m}]
    spent_by: report
    statuses: [401, 403]
detection:
  brute_force: {failures: 20, within: 5m, duration: 1h}
  account_attack: {distinct_sources: 10, within: 10m, duration: 1h}
`

// A locked account does not hide its attackers: once carol is locked (a
// user ban), an address that sends 30 failed logins on her still spends its
// per-address failure budget (not carol's, which her lock freezes) and is
// banned for brute force (20), whether its failures come as reports or as
// lines of a gateway's access log. A banned address's failures still count
// nothing: they are its ban's own refusals.
func TestLockedAccountDoesNotHideItsAttackers(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, accountStateRules)
	if err := e.broker.Cluster().CreateTopic(accessLogTopic, 3, nil); err != nil {
		t.Fatal(err)
	}
	limiter := e.start("limiter")
	detector := e.start("detector", "ACCESS_LOG_TOPIC", accessLogTopic)
	const reporter, logged, banned = "198.51.100.30", "198.51.100.31", "198.51.100.32"
	for _, ban := range []string{`{"scope":"user","subject":"carol","duration":"1h","reason":"locked"}`,
		`{"scope":"ip","subject":"` + banned + `","duration":"1h","reason":"incident"}`} {
		if code, body := admin(t, limiter, http.MethodPost, "/v1/admin/bans", adminToken, ban); code != http.StatusCreated {
			t.Fatalf("ban %s: %d %s", ban, code, body)
		}
	}
	if d := checkLogin(t, limiter, reporter, "carol"); d.Reason != event.ReasonBanned {
		t.Fatalf("carol is not locked: %+v", d)
	}
	failure := func(ip string) string {
		return `{"ip":"` + ip + `","endpoint":"/api/login","method":"POST","user_id":"carol","status":401}`
	}
	for i := range 30 {
		a := postReport(t, limiter, failure(reporter))
		if len(a.Rules) != 1 || a.Rules[0].RuleID != "failures-per-ip" || a.Rules[0].Remaining != int64(99-i) {
			t.Fatalf("failure %d on locked carol debited %+v, want failures-per-ip alone with %d left", i+1, a.Rules, 99-i)
		}
		if a := postReport(t, limiter, failure(banned)); len(a.Rules) != 0 {
			t.Fatalf("a banned address's failure debited %+v", a.Rules)
		}
	}
	lines := make([][]byte, 0, 60)
	for range 30 {
		for _, ip := range []string{logged, banned} {
			lines = append(lines, fmt.Appendf(nil, `{"remote_addr":%q,"upstream_http_x_user_id":"carol","request_uri":"/api/login",`+
				`"request_method":"POST","status":"401","msec":"%.3f"}`, ip, float64(time.Now().UnixMilli())/1000))
		}
	}
	produce(t, e, accessLogTopic, lines...)

	// The two manual bans, and a brute-force ban of each attacker.
	bruteForced := map[string]bool{}
	for _, b := range bans(t, e, 4) {
		switch {
		case b.Reason == "manual":
		case b.Action == event.ActionBan && b.Scope == event.ScopeIP && b.Reason == abuse.ReasonBruteForce:
			bruteForced[b.Subject] = true
		default:
			t.Fatalf("unexpected ban %+v", b)
		}
	}
	if !bruteForced[reporter] || !bruteForced[logged] {
		t.Fatalf("brute-force bans of %v, want %s (reports) and %s (access log)", bruteForced, reporter, logged)
	}
	testkit.WaitFor(t, 20*time.Second, "the detector to skip the banned address's 60 failures", func() bool {
		return detector.metric(t, "rate_limit_detector_skipped_events_total", `source="outcomes"`)+
			detector.metric(t, "rate_limit_detector_skipped_events_total", `source="access_log"`) >= 60
	})
	if n := detector.metric(t, "rate_limit_detector_held_account_outcomes_total"); n < 60 {
		t.Errorf("%v failures on a held account counted, want 60", n)
	}
	time.Sleep(2 * time.Second)
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != 4 {
		t.Fatalf("%d messages on the ban topic, want 4: nothing for the banned address, no account attack", n)
	}
}
