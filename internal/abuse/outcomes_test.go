package abuse_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
)

// outcomeT0 is when the outcomes of these tests begin; the detector's clock
// reads a day later (afterFixtures), so none is ahead of it.
var outcomeT0 = fixtureStart

var off = false

// failure is an outcome of ip (and user, when given) on endpoint with
// status, at outcomeT0 + ms.
func failure(id string, ms int64, ip, user, endpoint string, status int) event.Outcome {
	return event.Outcome{EventID: id, TS: outcomeT0.Add(time.Duration(ms) * time.Millisecond), Instance: "gw-1",
		UserID: user, IP: ip, Endpoint: endpoint, Method: "POST", Status: status, Cost: 1}
}

// method returns o answering m.
func method(o event.Outcome, m string) event.Outcome {
	o.Method = m
	return o
}

func outcomeInputs(partition int, outs ...event.Outcome) []abuse.OutcomeInput {
	in := make([]abuse.OutcomeInput, len(outs))
	for i, o := range outs {
		in[i] = abuse.OutcomeInput{Partition: partition, Outcome: o}
	}
	return in
}

// smallDetection has small thresholds: more than 3 users, 4 failures, 3
// sources, 5 endpoints; with only, every other outcome scenario is off.
func smallDetection(only ...string) rules.Detection {
	scenario := func(reason string, within time.Duration, statuses ...int) rules.OutcomeScenario {
		s := rules.OutcomeScenario{Within: dur(within), Duration: dur(time.Hour), Statuses: statuses}
		if len(only) > 0 && !slices.Contains(only, reason) {
			s.Enabled = &off
		}
		return s
	}
	return rules.Detection{
		CredentialStuffing: &rules.CredentialStuffingPolicy{DistinctUsers: 3, OutcomeScenario: scenario(abuse.ReasonCredentialStuffing, 10*time.Minute, 401, 403)},
		BruteForce:         &rules.BruteForcePolicy{Failures: 4, OutcomeScenario: scenario(abuse.ReasonBruteForce, 5*time.Minute, 401, 403)},
		AccountAttack:      &rules.AccountAttackPolicy{DistinctSources: 3, OutcomeScenario: scenario(abuse.ReasonAccountAttack, 10*time.Minute, 401, 403)},
		Probing:            &rules.ProbingPolicy{DistinctEndpoints: 5, OutcomeScenario: scenario(abuse.ReasonProbing, time.Minute, 404)},
	}
}

// countingLedger counts the claims made of the ledger it wraps.
type countingLedger struct {
	abuse.Ledger
	claims atomic.Int64
}

func (l *countingLedger) Claim(ctx context.Context, c abuse.Claim) (abuse.Claimed, error) {
	l.claims.Add(1)
	return l.Ledger.Claim(ctx, c)
}

type outcomeRig struct {
	engine *abuse.OutcomeEngine
	pub    *abusetest.Published
	ledger *countingLedger
	mem    *abusetest.MemoryLedger
}

func newOutcomeRig(t *testing.T, det rules.Detection, now time.Time) *outcomeRig {
	t.Helper()
	r := &outcomeRig{pub: &abusetest.Published{}, mem: abusetest.NewMemoryLedger()}
	r.ledger = &countingLedger{Ledger: r.mem}
	var err error
	r.engine, err = abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: func() time.Time { return now }},
		abusetest.NewMemoryDistinct(), r.ledger, r.pub)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *outcomeRig) process(t *testing.T, partition int, outs ...event.Outcome) ([]abuse.Claimed, abuse.Stats) {
	t.Helper()
	got, st, err := r.engine.Process(context.Background(), outcomeInputs(partition, outs...))
	if err != nil {
		t.Fatal(err)
	}
	return got, st
}

// keys returns "action scope:subject" of each outcome.
func keys(outs []abuse.Claimed) []string {
	var k []string
	for _, o := range outs {
		k = append(k, o.Ban.Action+" "+o.Ban.Key())
	}
	return k
}

