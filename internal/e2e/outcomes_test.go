package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/loginsim"
	"github.com/ratewarden/ratewarden/internal/testkit"
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
	// A loaded machine's slow round trip must not send the limiter to its
	// failure policies: this test counts exact refusals.
	limiter := e.start("limiter", "REDIS_TIMEOUT", "2s")
	cfg := loginsim.DefaultConfig()
	attempts := loginsim.Scenario(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tallies, err := loginsim.Play(ctx, loginsim.Target{URL: "http://" + limiter.addr}, attempts, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := tallies[loginsim.ActorNormal]; n.RateLimited+n.Banned != 0 {
		t.Fatalf("normal users refused: %+v; refusals by rule: login-per-ip %v, login-failures %v; redis errors %v",
			n, limiter.metric(t, "rate_limit_requests_total", `rule="login-per-ip"`, `result="rate_limited"`),
			limiter.metric(t, "rate_limit_requests_total", `rule="login-failures"`, `result="rate_limited"`),
			limiter.metric(t, "rate_limit_redis_errors_total"))
	}
	// A loaded machine's detector may be well behind: the bans are read
	// once it has consumed every outcome the limiter published, and a lost
	// outcome is named as such.
	testkit.WaitFor(t, 90*time.Second, "the detector to consume every outcome", func() bool {
		published := limiter.metric(t, "rate_limit_events_published_total", `topic="`+outcomesTopic+`"`)
		return published > 0 && detector.metric(t, "rate_limit_detector_events_total", `source="outcomes"`) >= published
	})
	if dropped := limiter.metric(t, "rate_limit_events_dropped_total"); dropped != 0 {
		t.Fatalf("the limiter dropped %v events", dropped)
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
	testkit.WaitFor(t, 10*time.Second, "the limiter to enforce the bans", func() bool {
		return checkLogin(t, limiter, loginsim.BotIP(0), "someone").Reason == event.ReasonBanned
	})
	if d := checkLogin(t, limiter, "100.99.0.1", cfg.Victim); !d.Allowed {
		t.Fatalf("the victim is refused: %+v", d)
	}
	if detector.metric(t, "rate_limit_detector_events_total", `source="outcomes"`) < float64(len(attempts))/2 {
		t.Errorf("the detector consumed %v outcomes", detector.metric(t, "rate_limit_detector_events_total", `source="outcomes"`))
	}
}

// checkLogin checks a login of user from ip at the limiter.
func checkLogin(t *testing.T, limiter *proc, ip, user string) decision {
	t.Helper()
	return postCheck(t, limiter, `{"ip":"`+ip+`","endpoint":"/api/login","method":"POST","user_id":"`+user+`"}`)
}

// reportAnswer is a decoded POST /v1/report answer.
type reportAnswer struct {
	Rules []struct {
		RuleID    string `json:"rule_id"`
		Remaining int64  `json:"remaining"`
	} `json:"rules"`
}

// postReport sends an outcome report to the limiter and returns its answer.
func postReport(t *testing.T, limiter *proc, body string) reportAnswer {
	t.Helper()
	resp, err := http.Post("http://"+limiter.addr+"/v1/report", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a reportAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("report answered %d (%v)", resp.StatusCode, err)
	}
	return a
}

const accountRulesYAML = `
rules: []
detection:
  account_attack: {distinct_sources: 3, within: 10m, duration: 1h, lock_account: 30m}
`

// An account attack spares the account's owner and counts networks, on the
// real binaries. carol mistypes her password, then logs in; three networks
// then fail on her account: the crossing bans them, not her address, which
// the warning names among the spared sources. Eleven /64s of one /56
// failing on dave's account are one network: nobody is banned and the
// account is not locked.
func TestAccountAttackSparesTheOwnerAndCountsNetworks(t *testing.T) {
	t.Parallel() // mostly waits on the detector
	e := newEnvWith(t, accountRulesYAML)
	detector := e.start("detector")
	limiter := e.start("limiter")
	login := func(ip, user string, status int) {
		t.Helper()
		postReport(t, limiter, fmt.Sprintf(`{"ip":%q,"endpoint":"/api/login","method":"POST","user_id":%q,"status":%d}`, ip, user, status))
	}
	consumed := func(n int) {
		t.Helper()
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the detector to consume %d outcomes", n), func() bool {
			return detector.metric(t, "rate_limit_detector_events_total", `source="outcomes"`) >= float64(n)
		})
	}
	const owner = "198.51.100.10"
	login(owner, "carol", 401)
	login(owner, "carol", 200)
	consumed(2) // the reports go to partitions of their own: the owner's first
	for i := range 11 {
		login(fmt.Sprintf("2001:db8:1:%x::7", 0x100+i), "dave", 401)
	}
	consumed(13)
	attackers := []string{"192.0.2.1", "192.0.2.2", "203.0.113.9"}
	for _, ip := range attackers {
		login(ip, "carol", 401)
	}
	got := bans(t, e, len(attackers)+2) // their bans, the warning and the lock
	var banned []string
	for _, b := range got {
		switch {
		case b.Action == event.ActionBan && b.Scope == event.ScopeIP:
			banned = append(banned, b.Subject)
		case b.Action == event.ActionWarn:
			if b.Subject != "carol" || !slices.Equal(b.Evidence.SparedSources, []string{owner}) {
				t.Errorf("warning %+v, want carol's with the owner spared", b)
			}
		case b.Scope != event.ScopeUser || b.Subject != "carol":
			t.Errorf("unexpected ban %+v", b)
		}
	}
	slices.Sort(banned)
	if !slices.Equal(banned, attackers) {
		t.Errorf("banned %q, want the attackers %q", banned, attackers)
	}
	time.Sleep(2 * time.Second) // nothing more comes: no ban of the owner nor of dave's /56
	if n := kafkatest.CountMessages(t, e.brokers(), bansTopic); n != int64(len(attackers)+2) {
		t.Fatalf("%d messages on the ban topic, want %d", n, len(attackers)+2)
	}
	if detector.metric(t, "rate_limit_detector_outcome_spared_total") != 1 {
		t.Errorf("spared: %v, want 1", detector.metric(t, "rate_limit_detector_outcome_spared_total"))
	}
	testkit.WaitFor(t, 10*time.Second, "the limiter to enforce the bans", func() bool {
		return checkLogin(t, limiter, attackers[0], "carol").Reason == event.ReasonBanned
	})
	if d := checkLogin(t, limiter, owner, "someone"); d.Reason == event.ReasonBanned {
		t.Fatalf("the owner's address is banned: %+v", d)
	}
}
