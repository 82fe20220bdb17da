package redisabuse

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// testEscalation: ×2 per ban in the last day, at most 5 h.
var testEscalation = abuse.Escalation{Factor: 2, Cap: 5 * time.Hour, Period: 24 * time.Hour}

// newTestLedger is a ledger, settling into a blacklist of the test's own,
// whose clock stands still at t0.
func newTestLedger(tb testing.TB, t0 time.Time) (*Ledger, *blacklist, *redis.Client, string) {
	tb.Helper()
	client := redistest.Client(tb)
	prefix := redistest.Prefix(tb, client)
	bl := new(blacklist)
	l := NewLedger(client, prefix, bl)
	l.now = func() time.Time { return t0 }
	return l, bl, client, prefix
}

// blacklist is the Blacklist of the tests: it keeps the bans Settle
// enforces, in order. The blacklist the limiters enforce
// (redisfleet.Blacklist) has tests of its own.
type blacklist struct {
	mu   sync.Mutex
	bans []event.Ban
}

func (b *blacklist) Add(_ context.Context, ban event.Ban) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bans = append(b.bans, ban)
	return true, nil
}

// added returns the bans added so far.
func (b *blacklist) added() []event.Ban {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.bans)
}

// claimAt is a claim of a ban (1 h base) or warning of subject at t0 + at.
func claimAt(t0 time.Time, action, subject, reason string, at time.Duration) abuse.Claim {
	ts := t0.Add(at)
	id := reason
	if action == event.ActionWarn {
		id = "warn/" + reason
	}
	return abuse.Claim{
		Ban: event.Ban{
			BanID: abuse.BanID(event.ScopeIP, subject, id, ts.Format(time.RFC3339Nano)), TS: ts, Action: action,
			Scope: event.ScopeIP, Subject: subject, Reason: reason, Count: 100, Threshold: 100,
			WindowS: 3600, DurationS: 3600, Source: "detector",
			Evidence: event.Evidence{FirstTS: ts.Add(-time.Minute), LastTS: ts, SampleEndpoints: []string{"/a"}},
		},
		Escalation: testEscalation,
		WarnFor:    5 * time.Minute,
	}
}

func TestLedgerSteps(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		const h = time.Hour
		type step struct {
			action, reason string
			at             time.Duration
			settle         bool // settle the outcome when published
			publish        bool
			claimedAt      time.Duration // TS of the ban answered
			duration       time.Duration // 0 for a warning
		}
		tests := []struct {
			name  string
			steps []step
		}{
			{"new ban, then no-op once settled", []step{
				{"ban", "violations_1h", 0, true, true, 0, h},
				{"ban", "violations_1h", 0, false, false, 0, h},
				{"ban", "scan", 30 * time.Minute, false, false, 0, h},
			}},
			{"unsettled ban is published again", []step{
				{"ban", "scan", 0, false, true, 0, h},
				{"ban", "scan", 0, false, true, 0, h},
				{"ban", "violations_1h", time.Minute, true, true, 0, h},
				{"ban", "scan", 2 * time.Minute, false, false, 0, h},
			}},
			{"escalation doubles up to the cap", []step{
				{"ban", "scan", 0, true, true, 0, h},
				{"ban", "scan", h, true, true, h, 2 * h}, // expiry is exclusive
				{"ban", "scan", 3 * h, true, true, 3 * h, 4 * h},
				{"ban", "scan", 7 * h, true, true, 7 * h, 5 * h},
				{"ban", "scan", 12 * h, true, true, 12 * h, 5 * h},
			}},
			{"escalation forgets bans older than the period", []step{
				{"ban", "scan", 0, true, true, 0, h},
				{"ban", "scan", 2 * h, true, true, 2 * h, 2 * h},
				{"ban", "scan", 25 * h, true, true, 25 * h, 2 * h}, // the one at 2 h is in [1 h, 25 h)
				{"ban", "scan", 50 * h, true, true, 50 * h, h},
			}},
			{"warnings suppress warnings for WarnFor", []step{
				{"warn", "violations_5m", 0, false, true, 0, 0},
				{"warn", "violations_5m", time.Minute, true, true, 0, 0},
				{"warn", "violations_5m", 2 * time.Minute, false, false, 0, 0},
				{"ban", "violations_1h", 3 * time.Minute, true, true, 3 * time.Minute, h},
				{"warn", "violations_5m", 5 * time.Minute, false, true, 5 * time.Minute, 0},
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				l, _, client, prefix := newTestLedger(t, t0)
				mem := abusetest.NewMemoryLedger()
				for i, s := range tt.steps {
					c := claimAt(t0, s.action, "203.0.113.7", s.reason, s.at)
					out := abusetest.Claim(t, l, c)
					b := out.Ban
					wantExp := time.Time{}
					if s.action == event.ActionBan {
						wantExp = t0.Add(s.claimedAt + s.duration)
					}
					if out.Publish != s.publish || !b.TS.Equal(t0.Add(s.claimedAt)) ||
						b.DurationS != int64(s.duration/time.Second) || !b.ExpiresAt.Equal(wantExp) {
						t.Errorf("step %d: publish %v, ts %v, duration %ds, expires %v; want %v, %v, %v, %v",
							i, out.Publish, b.TS, b.DurationS, b.ExpiresAt, s.publish, t0.Add(s.claimedAt), s.duration, wantExp)
					}
					ref := abusetest.Claim(t, mem, c)
					if ref.Publish != out.Publish || ref.Ban.BanID != b.BanID || ref.Ban.DurationS != b.DurationS ||
						!ref.Ban.ExpiresAt.Equal(b.ExpiresAt) {
						t.Errorf("step %d: differs from the memory ledger: %+v, want %+v", i, out, ref)
					}
					if s.settle && out.Publish {
						abusetest.Settle(t, l, b, false)
						abusetest.Settle(t, mem, ref.Ban, false)
					}
				}
				redistest.RequireExpiry(t, client, prefix)
			})
		}
	})
}