// Each scenario fires on the failure that takes its count above the
// threshold, not before, with its reason and evidence.
func TestOutcomeScenariosFireAboveThreshold(t *testing.T) {
	const ip = "203.0.113.7"
	tests := []struct {
		reason    string
		threshold int
		nth       func(i int) event.Outcome
		evidence  func(event.Evidence) bool
	}{
		{abuse.ReasonCredentialStuffing, 3, func(i int) event.Outcome {
			return failure(fmt.Sprint("cs", i), int64(i)*1000, ip, fmt.Sprint("user-", i), "/api/login", 401)
		}, func(e event.Evidence) bool {
			return slices.Equal(e.SampleUsers, []string{"user-3", "user-2", "user-1", "user-0"})
		}},
		{abuse.ReasonBruteForce, 4, func(i int) event.Outcome {
			return failure(fmt.Sprint("bf", i), int64(i)*1000, ip, "alice", "/api/login", 403)
		}, func(e event.Evidence) bool {
			return slices.Equal(e.SampleEndpoints, []string{"/api/login"}) && slices.Equal(e.SampleUsers, []string{"alice"})
		}},
		{abuse.ReasonProbing, 5, func(i int) event.Outcome {
			return failure(fmt.Sprint("pr", i), int64(i)*100, ip, "", fmt.Sprint("/admin/", i), 404)
		}, func(e event.Evidence) bool { return len(e.SampleEndpoints) == 5 && e.SampleEndpoints[0] == "/admin/5" }},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			det := smallDetection(tt.reason)
			det.Samples = 5
			r := newOutcomeRig(t, det, afterFixtures())
			var outs []event.Outcome
			for i := range tt.threshold {
				outs = append(outs, tt.nth(i))
			}
			if got, _ := r.process(t, 0, outs...); len(got) != 0 {
				t.Fatalf("%d failures: %q, want nothing", tt.threshold, keys(got))
			}
			got, st := r.process(t, 0, tt.nth(tt.threshold))
			if len(got) != 1 || st.Bans[tt.reason] != 1 {
				t.Fatalf("failure %d: %q (stats %+v), want one ban", tt.threshold+1, keys(got), st)
			}
			b := got[0].Ban
			if b.Action != event.ActionBan || b.Scope != event.ScopeIP || b.Subject != ip || b.Reason != tt.reason ||
				b.Count != int64(tt.threshold+1) || b.Threshold != int64(tt.threshold) || b.DurationS != 3600 {
				t.Errorf("ban %+v", b)
			}
			if !tt.evidence(b.Evidence) || b.Evidence.FirstTS.IsZero() || b.Evidence.LastTS.Before(b.Evidence.FirstTS) {
				t.Errorf("evidence %+v", b.Evidence)
			}
			if _, err := event.EncodeBan(b); err != nil {
				t.Errorf("encode: %v", err)
			}
			if enforced := r.mem.Enforced(); len(enforced) != 1 || enforced[0].BanID != b.BanID {
				t.Errorf("enforced %+v", enforced)
			}
		})
	}
}

