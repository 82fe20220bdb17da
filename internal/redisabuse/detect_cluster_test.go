package redisabuse

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/abuse"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/testkit/abusetest"
	"github.com/ratewarden/ratewarden/internal/testkit/redistest"
)

// spreadOffenders returns n offenders of scope whose keys are served by
// primary i mod 3, and checks that they cover every primary.
func spreadOffenders(tb testing.TB, e *redistest.SharedCluster, n int, scope string) []abuse.Offender {
	tb.Helper()
	tagKey := func(s string) string { return offenderTag("", abuse.Offender{Scope: scope, Subject: s}) + ":v" }
	subjects := e.Spread(tb, n, tagKey)
	offenders := make([]abuse.Offender, n)
	keys := make([]string, n)
	for i, s := range subjects {
		offenders[i] = abuse.Offender{Scope: scope, Subject: s}
		keys[i] = tagKey(s)
	}
	e.RequireSpread(tb, keys)
	return offenders
}

// testClusterWindows: the shared scenario table, then random batches whose
// sightings of six offenders on three primaries go in one pipeline, against
// abusetest.MemoryWindows.
func testClusterWindows(t *testing.T, e *redistest.SharedCluster) {
	t.Run("shared scenarios", func(t *testing.T) {
		abusetest.RunWindows(t, func(t *testing.T) abuse.Windows {
			return NewWindows(e.Client, redistest.Prefix(t, e.Client))
		})
	})

	t.Run("differential across primaries", func(t *testing.T) {
		prefix := redistest.Prefix(t, e.Client)
		offenders := append(spreadOffenders(t, e, 3, event.ScopeIP), spreadOffenders(t, e, 3, event.ScopeUser)...)
		spec := abuse.WindowSpec{
			Violations: []time.Duration{2 * time.Second, 10 * time.Second},
			Scan:       3 * time.Second, ScanCap: 5, MaxViolations: 8, Samples: 4, Grace: time.Second,
			ScanThreshold: 4, ViolationThresholds: []int64{3, 6},
		}
		windowsDifferential(t, NewWindows(e.Client, prefix), spec, offenders, rand.New(rand.NewPCG(3, 9)), 40, 30)
		if n := redistest.RequireExpiry(t, e.Client, prefix); n == 0 {
			t.Errorf("no key written under %s", prefix)
		}
	})
}

// testClusterLedger: the shared scenario table, then random claims of
// offenders on three primaries against abusetest.MemoryLedger, settled
// with enforcement (into a blacklist of the test's own).
func testClusterLedger(t *testing.T, e *redistest.SharedCluster) {
	newLedger := func(t *testing.T) (*Ledger, *blacklist, string) {
		prefix := redistest.Prefix(t, e.Client)
		bl := new(blacklist)
		l := NewLedger(e.Client, prefix, bl)
		l.now = func() time.Time { return detectT0 }
		return l, bl, prefix
	}

	t.Run("shared scenarios", func(t *testing.T) {
		abusetest.RunLedger(t, func(t *testing.T) abuse.Ledger {
			l, _, _ := newLedger(t)
			return l
		})
	})

	t.Run("differential across primaries", func(t *testing.T) {
		l, bl, prefix := newLedger(t)
		mem := abusetest.NewMemoryLedger()
		offenders := spreadOffenders(t, e, 3, event.ScopeIP)
		rng := rand.New(rand.NewPCG(5, 11))
		subjects := make([]string, len(offenders))
		for i, o := range offenders {
			subjects[i] = o.Subject
		}
		at := time.Duration(0)
		enforced := map[string]bool{}
		for i := range 150 {
			c := randomClaim(rng, detectT0, &at, subjects...)
			got, want := claimBoth(t, i, l, mem, c)
			if !got.Publish || rng.IntN(4) == 0 {
				continue
			}
			// The wall clock follows event time, so Settle enforces the
			// ban and its record is settled (on the offender's slot).
			now := c.Ban.TS
			l.now = func() time.Time { return now }
			before := len(bl.added())
			abusetest.Settle(t, l, got.Ban, true)
			abusetest.Settle(t, mem, want.Ban, true)
			if again := abusetest.Claim(t, l, c); again.Publish != abusetest.Claim(t, mem, c).Publish {
				t.Fatalf("claim %d again after settling: publish %v, memory differs", i, again.Publish)
			}
			if got.Ban.Action != event.ActionBan || !got.Ban.ExpiresAt.After(now) {
				continue
			}
			enforced[got.Ban.Subject] = true
			added := bl.added()
			if len(added) != before+1 || added[before].BanID != got.Ban.BanID || !added[before].ExpiresAt.Equal(got.Ban.ExpiresAt) {
				t.Errorf("claim %d: blacklist got %+v, want the ban just enforced %+v", i, added[before:], got.Ban)
			}
		}
		if len(enforced) != len(offenders) {
			t.Errorf("%d of %d offenders had a ban enforced: change the seed", len(enforced), len(offenders))
		}
		redistest.RequireExpiry(t, e.Client, prefix)
	})
}

// testClusterDistinct: random adds to sets of offenders on three primaries,
// in one pipeline per batch (calls of one offender's adds), against
// abusetest.MemoryDistinct.
func testClusterDistinct(t *testing.T, e *redistest.SharedCluster) {
	prefix := redistest.Prefix(t, e.Client)
	offenders := append(spreadOffenders(t, e, 3, event.ScopeIP), spreadOffenders(t, e, 3, event.ScopeUser)...)
	d := NewDistinct(e.Client, prefix)
	d.perCall = 4 // an offender's adds spread over several calls
	distinctDifferential(t, d, offenders, rand.New(rand.NewPCG(7, 13)), 30, 30)
	if n := redistest.RequireExpiry(t, e.Client, prefix); n == 0 {
		t.Errorf("no key written under %s", prefix)
	}
}
