package abusetest

import (
	"context"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
)

// LedgerStep claims Claim, expects the outcome (the recorded ban's id,
// DurationS and ExpiresAt, and Publish), then settles the outcome's ban
// when Settle is set (enforce = !DryRun).
type LedgerStep struct {
	Claim         abuse.Claim
	WantID        string
	WantPublish   bool
	WantDurationS int64
	WantExpiresAt time.Time // zero for a warning
	Settle        bool
}

// LedgerScenario is a sequence of claims on a fresh Ledger.
type LedgerScenario struct {
	Name  string
	Steps []LedgerStep
}

// Escalation is the escalation of the ledger scenarios: ×2, at most 4h,
// counting the bans of the last 24h.
var Escalation = abuse.Escalation{Factor: 2, Cap: 4 * time.Hour, Period: 24 * time.Hour}

const hour = int64(time.Hour / time.Millisecond)

// Claim claims c on l, failing the test on an error.
func Claim(tb testing.TB, l abuse.Ledger, c abuse.Claim) abuse.Claimed {
	tb.Helper()
	out, err := l.Claim(context.Background(), c)
	if err != nil {
		tb.Fatalf("claim: %v", err)
	}
	return out
}

// Settle settles b on l, failing the test on an error.
func Settle(tb testing.TB, l abuse.Ledger, b event.Ban, enforce bool) {
	tb.Helper()
	if err := l.Settle(context.Background(), b, enforce); err != nil {
		tb.Fatalf("settle: %v", err)
	}
}

// BanClaim is a ban claim for the ip 203.0.113.7 at T0+ms with a base
// duration of baseS seconds.
func BanClaim(id string, ms, baseS int64) abuse.Claim {
	return abuse.Claim{Ban: event.Ban{
		BanID: id, TS: At(ms), Action: event.ActionBan, Scope: event.ScopeIP, Subject: "203.0.113.7",
		Reason: "scan", Count: 50, Threshold: 50, WindowS: 10, DurationS: baseS, Source: "detector",
	}, Escalation: Escalation}
}

// WarnClaim is a warning claim for the ip 203.0.113.7 at T0+ms, covering
// the next 5 minutes.
func WarnClaim(id string, ms int64) abuse.Claim {
	return abuse.Claim{Ban: event.Ban{
		BanID: id, TS: At(ms), Action: event.ActionWarn, Scope: event.ScopeIP, Subject: "203.0.113.7",
		Reason: "violations_5m", Count: 20, Threshold: 20, WindowS: 300, Source: "detector",
	}, WarnFor: 5 * time.Minute}
}

func withSubject(c abuse.Claim, scope, subject string) abuse.Claim {
	c.Ban.Scope, c.Ban.Subject = scope, subject
	return c
}

// newBan expects a new ban record.
func newBan(c abuse.Claim, durationS int64, settle bool) LedgerStep {
	return LedgerStep{Claim: c, WantID: c.Ban.BanID, WantPublish: true, WantDurationS: durationS,
		WantExpiresAt: c.Ban.TS.Add(time.Duration(durationS) * time.Second), Settle: settle}
}

// covered expects the earlier record prior (a step) back.
func covered(c abuse.Claim, prior LedgerStep, publish bool) LedgerStep {
	return LedgerStep{Claim: c, WantID: prior.WantID, WantPublish: publish, WantDurationS: prior.WantDurationS,
		WantExpiresAt: prior.WantExpiresAt}
}