// An account attack bans every source at the crossing, warns about the
// account (never banned), then bans each new source alone; a source
// failing again costs no ledger round trip.
func TestAccountAttack(t *testing.T) {
	r := newOutcomeRig(t, smallDetection(abuse.ReasonAccountAttack), afterFixtures())
	src := func(i int) string { return fmt.Sprintf("198.51.100.%d", i) }
	var outs []event.Outcome
	for i := range 3 {
		outs = append(outs, failure(fmt.Sprint("a", i), int64(i)*1000, src(i), "victim", "/api/login", 401))
	}
	if got, _ := r.process(t, 0, outs...); len(got) != 0 {
		t.Fatalf("3 sources: %q", keys(got))
	}
	got, st := r.process(t, 0, failure("a3", 3000, src(3), "victim", "/api/login", 401))
	want := []string{"ban ip:" + src(3), "ban ip:" + src(2), "ban ip:" + src(1), "ban ip:" + src(0), "warn user:victim"}
	if !slices.Equal(keys(got), want) || st.Bans[abuse.ReasonAccountAttack] != 4 || st.Warnings[abuse.ReasonAccountAttack] != 1 {
		t.Fatalf("crossing: %q (stats %+v), want %q", keys(got), st, want)
	}
	for _, o := range got[:4] {
		if !slices.Equal(o.Ban.Evidence.SampleUsers, []string{"victim"}) || o.Ban.Reason != abuse.ReasonAccountAttack {
			t.Errorf("source ban %+v", o.Ban)
		}
	}
	if w := got[4].Ban; len(w.Evidence.SampleSources) != 4 || w.Count != 4 || w.DurationS != 0 {
		t.Errorf("warning %+v", w)
	}
	before := r.ledger.claims.Load()
	var again []event.Outcome
	for i := range 50 {
		again = append(again, failure(fmt.Sprint("r", i), 4000+int64(i), src(i%4), "victim", "/api/login", 401))
	}
	if got, _ := r.process(t, 0, again...); len(got) != 0 || r.ledger.claims.Load() != before {
		t.Fatalf("known sources again: %q, %d claims", keys(got), r.ledger.claims.Load()-before)
	}
	got, _ = r.process(t, 0, failure("a4", 5000, src(4), "victim", "/api/login", 401))
	if !slices.Equal(keys(got), []string{"ban ip:" + src(4)}) {
		t.Fatalf("new source: %q", keys(got))
	}
	for _, b := range r.mem.Enforced() {
		if b.Scope == event.ScopeUser {
			t.Errorf("the account was banned: %+v", b)
		}
	}
}

// The account's owner is not banned with its attackers: a source with a
// success (a status outside the failure statuses, 2xx) on the account
// within the window is spared at the crossing and after, and named in the
// evidence. A success on another account, or older than the window, spares
// nothing.
func TestAccountAttackSparesTheOwner(t *testing.T) {
	r := newOutcomeRig(t, smallDetection(abuse.ReasonAccountAttack), afterFixtures())
	const owner, mallory = "203.0.113.10", "203.0.113.66"
	ms := func(m time.Duration) int64 { return int64(m / time.Millisecond) }
	// The owner mistypes, then logs in; mallory logs in to his own account
	// and fails on the victim's; an old address logged in 20 minutes
	// before (outside the 10m window) and fails now.
	got, _ := r.process(t, 0,
		failure("old-ok", 0, "198.51.100.99", "victim", "/api/login", 200),
		failure("o1", ms(20*time.Minute), owner, "victim", "/api/login", 401),
		failure("o2", ms(20*time.Minute)+1000, owner, "victim", "/api/login", 200),
		failure("m1", ms(20*time.Minute)+1500, mallory, "mallory", "/api/login", 200),
		failure("m2", ms(20*time.Minute)+1600, mallory, "victim", "/api/login", 401),
		failure("old", ms(20*time.Minute)+1700, "198.51.100.99", "victim", "/api/login", 401),
	)
	if len(got) != 0 {
		t.Fatalf("3 sources: %q", keys(got))
	}
	got, st := r.process(t, 0, failure("a1", ms(20*time.Minute)+2000, "192.0.2.1", "victim", "/api/login", 401))
	want := []string{"ban ip:192.0.2.1", "ban ip:198.51.100.99", "ban ip:" + mallory, "warn user:victim"}
	if !slices.Equal(keys(got), want) || st.Bans[abuse.ReasonAccountAttack] != 3 || st.Spared != 1 {
		t.Fatalf("crossing: %q (stats %+v), want %q and the owner spared", keys(got), st, want)
	}
	if w := got[3].Ban; !slices.Equal(w.Evidence.SparedSources, []string{owner}) || slices.Contains(w.Evidence.SampleSources, owner) {
		t.Errorf("warning evidence %+v, want the owner among the spared sources only", w.Evidence)
	}
	// The owner mistypes again: still spared; a new attacker is banned.
	got, st = r.process(t, 0,
		failure("o3", ms(20*time.Minute)+3000, owner, "victim", "/api/login", 401),
		failure("a2", ms(20*time.Minute)+3100, "192.0.2.2", "victim", "/api/login", 401))
	if !slices.Equal(keys(got), []string{"ban ip:192.0.2.2"}) {
		t.Fatalf("after the crossing: %q (stats %+v)", keys(got), st)
	}
	for _, b := range r.mem.Enforced() {
		if b.Subject == owner {
			t.Errorf("the owner is banned: %+v", b)
		}
	}
}