// TestLedgerSettleEnforces: the blacklist gets the ban only with enforce,
// for a ban (not a warning) that has not expired on the wall clock.
func TestLedgerSettleEnforces(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		tests := []struct {
			name    string
			action  string
			enforce bool
			now     time.Duration // wall clock, from t0
			want    int
		}{
			{"enforced", event.ActionBan, true, 0, 1},
			{"dry run", event.ActionBan, false, 0, 0},
			{"expired", event.ActionBan, true, 2 * time.Hour, 0},
			{"warning", event.ActionWarn, true, 0, 0},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				l, bl, _, _ := newTestLedger(t, t0)
				now := t0.Add(tt.now)
				l.now = func() time.Time { return now }
				out := abusetest.Claim(t, l, claimAt(t0, tt.action, "203.0.113.7", "scan", 0))
				abusetest.Settle(t, l, out.Ban, tt.enforce)
				added := bl.added()
				if len(added) != tt.want {
					t.Fatalf("blacklist holds %d bans, want %d", len(added), tt.want)
				}
				if tt.want == 1 && (added[0].BanID != out.Ban.BanID || !added[0].ExpiresAt.Equal(out.Ban.ExpiresAt)) {
					t.Errorf("blacklist holds %+v, want %+v", added[0], out.Ban)
				}
				if again := abusetest.Claim(t, l, claimAt(t0, tt.action, "203.0.113.7", "scan", time.Minute)); again.Publish {
					t.Errorf("claim after settle publishes again: %+v", again)
				}
			})
		}
	})
}

// TestBanRecordKey: BanRecordKey names the record a ban claim writes,
// which an unban deletes (redisfleet.Blacklist.Remove): without it the
// detector may ban the offender again at once, and escalation still counts
// the first ban.
func TestBanRecordKey(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		ctx := context.Background()
		l, _, client, prefix := newTestLedger(t, t0)
		first := abusetest.Claim(t, l, claimAt(t0, event.ActionBan, "a|b", "scan", 0))
		abusetest.Settle(t, l, first.Ban, true)
		key := BanRecordKey(prefix, event.ScopeIP, "a|b")
		if n, err := client.Del(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("del %s: %d, %v; want the record deleted", key, n, err)
		}
		again := abusetest.Claim(t, l, claimAt(t0, event.ActionBan, "a|b", "scan", time.Minute))
		if !again.Publish || again.Ban.DurationS != 7200 {
			t.Errorf("claim after the record was deleted: %+v, want a new, escalated ban", again)
		}
	})
}

