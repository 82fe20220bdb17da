package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestLeaseRandom plays several limiters leasing one key (grants, spending
// from the lease, settling, giving back, lapsing with the window or slot)
// through lua/lease.lua on Redis and through the model, and requires
// identical answers to every leased call. Keys are made persistent after
// each call, as in TestDecideRandom: answers agree only if a key's expiry
// never changes a decision.
func TestLeaseRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 120
	if testing.Short() {
		sequences = 20
	}
	var granted int64
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(361, uint64(seq)))
		rule := decidetest.RandomLeaseRule(rng)
		holders := make([]decidetest.Holder, 1+rng.IntN(3))
		keys := decidetest.Keys(prefix, "lease"+strconv.Itoa(seq))
		model := decide.NewMemory()
		for i, s := range decidetest.RandomLeaseSteps(rng, len(holders), 120, 1_000_000+rng.Int64N(1_000_000_000)) {
			h := &holders[s.Holder]
			if !s.GiveBack && s.Cost > 0 && h.Spend(s.Now, s.Cost) {
				continue
			}
			c := rule
			c.Keys, c.NowMs, c.Cost = keys, s.Now, s.Cost
			c.Lease = h.Lease(s.Now, s.Ask, s.GiveBack)
			got, err := decidePersistent(context.Background(), client, store.prepare, c)
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			if ref := model.Decide(c, 0); got != ref {
				t.Fatalf("sequence %d step %d (%s %+v, now %d, cost %d, lease %+v): redis %+v, model %+v",
					seq, i, rule.Algorithm, rule.Limits, c.NowMs, c.Cost, c.Lease, got, ref)
			}
			h.Settle(s.Now, c.Lease, got)
			granted += got.Granted
		}
	}
	if granted == 0 {
		t.Fatal("no lease was granted: the test compares nothing of leases")
	}
}