// Distinct sources are counted by network: the 11 /64s of one /56 (and of
// one /48) are one network and ban nobody, however many there are; IPv4
// addresses are networks of their own by default.
func TestAccountAttackCountsNetworks(t *testing.T) {
	det := smallDetection(abuse.ReasonAccountAttack)
	det.AccountAttack.LockAccount = dur(30 * time.Minute)
	r := newOutcomeRig(t, det, afterFixtures())
	var outs []event.Outcome
	for i := range 11 {
		outs = append(outs, failure(fmt.Sprint("v6-", i), int64(i), fmt.Sprintf("2001:db8:1:%x::1", 0x100+i), "victim", "/api/login", 401))
	}
	if got, _ := r.process(t, 0, outs...); len(got) != 0 {
		t.Fatalf("11 /64s of one /56: %q, want nothing", keys(got))
	}
	outs = nil
	for i := range 3 {
		outs = append(outs, failure(fmt.Sprint("v4-", i), int64(100+i), fmt.Sprintf("192.0.2.%d", i+1), "victim", "/api/login", 401))
	}
	got, _ := r.process(t, 0, outs...)
	if !slices.Contains(keys(got), "ban user:victim") || !slices.Contains(keys(got), "ban ip:192.0.2.3") {
		t.Fatalf("4 networks: %q, want the lock and the sources' bans", keys(got))
	}
}

// ipv4_prefix groups IPv4 sources too: the addresses of one /24 are one
// network, and each address is still banned on its own.
func TestAccountAttackIPv4Networks(t *testing.T) {
	det := smallDetection(abuse.ReasonAccountAttack)
	det.AccountAttack.IPv4Prefix = 24
	r := newOutcomeRig(t, det, afterFixtures())
	var outs []event.Outcome
	for i := range 5 {
		outs = append(outs, failure(fmt.Sprint("a", i), int64(i), fmt.Sprintf("192.0.2.%d", 10+i), "victim", "/api/login", 401))
	}
	if got, _ := r.process(t, 0, outs...); len(got) != 0 {
		t.Fatalf("5 addresses of one /24: %q", keys(got))
	}
	outs = nil
	for i := range 3 {
		outs = append(outs, failure(fmt.Sprint("b", i), int64(10+i), fmt.Sprintf("198.51.%d.1", i), "victim", "/api/login", 401))
	}
	got, _ := r.process(t, 0, outs...)
	if want := []string{"ban ip:198.51.2.1", "ban ip:198.51.1.1", "ban ip:198.51.0.1", "ban ip:192.0.2.14", "warn user:victim"}; !slices.Equal(keys(got), want) {
		t.Fatalf("4 networks: %q, want %q", keys(got), want)
	}
}

