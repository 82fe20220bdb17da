package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/decide/decidetest"
)

// TestDecideRandom runs random rules and request sequences (clock jumps,
// bursts, costs above quota, holds) through the scripts and the model and
// requires identical results. After each step the Redis keys are made
// persistent while the model expires its state by its own clock: results
// still agree only if expiring a key never changes a decision.
func TestDecideRandom(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	ctx := context.Background()
	sequences := 150
	if testing.Short() {
		sequences = 20
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(42, uint64(seq)))
		rule := randomRule(rng)
		keys := decidetest.Keys(prefix, strconv.Itoa(seq))
		model := decide.NewMemory()
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		var history strings.Builder
		for step := range 40 {
			now = nextNow(rng, now)
			c := rule
			c.Keys, c.NowMs, c.Cost = keys, now, randomCost(rng)
			got, err := store.Decide(ctx, []decide.Call{c})
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, step, err)
			}
			ref := model.Decide(c, 0)
			fmt.Fprintf(&history, "  now %d cost %d -> %+v\n", now, c.Cost, ref)
			if got[0] != ref {
				t.Fatalf("sequence %d step %d: redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
					seq, step, rule, got[0], history.String())
			}
			if err := client.Persist(ctx, keys.State).Err(); err != nil {
				t.Fatal(err)
			}
			client.Persist(ctx, keys.Hold)
			client.Persist(ctx, keys.Hits)
		}
	}
}

func randomRule(rng *rand.Rand) decide.Call {
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	pers := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, time.Minute, 1500 * time.Millisecond}
	c := decide.Call{Algorithm: algs[rng.IntN(len(algs))]}
	for range 1 + rng.IntN(3) {
		c.Limits = append(c.Limits, decide.Limit{
			Requests: 1 + rng.Int64N(10),
			Rate:     1 + rng.Int64N(10),
			Burst:    1 + rng.Int64N(10),
			Per:      pers[rng.IntN(len(pers))],
		})
	}
	if rng.IntN(2) == 0 {
		c.Penalty = time.Duration(100+rng.Int64N(3000)) * time.Millisecond
	}
	for range rng.IntN(3) {
		c.Escalations = append(c.Escalations, decide.Escalation{
			Triggers: 1 + rng.Int64N(4),
			Within:   time.Duration(1000+rng.Int64N(10_000)) * time.Millisecond,
			Penalty:  time.Duration(100+rng.Int64N(5000)) * time.Millisecond,
		})
	}
	return c
}

func nextNow(rng *rand.Rand, now int64) int64 {
	switch p := rng.IntN(100); {
	case p < 20: // same millisecond
		return now
	case p < 30: // clock goes back
		return now - rng.Int64N(2000)
	case p < 35: // long pause
		return now + rng.Int64N(70_000)
	default:
		return now + rng.Int64N(600)
	}
}

func randomCost(rng *rand.Rand) int64 {
	switch p := rng.IntN(100); {
	case p < 70:
		return 1
	case p < 75:
		return 0
	case p < 80:
		return 15
	default:
		return 2 + rng.Int64N(3)
	}
}

// TestSlidingWindowRandom runs long random sequences through the sliding
// window's script and the model and requires identical results: costs from
// 0 to above the largest limit, limits up to 2^53 - 1 (running totals that
// wrap), bursts in one ms, more members left behind than a call trims, and
// a clock that jumps both ways. Keys are made persistent after each step,
// as in TestDecideRandom.
func TestSlidingWindowRandom(t *testing.T) {
	client := newClient(t, redisAddr())
	store := New(client)
	prefix := testPrefix(t, client)
	ctx := context.Background()
	sequences := 40
	if testing.Short() {
		sequences = 8
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(53, uint64(seq)))
		rule := randomSlidingRule(rng)
		keys := decidetest.Keys(prefix, "sw"+strconv.Itoa(seq))
		model := decide.NewMemory()
		var maxPer int64
		for _, l := range rule.Limits {
			maxPer = max(maxPer, l.Per.Milliseconds())
		}
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		var history strings.Builder
		for step := range 300 {
			now = nextSlidingNow(rng, now, maxPer)
			c := rule
			c.Keys, c.NowMs, c.Cost = keys, now, slidingCost(rng, rule.Limits)
			got, err := store.Decide(ctx, []decide.Call{c})
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, step, err)
			}
			ref := model.Decide(c, 0)
			fmt.Fprintf(&history, "  now %d cost %d -> %+v\n", now, c.Cost, ref)
			if got[0] != ref {
				t.Fatalf("sequence %d step %d: redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
					seq, step, rule.Limits, got[0], history.String())
			}
			if err := client.Persist(ctx, keys.State).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func randomSlidingRule(rng *rand.Rand) decide.Call {
	pers := []time.Duration{5 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond, time.Second}
	requests := []func() int64{
		func() int64 { return 1 + rng.Int64N(10) },
		func() int64 { return 1_000_000 },
		func() int64 { return 4_000_000_000_000_000 + rng.Int64N(1000) },
		func() int64 { return 1<<53 - 1 - rng.Int64N(1000) },
	}
	c := decide.Call{Algorithm: decide.SlidingWindow}
	for range 1 + rng.IntN(3) {
		c.Limits = append(c.Limits, decide.Limit{
			Requests: requests[rng.IntN(len(requests))](),
			Per:      pers[rng.IntN(len(pers))],
		})
	}
	return c
}

// nextSlidingNow moves mostly by a ms or two, so a window of a second holds
// hundreds of members, and sometimes just past the largest window (leaving
// them all behind) or back by up to one and a half of it.
func nextSlidingNow(rng *rand.Rand, now, maxPer int64) int64 {
	switch p := rng.IntN(100); {
	case p < 25: // same millisecond
		return now
	case p < 85:
		return now + 1 + rng.Int64N(2)
	case p < 95: // clock goes back
		return now - rng.Int64N(maxPer+maxPer/2)
	default:
		return now + maxPer + rng.Int64N(maxPer/2+1)
	}
}

// slidingCost picks 0, 1, a few units, or a cost around one of the limits:
// all of it, one more, or a random part of it.
func slidingCost(rng *rand.Rand, limits []decide.Limit) int64 {
	q := limits[rng.IntN(len(limits))].Requests
	switch p := rng.IntN(100); {
	case p < 5:
		return 0
	case p < 45:
		return 1
	case p < 60:
		return 2 + rng.Int64N(5)
	case p < 70:
		return q
	case p < 75:
		return q + 1
	default:
		return 1 + rng.Int64N(q)
	}
}