func TestLedgerInvalid(t *testing.T) {
	l, _, _, _ := newTestLedger(t, detectT0)
	for name, mutate := range map[string]func(*abuse.Claim){
		"unban":       func(c *abuse.Claim) { c.Ban.Action = event.ActionUnban },
		"no duration": func(c *abuse.Claim) { c.Ban.DurationS = 0 },
		"no subject":  func(c *abuse.Claim) { c.Ban.Subject = "" },
		"bad scope":   func(c *abuse.Claim) { c.Ban.Scope = "}" },
		"no ts":       func(c *abuse.Claim) { c.Ban.TS = time.Time{} },
	} {
		c := claimAt(detectT0, event.ActionBan, "203.0.113.7", "scan", 0)
		mutate(&c)
		if _, err := l.Claim(context.Background(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestLedgerDifferential runs random claims and settlements, in event-time
// order, on the Redis and the memory ledger and compares every outcome.
func TestLedgerDifferential(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		l, _, _, _ := newTestLedger(t, t0)
		mem := abusetest.NewMemoryLedger()
		rng := rand.New(rand.NewPCG(1, 2))
		at := time.Duration(0)
		for i := range 400 {
			c := randomClaim(rng, t0, &at, "s0", "s1", "s2")
			got, want := claimBoth(t, i, l, mem, c)
			if got.Publish && rng.IntN(4) != 0 {
				abusetest.Settle(t, l, got.Ban, false)
				abusetest.Settle(t, mem, want.Ban, false)
			}
		}
	})
}

// randomClaim moves *at up to 40 minutes on and returns a random ban (or,
// one time in three, warning) claim at *at of one of subjects, with random
// durations under one escalation policy.
func randomClaim(rng *rand.Rand, t0 time.Time, at *time.Duration, subjects ...string) abuse.Claim {
	*at += time.Duration(rng.IntN(40)) * time.Minute
	action := event.ActionBan
	if rng.IntN(3) == 0 {
		action = event.ActionWarn
	}
	c := claimAt(t0, action, subjects[rng.IntN(len(subjects))], []string{"scan", "violations_1h"}[rng.IntN(2)], *at)
	c.Escalation = abuse.Escalation{Factor: 3, Cap: 20 * time.Hour, Period: 12 * time.Hour}
	c.WarnFor = time.Duration(rng.IntN(30)) * time.Minute
	c.Ban.DurationS = int64(1 + rng.IntN(7200))
	return c
}

// claimBoth claims c (the i-th) on the Redis ledger l and on mem, the
// reference, and fails unless the outcomes agree.
func claimBoth(t *testing.T, i int, l *Ledger, mem abuse.Ledger, c abuse.Claim) (got, want abuse.Claimed) {
	t.Helper()
	got, want = abusetest.Claim(t, l, c), abusetest.Claim(t, mem, c)
	if got.Publish != want.Publish || got.Ban.BanID != want.Ban.BanID || got.Ban.DurationS != want.Ban.DurationS ||
		!got.Ban.ExpiresAt.Equal(want.Ban.ExpiresAt) || !got.Ban.TS.Equal(want.Ban.TS) {
		t.Fatalf("claim %d %+v:\n redis %+v\nmemory %+v", i, c.Ban, got, want)
	}
	return got, want
}

// A warning suppresses later warnings of its own reason only: an account
// warned of its own violations is still alerted of an attack on it.
func TestLedgerWarningsByReason(t *testing.T) {
	redistest.ForEachClock(t, detectT0, func(t *testing.T, t0 time.Time) {
		l, _, _, _ := newTestLedger(t, t0)
		mem := abusetest.NewMemoryLedger()
		for i, c := range []struct {
			reason  string
			at      time.Duration
			publish bool
		}{{"violations_5m", 0, true}, {"account_attack", time.Minute, true}, {"violations_5m", 2 * time.Minute, false}, {"account_attack", 3 * time.Minute, false}} {
			got, _ := claimBoth(t, i, l, mem, claimAt(t0, event.ActionWarn, "alice", c.reason, c.at))
			if got.Publish != c.publish {
				t.Fatalf("warning %d (%s): publish %v, want %v", i, c.reason, got.Publish, c.publish)
			}
			if got.Publish {
				abusetest.Settle(t, l, got.Ban, false)
				abusetest.Settle(t, mem, got.Ban, false)
			}
		}
	})
}