// The owner is recognized only by a success status of the scenario,
// answering a method that is not safe (GET of the login form is none), on
// its endpoints, for that user; a session's successes in one batch cost
// one add.
func TestAccountAttackOwnerRecognition(t *testing.T) {
	det := smallDetection(abuse.ReasonAccountAttack)
	det.AccountAttack.Endpoints = []string{"/api/login"}
	det.AccountAttack.SuccessStatuses = []int{200, 302}
	r := newOutcomeRig(t, det, afterFixtures())
	outs := []event.Outcome{
		failure("s1", 0, "203.0.113.1", "victim", "/api/books", 200), // not the scenario's endpoint
		failure("s2", 1, "203.0.113.2", "victim", "/api/login", 204), // not a success status
		failure("s3", 2, "203.0.113.3", "", "/api/login", 200),       // no user
		failure("s4", 3, "203.0.113.4", "victim", "/api/login", 302), // the owner, by a redirect
		failure("s5", 4, "203.0.113.4", "victim", "/api/login", 200), // again: the same add
		failure("s6", 5, "203.0.113.4", "victim", "/api/login", 200),
		failure("s7", 6, "203.0.113.5", "someone", "/api/login", 200),               // another account's owner
		method(failure("s8", 7, "203.0.113.6", "victim", "/api/login", 200), "GET"), // the login form
		method(failure("s9", 8, "203.0.113.6", "victim", "/api/login", 200), ""),    // a GET too
	}
	for i, ip := range []string{"203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4", "203.0.113.6"} {
		outs = append(outs, failure(fmt.Sprint("f", i), int64(10+i), ip, "victim", "/api/login", 401))
	}
	got, st := r.process(t, 0, outs...)
	want := []string{"ban ip:203.0.113.3", "ban ip:203.0.113.2", "ban ip:203.0.113.1", "warn user:victim", "ban ip:203.0.113.6"}
	if !slices.Equal(keys(got), want) || st.Successes != 2 || st.Spared != 1 {
		t.Fatalf("%q (stats %+v), want %q, 2 successes recorded and 203.0.113.4 spared", keys(got), st, want)
	}
}

// lock_account bans the account too, for that long.
func TestAccountAttackLock(t *testing.T) {
	det := smallDetection(abuse.ReasonAccountAttack)
	det.AccountAttack.LockAccount = dur(15 * time.Minute)
	r := newOutcomeRig(t, det, afterFixtures())
	var outs []event.Outcome
	for i := range 4 {
		outs = append(outs, failure(fmt.Sprint("a", i), int64(i), fmt.Sprintf("198.51.100.%d", i), "victim", "/api/login", 401))
	}
	got, _ := r.process(t, 0, outs...)
	i := slices.IndexFunc(got, func(o abuse.Claimed) bool { return o.Ban.Action == event.ActionBan && o.Ban.Scope == event.ScopeUser })
	if i < 0 || got[i].Ban.Subject != "victim" || got[i].Ban.DurationS != 900 {
		t.Fatalf("no 15m lock of the account in %q", keys(got))
	}
}

// Normal users with an occasional failed login, and a botnet of 200
// addresses each failing 3 logins with different user ids, ban nobody:
// neither crosses a threshold of the defaults. The same botnet against one
// account bans every address.
func TestOutcomeFalsePositivesAndBotnet(t *testing.T) {
	det := rules.Detection{} // the defaults
	t.Run("normal users", func(t *testing.T) {
		r := newOutcomeRig(t, det, afterFixtures())
		var outs []event.Outcome
		for u := range 500 {
			ip := fmt.Sprintf("10.%d.%d.1", u/250, u%250)
			for k := range 6 {
				status := 200
				if k == 2 || (u%7 == 0 && k == 3) {
					status = 401 // a mistyped password, now and then twice
				}
				outs = append(outs, failure(fmt.Sprintf("n%d-%d", u, k), int64(u*10+k*20000), ip, fmt.Sprint("user-", u), "/api/login", status))
			}
			outs = append(outs, failure(fmt.Sprintf("n%d-404", u), int64(u*10), ip, fmt.Sprint("user-", u), "/favicon.ico", 404))
		}
		if got, _ := r.process(t, 0, outs...); len(got) != 0 {
			t.Fatalf("normal traffic: %q", keys(got))
		}
	})
	botnet := func(account func(bot, k int) string) []event.Outcome {
		var outs []event.Outcome
		for bot := range 200 {
			for k := range 3 {
				outs = append(outs, failure(fmt.Sprintf("b%d-%d", bot, k), int64(bot*100+k*10), fmt.Sprintf("192.0.2.%d", bot), account(bot, k), "/api/login", 401))
			}
		}
		return outs
	}
	t.Run("spread botnet", func(t *testing.T) {
		r := newOutcomeRig(t, det, afterFixtures())
		if got, _ := r.process(t, 0, botnet(func(bot, k int) string { return fmt.Sprintf("victim-%d-%d", bot, k) })...); len(got) != 0 {
			t.Fatalf("3 users per address: %q", keys(got))
		}
	})
	t.Run("botnet on one account", func(t *testing.T) {
		r := newOutcomeRig(t, det, afterFixtures())
		got, st := r.process(t, 0, botnet(func(int, int) string { return "ceo" })...)
		if st.Bans[abuse.ReasonAccountAttack] != 200 || st.Warnings[abuse.ReasonAccountAttack] != 1 || len(got) != 201 {
			t.Fatalf("stats %+v, %d published", st, len(got))
		}
	})
}

