package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
	"github.com/ratewarden/ratewarden/lua"
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
			got, state, ttl, err := decideLeasePersistent(context.Background(), client, store, c)
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			if c.Algorithm == decide.TokenBucket {
				checkBucketExpiry(t, c, state, ttl)
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

// decideLeasePersistent is decidePersistent for a leased call, also
// returning the key's hash and its expiry as the script left them.
func decideLeasePersistent(ctx context.Context, client *redis.Client, store *Store, c decide.Call) (decide.Result, map[string]string, time.Duration, error) {
	var state *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	r, err := decideReadPersist(ctx, client, store.prepare, c, func(pipe redis.Pipeliner) {
		state = pipe.HGetAll(ctx, c.Keys.State)
		ttl = pipe.PTTL(ctx, c.Keys.State)
	})
	if err != nil {
		return r, nil, 0, err
	}
	return r, state.Val(), ttl.Val(), nil
}

// checkBucketExpiry requires a token bucket's key to outlive what it
// holds: until every bucket is full at its real burst (its absence reads as
// full), and while units lent count (lo), until their slot ends (ld). The
// expiry is the one the script set at the call's time (the transaction
// reads it at once); a key without one was made persistent by an earlier
// step and not written since.
func checkBucketExpiry(t *testing.T, c decide.Call, state map[string]string, ttl time.Duration) {
	t.Helper()
	if ttl < 0 || len(state) == 0 {
		return
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(state[f], 10, 64); return n }
	need := int64(0)
	for _, l := range c.Limits {
		per := strconv.FormatInt(l.Per.Milliseconds(), 10)
		if _, ok := state["t:"+per]; !ok {
			continue
		}
		tokens, rem, upd := num("t:"+per), num("r:"+per), num("u:"+per)
		if full := l.Burst * 1000; tokens < full {
			fill := ((full-tokens)*l.Per.Milliseconds() - rem + l.Rate*1000 - 1) / (l.Rate * 1000)
			need = max(need, upd+fill+1-c.NowMs)
		}
	}
	if lo, ld := num("lo"), num("ld"); lo > 0 && ld > c.NowMs {
		need = max(need, ld-c.NowMs)
	}
	if ttl.Milliseconds()+1 < need { // PTTL reads a moment after the script set it
		t.Fatalf("now %d: the key expires in %v, before it may (%d ms): %v", c.NowMs, ttl, need, state)
	}
}

// TestLeaseSlotAgrees: the script and the model end a token bucket's
// leases with the same slot.
func TestLeaseSlotAgrees(t *testing.T) {
	src := lua.Script(string(decide.TokenBucket), lua.Lease, lua.DebitAdmitted)
	if want := fmt.Sprintf("local LEASE_SLOT = %d ", decide.LeaseSlot); !strings.Contains(src, want) {
		t.Fatalf("lua/lease.lua does not say %q", want)
	}
}
