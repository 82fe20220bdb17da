package decide_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestLeaseNeverExceeds plays several limiters leasing one key in random
// sequences and replays what they admitted, at the instants they admitted
// it, through the unleased model: a fresh key must admit every one of
// those requests. That is the guarantee of leases: whatever the holders
// do, their admissions are a sequence the rule itself would have admitted.
func TestLeaseNeverExceeds(t *testing.T) {
	sequences := 400
	if testing.Short() {
		sequences = 60
	}
	var admitted, units int64
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(36, uint64(seq)))
		rule := decidetest.RandomLeaseRule(rng)
		holders := make([]decidetest.Holder, 1+rng.IntN(4))
		steps := decidetest.RandomLeaseSteps(rng, len(holders), 300, 1_000_000+rng.Int64N(1_000_000))
		model := decide.NewMemory()
		var log []decidetest.Admission
		for _, s := range steps {
			h := &holders[s.Holder]
			if !s.GiveBack && s.Cost > 0 && h.Spend(s.Now, s.Cost) {
				log = append(log, decidetest.Admission{At: s.Now, Cost: s.Cost})
				continue
			}
			c := rule
			c.Keys = decidetest.Keys("lease", "k")
			c.NowMs, c.Cost = s.Now, s.Cost
			c.Lease = h.Lease(s.Now, s.Ask, s.GiveBack)
			r := model.Decide(c, 0)
			h.Settle(s.Now, c.Lease, r)
			if r.Allowed && s.Cost > 0 {
				log = append(log, decidetest.Admission{At: s.Now, Cost: s.Cost})
			}
			units += r.Granted
		}
		replay := decide.NewMemory()
		plain := rule
		plain.Leased, plain.DebitDenied = false, false
		plain.Keys = decidetest.Keys("replay", "k")
		for i, a := range log {
			c := plain
			c.NowMs, c.Cost = a.At, a.Cost
			if r := replay.Decide(c, 0); !r.Allowed {
				t.Fatalf("sequence %d: admission %d of %d (at %d, cost %d) passes the limit of %+v (%s, %d holders)",
					seq, i, len(log), a.At, a.Cost, rule.Limits, rule.Algorithm, len(holders))
			}
		}
		admitted += int64(len(log))
	}
	if units == 0 || admitted == 0 {
		t.Fatalf("no lease was granted (%d units) or nothing admitted (%d): the test proves nothing", units, admitted)
	}
	t.Logf("%d admissions, %d units lent", admitted, units)
}

// TestLeaseGrant pins the protocol on a fixed window: a grant is at most
// half of what is left, ends with the window, and a give-back returns the
// units to the window it was lent in and to no other.
func TestLeaseGrant(t *testing.T) {
	m := decide.NewMemory()
	call := func(now, cost int64, l decide.Lease) decide.Result {
		c := decide.Call{Algorithm: decide.FixedWindow, Leased: true, Limits: []decide.Limit{{Requests: 100, Per: time.Second}},
			Keys: decidetest.Keys("grant", "k"), NowMs: now, Cost: cost, Lease: l}
		return m.Decide(c, 0)
	}
	r := call(5_000_200, 1, decide.Lease{Ask: 80})
	if !r.Allowed || r.Granted != 49 || r.LeaseUntil != 5_001_000 || r.LeaseFor != 799*time.Millisecond || r.Remaining != 99 {
		t.Fatalf("first grant: %+v, want 49 of the 99 left, until the window's end, for 799 ms from the end of the millisecond it ran in", r)
	}
	r = call(5_000_300, 0, decide.Lease{Ask: 80, Until: 5_001_000})
	if r.Granted != 25 || r.Remaining != 50 {
		t.Fatalf("second grant: %+v, want half of the 50 left", r)
	}
	r = call(5_000_400, 0, decide.Lease{Until: 5_001_000, Unspent: 70})
	if r.Granted != 0 || r.Remaining != 95 {
		t.Fatalf("give-back: %+v, want 70 units back, 95 left", r)
	}
	call(5_000_500, 0, decide.Lease{Ask: 10, Until: 5_001_000})
	r = call(5_001_100, 0, decide.Lease{Until: 5_001_000, Unspent: 10})
	if r.Remaining != 100 {
		t.Fatalf("a give-back after its window: %+v, want nothing credited to the next window", r)
	}
	for _, want := range []int64{50, 25, 12, 6, 3, 2, 1, 0} {
		if r = call(5_001_200, 0, decide.Lease{Ask: 1000}); r.Granted != want {
			t.Fatalf("grants as the window runs low: got %d, want %d", r.Granted, want)
		}
	}
	if r.Remaining != 1 {
		t.Fatalf("the last unit is left for a call of its own: %+v", r)
	}
}