// The same batch twice publishes nothing new; a batch whose publication
// failed publishes, delivered again, the same bans under the same ids.
func TestOutcomeReplay(t *testing.T) {
	var outs []event.Outcome
	for i := range 6 {
		outs = append(outs, failure(fmt.Sprint("a", i), int64(i), fmt.Sprintf("198.51.100.%d", i), "victim", "/api/login", 401))
		outs = append(outs, failure(fmt.Sprint("c", i), int64(i), "203.0.113.9", fmt.Sprint("u", i), "/api/login", 401))
	}
	first := newOutcomeRig(t, smallDetection(), afterFixtures())
	want, _ := first.process(t, 0, outs...)
	if len(want) == 0 {
		t.Fatal("no bans")
	}
	if again, _ := first.process(t, 0, outs...); len(again) != 0 {
		t.Errorf("replayed batch published %q", keys(again))
	}

	r := newOutcomeRig(t, smallDetection(), afterFixtures())
	r.pub.Fail = errors.New("broker down")
	if _, _, err := r.engine.Process(context.Background(), outcomeInputs(0, outs...)); err == nil {
		t.Fatal("no error with the broker down")
	}
	r.pub.Fail = nil
	got, _ := r.process(t, 0, outs...)
	ids := func(outs []abuse.Claimed) []string {
		var s []string
		for _, o := range outs {
			s = append(s, o.Ban.BanID)
		}
		slices.Sort(s)
		return s
	}
	if !slices.Equal(ids(got), ids(want)) {
		t.Errorf("redelivered after a failure: %q, want %q", keys(got), keys(want))
	}
}

// Banned, exempt and address-less outcomes never count; statuses that are
// no failure and endpoints outside a scenario's are ignored.
func TestOutcomeSkips(t *testing.T) {
	det := smallDetection(abuse.ReasonBruteForce)
	det.BruteForce.Endpoints = []string{"/api/login"}
	r := newOutcomeRig(t, det, afterFixtures())
	exempt, err := abuse.NewOutcomeEngine(abuse.OutcomeConfig{Detection: det, Now: afterFixtures,
		Exempt: func(s event.Subject) bool { return s.IP == "10.0.0.1" }}, abusetest.NewMemoryDistinct(), abusetest.NewMemoryLedger(), r.pub)
	if err != nil {
		t.Fatal(err)
	}
	var outs []event.Outcome
	for i := range 10 {
		banned := failure(fmt.Sprint("b", i), int64(i), "203.0.113.1", "", "/api/login", 401)
		banned.Banned = true
		outs = append(outs, banned,
			failure(fmt.Sprint("z", i), int64(i), "0.0.0.0", "", "/api/login", 401),
			failure(fmt.Sprint("v6z", i), int64(i), "::", "", "/api/login", 401),
			failure(fmt.Sprint("ok", i), int64(i), "203.0.113.2", "", "/api/login", 200),
			failure(fmt.Sprint("other", i), int64(i), "203.0.113.3", "", "/api/books", 401),
			failure(fmt.Sprint("ex", i), int64(i), "10.0.0.1", "", "/api/login", 401))
	}
	got, st := r.process(t, 0, outs...)
	if len(got) == 0 || !slices.Equal(keys(got), []string{"ban ip:10.0.0.1"}) {
		t.Errorf("without exemptions: %q, want only 10.0.0.1", keys(got))
	}
	if st.Skipped != 30 || st.Failures != 20 {
		t.Errorf("stats %+v", st)
	}
	got, _, err = exempt.Process(context.Background(), outcomeInputs(0, outs...))
	if err != nil || len(got) != 0 {
		t.Errorf("with 10.0.0.1 exempt: %q, %v", keys(got), err)
	}
}

