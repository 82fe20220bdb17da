package lease

import (
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

func leasedCall(key string, limits []decide.Limit) decide.Call {
	return decide.Call{Keys: decide.Keys{State: key}, Algorithm: decide.FixedWindow, Limits: limits, Cost: 1, Leased: true}
}

// TestTakeLifecycle walks one key through its life: cold (no lease asked),
// hot (a lease asked on the request path), served from memory until the
// lease runs low (a renewal is due), the renewal's settlement, the lease
// lapsing at its local end, and the give-back of an idle key.
func TestTakeLifecycle(t *testing.T) {
	tab := New(Config{Horizon: 50 * time.Millisecond, HotUnits: 3, Idle: time.Second})
	limits := []decide.Limit{{Requests: 1000, Per: time.Minute}}
	t0 := time.Unix(1_000_000, 0)
	take := func(at time.Duration, ask bool) (decide.Call, decide.Result, bool, bool) {
		c := leasedCall("k", limits)
		r, ok, renew := tab.Take(&c, 20, t0.Add(at))
		if !ok && ask {
			tab.Ask(&c, t0.Add(at))
		}
		return c, r, ok, renew
	}

	for i := range 2 {
		if c, _, ok, _ := take(time.Duration(i)*time.Millisecond, true); ok || c.Lease != (decide.Lease{}) {
			t.Fatalf("cold call %d: served %v or asked %+v; a cold key goes to Redis plainly", i, ok, c.Lease)
		}
	}
	c, _, ok, _ := take(2*time.Millisecond, true)
	if ok || c.Lease.Ask != 3 {
		t.Fatalf("the third call of a horizon: served %v, asked %+v; want a lease of 3 asked", ok, c.Lease)
	}
	if c2, _, _, _ := take(3*time.Millisecond, true); c2.Lease != (decide.Lease{}) {
		t.Fatalf("a second ask while one is out: %+v", c2.Lease)
	}
	sent := t0.Add(2 * time.Millisecond)
	tab.Settle(&c, decide.Result{Allowed: true, Limit: 1000, Remaining: 900, ResetAfter: 30 * time.Second,
		Granted: 10, LeaseUntil: 7_000, LeaseFor: 100 * time.Millisecond}, sent)

	for i := range 10 {
		_, r, ok, renew := take(10*time.Millisecond, true)
		if !ok || !r.Allowed || r.Remaining != 890+int64(9-i) || r.Limit != 1000 {
			t.Fatalf("hit %d: ok %v result %+v; want admitted with 890 + what the lease holds left", i, ok, r)
		}
		// The lease should hold a horizon of traffic: 5+i units asked so far
		// in this one, at most 20. It is due for renewal below half of it.
		if want := 9-i < (5+i)/2; renew != want {
			t.Fatalf("hit %d: renew %v, want %v", i, renew, want)
		}
	}
	if _, _, ok, _ := take(11*time.Millisecond, false); ok {
		t.Fatal("served from an empty lease")
	}

	r, ok := tab.Renewal(KeyOf(&c), t0.Add(12*time.Millisecond))
	if !ok || r.Cost != 0 || r.Lease.Until != 7_000 || r.Lease.Spent != 10 || r.Lease.Ask < 1 {
		t.Fatalf("renewal: %v %+v; want cost 0 settling the 10 spent of lease 7000", ok, r)
	}
	tab.Settle(&r, decide.Result{Allowed: true, Remaining: 880, Granted: 5, LeaseUntil: 7_000, LeaseFor: 50 * time.Millisecond},
		t0.Add(12*time.Millisecond))
	if _, _, ok, _ := take(60*time.Millisecond, false); !ok {
		t.Fatal("the renewed units of the same lease are not served")
	}
	if _, _, ok, _ := take(102*time.Millisecond, false); ok {
		t.Fatal("served after the lease's local end (sent + LeaseFor of its first grant)")
	}

	tab.Settle(&c, decide.Result{Granted: 4, LeaseUntil: 9_000, LeaseFor: 2 * time.Second}, t0.Add(200*time.Millisecond))
	if got := tab.Sweep(t0.Add(500*time.Millisecond), false); len(got) != 0 {
		t.Fatalf("gave back a lease in use: %+v", got)
	}
	got := tab.Sweep(t0.Add(1300*time.Millisecond), false)
	if len(got) != 1 || got[0].Lease.Unspent != 4 || got[0].Lease.Until != 9_000 || got[0].Cost != 0 {
		t.Fatalf("idle give-back: %+v, want the 4 units of lease 9000", got)
	}
	if keys, units := tab.Stats(); keys != 0 || units != 0 {
		t.Fatalf("after the sweep: %d keys, %d units", keys, units)
	}
}

// TestEvictionGivesBack fills a table past its bound: the evicted keys'
// leases come back from Sweep, and the table stays within its bound.
func TestEvictionGivesBack(t *testing.T) {
	tab := New(Config{MaxKeys: 64, HotUnits: 1})
	limits := []decide.Limit{{Requests: 1000, Per: time.Minute}}
	now := time.Unix(1_000_000, 0)
	var given int64
	for i := range 1000 {
		if i%64 == 0 { // as the renewer sweeps
			for _, c := range tab.Sweep(now, false) {
				given += c.Lease.Unspent
			}
		}
		c := leasedCall("k"+string(rune('a'+i%26))+string(rune('a'+i/26)), limits)
		if _, ok, _ := tab.Take(&c, 10, now); ok || !tab.Ask(&c, now) {
			t.Fatal("a new key served, or no lease asked for a hot one")
		}
		tab.Settle(&c, decide.Result{Allowed: true, Granted: 3, LeaseUntil: 60_000, LeaseFor: time.Minute}, now)
		now = now.Add(time.Microsecond)
	}
	keys, units := tab.Stats()
	if keys > 64+shardCount { // one a shard may pass while evicting
		t.Fatalf("%d keys, bound 64", keys)
	}
	for _, c := range tab.Sweep(now, false) {
		given += c.Lease.Unspent
	}
	if given+units != 3000 {
		t.Fatalf("units given back %d + held %d = %d, want the 3000 lent", given, units, given+units)
	}
}

// TestRulesChange: a call of other limits (another tier, a changed rule)
// never spends the lease taken under the old ones, nor ends it; a call of
// the same limits from a recompiled rule set does. Drop gives back only the
// leases whose terms the rules no longer decide alike.
func TestRulesChange(t *testing.T) {
	tab := New(Config{HotUnits: 1})
	now := time.Unix(1_000_000, 0)
	old := leasedCall("k", []decide.Limit{{Requests: 1000, Per: time.Minute}})
	tab.Take(&old, 10, now)
	tab.Ask(&old, now)
	tab.Settle(&old, decide.Result{Allowed: true, Granted: 5, LeaseUntil: 60_000, LeaseFor: time.Minute}, now)
	other := leasedCall("k", []decide.Limit{{Requests: 2000, Per: time.Minute}})
	if _, ok, _ := tab.Take(&other, 10, now); ok {
		t.Fatal("a call of other limits was served from the old limits' lease")
	}
	recompiled := leasedCall("k", []decide.Limit{{Requests: 1000, Per: time.Minute}})
	if _, ok, _ := tab.Take(&recompiled, 10, now); !ok {
		t.Fatal("a call of the same limits, recompiled, was not served from their lease")
	}
	kept := func(_ string, limits []decide.Limit) bool { return limits[0].Requests == 1000 }
	if got := tab.Drop(now, kept); len(got) != 0 {
		t.Fatalf("gave back leases whose terms stayed: %+v", got)
	}
	if _, ok, _ := tab.Take(&old, 10, now); !ok {
		t.Fatal("the lease of unchanged terms ended with a rules change")
	}
	got := tab.Drop(now, func(string, []decide.Limit) bool { return false })
	if len(got) != 1 || got[0].Lease.Unspent != 3 || got[0].Lease.Spent != 2 {
		t.Fatalf("changed terms: gave back %+v, want the 3 units left and the 2 spent settled", got)
	}
}

// TestRevalidateAndRevoke: the lease of a rule that debits denied calls
// answers only while Redis found its key within the limit in the last
// Revalidate (a renewal is due after half of it); Revoke ends it at once,
// asks to tell the others once a Revalidate, and a grant asked before it
// goes back rather than into the lease.
func TestRevalidateAndRevoke(t *testing.T) {
	tab := New(Config{HotUnits: 1, Revalidate: time.Second})
	t0 := time.Unix(1_000_000, 0)
	c := leasedCall("k", []decide.Limit{{Requests: 1000, Per: time.Hour}})
	c.DebitDenied, c.Cost = true, 0
	take := func(at time.Duration) (ok, renew bool) {
		c := c
		_, ok, renew = tab.Take(&c, 100, t0.Add(at))
		return ok, renew
	}
	grant := func() {
		c := c
		if _, ok, _ := tab.Take(&c, 100, t0); ok || !tab.Ask(&c, t0) {
			t.Fatal("no lease asked")
		}
		tab.Settle(&c, decide.Result{Allowed: true, Granted: 10, LeaseUntil: 4_000_000, LeaseFor: time.Hour}, t0)
	}
	grant()
	if ok, renew := take(400 * time.Millisecond); !ok || renew {
		t.Fatalf("0.4 s after Redis vouched for the key: served %v, renewal due %v", ok, renew)
	}
	if ok, renew := take(600 * time.Millisecond); !ok || !renew {
		t.Fatalf("0.6 s after: served %v, renewal due %v; want served, and a renewal due", ok, renew)
	}
	if ok, _ := take(time.Second); ok {
		t.Fatal("served a second after Redis last vouched for the key")
	}
	// A lease that holds its bound (checks of cost 0 spend nothing) has
	// Redis vouch for its key without asking for more.
	full := c
	full.Keys.State = "full"
	tab.Take(&full, 10, t0)
	tab.Ask(&full, t0)
	tab.Settle(&full, decide.Result{Allowed: true, Granted: 10, LeaseUntil: 4_000_000, LeaseFor: time.Hour}, t0)
	if r, ok := tab.Renewal(KeyOf(&full), t0.Add(600*time.Millisecond)); !ok || r.Lease.Ask != 0 || r.Lease.Until == 0 {
		t.Fatalf("the renewal of a full lease: %v %+v; want one asking nothing", ok, r.Lease)
	}

	tab = New(Config{HotUnits: 1, Revalidate: time.Second})
	grant()
	out, ok := tab.Renewal(KeyOf(&c), t0) // asked before the revocation, answered after it
	if !ok {
		t.Fatal("no renewal")
	}
	if !tab.Revoke("k", t0.Add(100*time.Millisecond)) {
		t.Fatal("the first revocation does not ask to tell the others")
	}
	if ok, _ := take(150 * time.Millisecond); ok {
		t.Fatal("a revoked lease served")
	}
	if tab.Revoke("k", t0.Add(500*time.Millisecond)) {
		t.Fatal("a second revocation within a Revalidate asks to tell the others again")
	}
	tab.Settle(&out, decide.Result{Allowed: true, Granted: 7, LeaseUntil: 4_000_000, LeaseFor: time.Hour}, t0)
	if ok, _ := take(600 * time.Millisecond); ok {
		t.Fatal("a grant asked before the revocation served")
	}
	var back int64
	for _, g := range tab.Sweep(t0.Add(700*time.Millisecond), false) {
		back += g.Lease.Unspent
	}
	if back != 10+7 {
		t.Fatalf("gave back %d units, want the 10 held and the 7 granted late", back)
	}
	if !tab.Revoke("k", t0.Add(1200*time.Millisecond)) {
		t.Fatal("a revocation a Revalidate later does not ask to tell the others")
	}
}

// TestGiveBackDuringRenewal: what a renewal out carries as spent is settled
// by it alone. A give-back while it is out (a rules change, an idle sweep,
// an eviction) carries only what was spent since, and what a renewal whose
// answer was lost carried is never sent again.
func TestGiveBackDuringRenewal(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, release := range []struct {
		name string
		give func(tab *Table) []decide.Call
	}{
		{"rules change", func(tab *Table) []decide.Call {
			return tab.Drop(now, func(string, []decide.Limit) bool { return false })
		}},
		{"idle sweep", func(tab *Table) []decide.Call { return tab.Sweep(now.Add(2*time.Second), false) }},
		{"stop", func(tab *Table) []decide.Call { return tab.Sweep(now, true) }},
	} {
		t.Run(release.name, func(t *testing.T) {
			tab := New(Config{HotUnits: 1, Idle: time.Second})
			c := leasedCall("k", []decide.Limit{{Rate: 1, Burst: 100, Per: time.Second}})
			c.Algorithm = decide.TokenBucket
			tab.Take(&c, 50, now)
			tab.Ask(&c, now)
			tab.Settle(&c, decide.Result{Allowed: true, Granted: 20, LeaseUntil: 1_000_005_000, LeaseFor: time.Hour}, now)
			take := func(n int) {
				for range n {
					c := c
					if _, ok, _ := tab.Take(&c, 50, now); !ok {
						t.Fatal("not served from the lease")
					}
				}
			}
			take(4)
			renewal, ok := tab.Renewal(KeyOf(&c), now)
			if !ok || renewal.Lease.Spent != 4 {
				t.Fatalf("renewal %v %+v: want the 4 spent", ok, renewal.Lease)
			}
			take(2)
			var spent, unspent int64
			for _, g := range release.give(tab) {
				spent, unspent = spent+g.Lease.Spent, unspent+g.Lease.Unspent
			}
			if spent != 2 || unspent != 14 {
				t.Fatalf("gave back %d spent and %d unspent while the renewal carried 4: want the 2 spent since and the 14 left", spent, unspent)
			}
		})
	}
	t.Run("lost answer", func(t *testing.T) {
		tab := New(Config{HotUnits: 1})
		c := leasedCall("k", []decide.Limit{{Rate: 1, Burst: 100, Per: time.Second}})
		c.Algorithm = decide.TokenBucket
		tab.Take(&c, 50, now)
		tab.Ask(&c, now)
		tab.Settle(&c, decide.Result{Allowed: true, Granted: 20, LeaseUntil: 1_000_005_000, LeaseFor: time.Hour}, now)
		for range 3 {
			c := c
			tab.Take(&c, 50, now)
		}
		renewal, _ := tab.Renewal(KeyOf(&c), now)
		tab.Failed(&renewal, now)
		again, ok := tab.Renewal(KeyOf(&c), now.Add(time.Second))
		if !ok || again.Lease.Spent != 0 {
			t.Fatalf("the renewal after a lost answer: %v %+v; want none of the 3 spent sent again", ok, again.Lease)
		}
	})
}