// LedgerScenarios returns the Ledger scenarios.
func LedgerScenarios() []LedgerScenario {
	first := newBan(BanClaim("b1", 0, 3600), 3600, false)
	w1 := newBan(WarnClaim("w1", 0), 0, false)
	w1.WantExpiresAt = time.Time{}
	w2 := newBan(WarnClaim("w2", 5*60*1000), 0, true)
	w2.WantExpiresAt = time.Time{}
	late := newBan(BanClaim("late", 10*hour, 3600), 3600, true)
	return []LedgerScenario{
		{Name: "an active ban covers later claims, published until settled", Steps: []LedgerStep{
			first,
			covered(BanClaim("b2", 60_000, 3600), first, true),
			{Claim: BanClaim("b1", 0, 3600), WantID: "b1", WantPublish: true, WantDurationS: 3600, WantExpiresAt: At(hour), Settle: true},
			covered(BanClaim("b3", 120_000, 7200), first, false),
			covered(BanClaim("b4", hour-1, 3600), first, false),
		}},
		{Name: "escalation: factor, cap, period", Steps: []LedgerStep{
			newBan(BanClaim("e1", 0, 3600), 3600, true),
			// Expired exactly at its ExpiresAt: one earlier ban, ×2.
			newBan(BanClaim("e2", hour, 3600), 7200, true),
			newBan(BanClaim("e3", 3*hour, 3600), 4*3600, true),
			// ×8 would be 8h: capped at 4h.
			newBan(BanClaim("e4", 7*hour, 3600), 4*3600, true),
			// The period is [TS-24h, TS): e1 is out, e2 (exactly 24h
			// before), e3 and e4 are in: 60s ×8.
			newBan(BanClaim("e5", 25*hour, 60), 480, true),
			// Nothing within the period: the base duration.
			newBan(BanClaim("e6", 60*hour, 60), 60, true),
		}},
		{Name: "a later ban covers an earlier claim", Steps: []LedgerStep{
			late,
			covered(BanClaim("early", 5*hour, 3600), late, false),
		}},
		{Name: "warnings: one per WarnFor", Steps: []LedgerStep{
			w1,
			covered(WarnClaim("w1b", 5*60*1000-1), w1, true),
			{Claim: WarnClaim("w1", 0), WantID: "w1", WantPublish: true, Settle: true},
			covered(WarnClaim("w1c", 60_000), w1, false),
			w2,
		}},
		{Name: "bans and warnings are independent", Steps: []LedgerStep{
			first,
			w1,
			{Claim: WarnClaim("w1", 0), WantID: "w1", WantPublish: true, Settle: true},
			covered(BanClaim("b2", 1000, 3600), first, true),
		}},
		{Name: "offenders are independent", Steps: []LedgerStep{
			newBan(BanClaim("o1", 0, 60), 60, true),
			newBan(withSubject(BanClaim("o2", 0, 60), event.ScopeUser, "203.0.113.7"), 60, true),
			newBan(withSubject(BanClaim("o3", 0, 60), event.ScopeIP, "203.0.113.8"), 60, true),
			newBan(withSubject(BanClaim("o4", 120_000, 60), event.ScopeIP, "203.0.113.8"), 120, true),
		}},
		{Name: "times at millisecond precision", Steps: []LedgerStep{
			{Claim: BanClaim("m1", 0, 1), WantID: "m1", WantPublish: true, WantDurationS: 1, WantExpiresAt: At(1000), Settle: true},
			// 1000.9ms after T0 is 1000ms: the ban has expired.
			{Claim: atMicro(BanClaim("m2", 0, 1), 1000_900), WantID: "m2", WantPublish: true, WantDurationS: 2,
				WantExpiresAt: At(0).Add(1000_900 * time.Microsecond).Add(2 * time.Second)},
		}},
	}
}

func atMicro(c abuse.Claim, us int64) abuse.Claim {
	c.Ban.TS = T0.Add(time.Duration(us) * time.Microsecond)
	return c
}

// RunLedger runs every Ledger scenario on the Ledger newLedger returns
// (fresh for each scenario).
func RunLedger(t *testing.T, newLedger func(t *testing.T) abuse.Ledger) {
	ctx := context.Background()
	for _, sc := range LedgerScenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			l := newLedger(t)
			for i, st := range sc.Steps {
				out, err := l.Claim(ctx, st.Claim)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				b := out.Ban
				if b.BanID != st.WantID || out.Publish != st.WantPublish || b.DurationS != st.WantDurationS || !b.ExpiresAt.Equal(st.WantExpiresAt) {
					t.Errorf("step %d (claim %s at %s): got %s publish=%t duration_s=%d expires=%s\nwant %s publish=%t duration_s=%d expires=%s",
						i, st.Claim.Ban.BanID, st.Claim.Ban.TS.Sub(T0), b.BanID, out.Publish, b.DurationS, b.ExpiresAt.Sub(T0),
						st.WantID, st.WantPublish, st.WantDurationS, st.WantExpiresAt.Sub(T0))
				}
				if b.Action != st.Claim.Ban.Action || b.Scope != st.Claim.Ban.Scope || b.Subject != st.Claim.Ban.Subject {
					t.Errorf("step %d: got %s %s, want %s %s", i, b.Action, b.Key(), st.Claim.Ban.Action, st.Claim.Ban.Key())
				}
				if st.Settle {
					if err := l.Settle(ctx, b, !b.DryRun); err != nil {
						t.Fatalf("step %d: settle: %v", i, err)
					}
				}
			}
		})
	}
}