// An outcome stamped beyond the skew ahead of the detector's clock counts
// at the detector's time, and the ban is issued no later; an outcome later
// than the grace behind its partition's newest is ignored, per partition.
func TestOutcomeEventTime(t *testing.T) {
	now := outcomeT0.Add(time.Hour)
	r := newOutcomeRig(t, smallDetection(abuse.ReasonBruteForce), now)
	var outs []event.Outcome
	for i := range 5 {
		outs = append(outs, failure(fmt.Sprint("f", i), int64(time.Hour/time.Millisecond)+int64(i)*int64(time.Hour/time.Millisecond), "203.0.113.7", "", "/api/login", 401))
	}
	got, st := r.process(t, 0, outs...)
	if st.Future != 4 || len(got) != 1 || got[0].Ban.TS.After(now) || got[0].Ban.ExpiresAt.After(now.Add(time.Hour)) {
		t.Fatalf("future outcomes: stats %+v, bans %+v", st, got)
	}

	r = newOutcomeRig(t, smallDetection(abuse.ReasonBruteForce), now)
	r.process(t, 0, failure("new", 40*60*1000, "203.0.113.8", "", "/api/login", 401))
	_, st = r.process(t, 0, failure("late", 0, "203.0.113.8", "", "/api/login", 401))
	if st.Late != 1 {
		t.Errorf("late on its partition: %+v", st)
	}
	_, st = r.process(t, 1, failure("other", 0, "203.0.113.8", "", "/api/login", 401))
	if st.Late != 0 {
		t.Errorf("on another partition: %+v", st)
	}
}

// A scenario's dry_run, or detection.dry_run, publishes bans marked dry
// run and enforces nothing.
func TestOutcomeDryRun(t *testing.T) {
	for name, edit := range map[string]func(*rules.Detection){
		"scenario":  func(d *rules.Detection) { d.Probing.DryRun = true },
		"detection": func(d *rules.Detection) { d.DryRun = true },
	} {
		t.Run(name, func(t *testing.T) {
			det := smallDetection(abuse.ReasonProbing)
			edit(&det)
			r := newOutcomeRig(t, det, afterFixtures())
			var outs []event.Outcome
			for i := range 6 {
				outs = append(outs, failure(fmt.Sprint("p", i), int64(i), "203.0.113.7", "", fmt.Sprint("/x/", i), 404))
			}
			got, _ := r.process(t, 0, outs...)
			if len(got) != 1 || !got[0].Ban.DryRun || len(r.mem.Enforced()) != 0 {
				t.Fatalf("dry run: %+v, enforced %+v", got, r.mem.Enforced())
			}
		})
	}
}

// Metrics series start at the enabled scenarios' reasons.
func TestOutcomeReasons(t *testing.T) {
	r := newOutcomeRig(t, smallDetection(abuse.ReasonProbing, abuse.ReasonAccountAttack), afterFixtures())
	if got := r.engine.BanReasons(); !slices.Equal(got, []string{abuse.ReasonAccountAttack, abuse.ReasonProbing}) {
		t.Errorf("ban reasons %q", got)
	}
	if got := r.engine.WarnReasons(); !slices.Equal(got, []string{abuse.ReasonAccountAttack}) {
		t.Errorf("warn reasons %q", got)
	}
	r = newOutcomeRig(t, smallDetection(abuse.ReasonProbing), afterFixtures())
	if got := r.engine.WarnReasons(); got != nil {
		t.Errorf("warn reasons without account attack %q", got)
	}
}
