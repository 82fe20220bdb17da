package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestGiveBackRandom interleaves give-backs of earlier admitted calls, in
// random order and at random later times (clock jumps both ways, pauses
// past every window and lease slot), with the decisions of random rules of
// every algorithm, with and without holds, leased or not, through the
// scripts and the model: decisions and the units given back must be
// identical. Each decision makes the keys persistent (as TestDecideRandom),
// and a give-back sets no expiry.
func TestGiveBackRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 160
	if testing.Short() {
		sequences = 24
	}
	var given, kept int
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(61, uint64(seq)))
		rule := randomRule(rng)
		if seq%3 == 2 && rule.Algorithm != decide.SlidingWindow {
			rule.Leased, rule.Penalty, rule.Escalations = true, 0, nil
		}
		if rule.Counted() { // counted calls keep a counter per window: TestGiveBackCounted
			rule.Penalty = 1500 * time.Millisecond
		}
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		g, k := compareGiveBacks(t, client, store, seq, rule, decidetest.Keys(prefix, "gb"+strconv.Itoa(seq)), 80, rng, func(c *decide.Call) {
			now = nextNow(rng, now)
			c.NowMs, c.Cost = now, randomCost(rng)
			if c.Leased {
				c.Lease.Ask = rng.Int64N(5)
			}
		})
		given, kept = given+g, kept+k
	}
	requireBoth(t, given, kept)
}

// requireBoth fails unless some give-backs gave units back and some gave
// none: a random test that never reached one of them proves nothing of it.
func requireBoth(t *testing.T, given, kept int) {
	t.Helper()
	t.Logf("%d give-backs gave units back, %d gave none", given, kept)
	if given == 0 || kept == 0 {
		t.Errorf("%d give-backs gave units back, %d gave none: want some of each", given, kept)
	}
}

// TestGiveBackSlidingRandom is TestGiveBackRandom on long sliding window
// logs: give-backs of members with none, a few and more than
// decide.MaxGiveBackShift members after them, totals that wrap 2^53.
func TestGiveBackSlidingRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 40
	if testing.Short() {
		sequences = 8
	}
	var given, kept int
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(67, uint64(seq)))
		rule := randomSlidingRule(rng)
		var maxPer int64
		for _, l := range rule.Limits {
			maxPer = max(maxPer, l.Per.Milliseconds())
		}
		clock := slidingClock(rng, 1_000_000+rng.Int64N(1_000_000_000), maxPer)
		g, k := compareGiveBacks(t, client, store, seq, rule, decidetest.Keys(prefix, "gbsw"+strconv.Itoa(seq)), 300, rng, func(c *decide.Call) {
			c.NowMs, c.Cost = clock(), slidingCost(rng, rule.Limits, seq%2 == 0)
		})
		given, kept = given+g, kept+k
	}
	requireBoth(t, given, kept)
}

// compareGiveBacks runs steps steps on keys: mostly a call of rule, as step
// sets it, decided by the leanest script and the model; one time in four a
// give-back of an earlier admitted call, each given back once, at the time
// of the last call, by give_back.lua and the model. It fails at the first
// difference, with the model's history, and returns how many give-backs
// gave units back and how many gave none.
func compareGiveBacks(t *testing.T, client *redis.Client, store *Store, seq int, rule decide.Call, keys decide.Keys, steps int,
	rng *rand.Rand, step func(*decide.Call)) (given, kept int) {
	t.Helper()
	ctx := context.Background()
	model := decide.NewMemory()
	var history strings.Builder
	var admitted []decide.GiveBack
	var now int64
	for i := range steps {
		if len(admitted) > 0 && rng.IntN(4) == 0 {
			j := rng.IntN(len(admitted))
			g := admitted[j]
			admitted = slices.Delete(admitted, j, j+1)
			got, errs := store.giveBack(ctx, []decide.GiveBack{g}, now)
			if errs != nil {
				t.Fatalf("sequence %d step %d: give-back: %v", seq, i, errs[0])
			}
			want := model.GiveBack(g, now)
			fmt.Fprintf(&history, "  give back at %d the call of %d (units %d) -> %d\n", now, g.Result.At, g.Units(), want)
			if got[0] != want {
				t.Fatalf("sequence %d step %d (key %s): give-back of the call at %d: redis %d units, model %d\nrule %+v\nhistory (model):\n%s",
					seq, i, keys.State, g.Result.At, got[0], want, rule, history.String())
			}
			if want > 0 {
				given++
			} else {
				kept++
			}
			continue
		}
		c := rule
		c.Keys = keys
		step(&c)
		now = c.NowMs
		got, err := decidePersistent(ctx, client, store.scriptOf, c)
		if err != nil {
			t.Fatalf("sequence %d step %d: %v", seq, i, err)
		}
		ref := model.Decide(c, 0)
		fmt.Fprintf(&history, "  now %d cost %d ask %d -> %+v\n", c.NowMs, c.Cost, c.Lease.Ask, ref)
		if got != ref {
			t.Fatalf("sequence %d step %d (key %s): redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
				seq, i, keys.State, rule, got, history.String())
		}
		if g, ok := decide.GiveBackOf(c, got); ok {
			admitted = append(admitted, g)
		}
	}
	return given, kept
}
