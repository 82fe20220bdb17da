package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/loginsim"
	"github.com/ratewarden/ratewarden/internal/testkit/kafkatest"
)

// The rules of the outcome demo: attempts per address, failures per
// address and account (so that nobody can lock another user out), and
// detection of stuffing and of attacks on one account from failures.
const loginRulesYAML = `
rules:
  - id: login-per-ip
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip]
    algorithm: sliding_window
    limits: [{requests: 10, per: 1s}, {requests: 60, per: 1m}]
  - id: login-failures
    match: {endpoints: ["/api/login"], methods: [POST]}
    key: [ip, user_id]
    algorithm: sliding_window
    limits: [{requests: 5, per: 15m}]
    spent_by: report
    statuses: [401, 403]
detection:
  credential_stuffing: {distinct_users: 2, within: 10m, duration: 1h}
  account_attack: {distinct_sources: 10, within: 10m, duration: 1h}
`

// The demo's scenario against the real binaries: a botnet of 200
// addresses, 3 failed logins each on users of their own, every one under
// the per-address limits, is banned address by address for credential
// stuffing; 30 addresses failing on one account are banned for attacking
// it, and the account is named in an alert but never banned; 50 normal
// users with an occasional typo are never banned.
func TestCredentialStuffingAndAccountAttack(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, loginRulesYAML)
	detector := e.start("detector")
	limiter := e.start("limiter")
	cfg := loginsim.DefaultConfig()
	attempts := loginsim.Scenario(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tallies, err := loginsim.Play(ctx, loginsim.Target{URL: "http://" + limiter.addr}, attempts, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := tallies[loginsim.ActorNormal]; n.RateLimited+n.Banned != 0 {
		t.Fatalf("normal users refused: %+v", n)
	}
	want := cfg.Bots + cfg.AttackSources + 1 // the bans and the alert
	var stuffers, attackers []string
	var alerts []event.Ban
	for _, b := range bans(t, e, want) {
		switch {
		case b.Action == event.ActionBan && b.Scope == event.ScopeIP && b.Reason == abuse.ReasonCredentialStuffing:
			stuffers = append(stuffers, b.Subject)
			if b.Count != 3 || len(b.Evidence.SampleUsers) == 0 {
				t.Errorf("stuffing ban without its evidence: %+v", b)
			}
		case b.Action == event.ActionBan && b.Scope == event.ScopeIP && b.Reason == abuse.ReasonAccountAttack:
			attackers = append(attackers, b.Subject)
		case b.Action == event.ActionWarn && b.Scope == event.ScopeUser && b.Reason == abuse.ReasonAccountAttack:
			alerts = append(alerts, b)
		default:
			t.Errorf("unexpected ban %+v", b)
		}
	}
	slices.Sort(stuffers)
	slices.Sort(attackers)
	for b := range cfg.Bots {
		if _, ok := slices.BinarySearch(stuffers, loginsim.BotIP(b)); !ok {
			t.Errorf("bot %s not banned", loginsim.BotIP(b))
		}
	}
	for s := range cfg.AttackSources {
		if _, ok := slices.BinarySearch(attackers, loginsim.AttackIP(s)); !ok {
			t.Errorf("attack source %s not banned", loginsim.AttackIP(s))
		}
	}
	if len(alerts) != 1 || alerts[0].Subject != cfg.Victim || len(alerts[0].Evidence.SampleSources) == 0 {
		t.Fatalf("alerts %+v, want one naming %s with its sources", alerts, cfg.Victim)
	}
	// Nothing more: no normal user, no account.
	time.Sleep(2 * time.Second)
	if n := kafkatest.CountMessages(t, e.broker.Brokers(), bansTopic); n != int64(want) {
		t.Fatalf("%d messages on the ban topic, want %d", n, want)
	}
	// Every limiter enforces them: a bot is refused as banned, the victim
	// logs in from an address of its own.
	waitFor(t, 10*time.Second, "the limiter to enforce the bans", func() bool {
		return checkLogin(t, limiter, loginsim.BotIP(0), "someone").Reason == event.ReasonBanned
	})
	if d := checkLogin(t, limiter, "100.99.0.1", cfg.Victim); !d.Allowed {
		t.Fatalf("the victim is refused: %+v", d)
	}
	if detector.metric(t, "rate_limit_detector_outcomes_total") < float64(len(attempts))/2 {
		t.Errorf("the detector consumed %v outcomes", detector.metric(t, "rate_limit_detector_outcomes_total"))
	}
}

// checkLogin checks a login of user from ip at the limiter.
func checkLogin(t *testing.T, limiter *proc, ip, user string) decision {
	t.Helper()
	return postCheck(t, limiter, `{"ip":"`+ip+`","endpoint":"/api/login","method":"POST","user_id":"`+user+`"}`)
}
