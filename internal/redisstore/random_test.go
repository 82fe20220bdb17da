package redisstore

import (
	"context"
	"fmt"
	"math"
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

// TestDecideRandom runs random rules and request sequences (clock jumps,
// bursts, costs above quota, holds) through the scripts and the model and
// requires identical results, for every variant of the scripts that can
// decide the rule. Each step makes the Redis keys persistent while the
// model expires its state by its own clock: results still agree only if
// expiring a key never changes a decision.
func TestDecideRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 150
	if testing.Short() {
		sequences = 20
	}
	for seq := range sequences {
		rule := randomRule(rand.New(rand.NewPCG(42, uint64(seq))))
		for _, v := range variantsFor(store, &rule) {
			rng := rand.New(rand.NewPCG(42, uint64(seq)))
			randomRule(rng) // the same steps for every variant
			keys := decidetest.Keys(prefix, strconv.Itoa(seq)+string(v))
			now := 1_000_000 + rng.Int64N(1_000_000_000)
			compareSteps(t, client, as(store, v), seq, rule, keys, 40, func(c *decide.Call) {
				now = nextNow(rng, now)
				c.NowMs, c.Cost = now, randomCost(rng)
			})
		}
	}
}

// TestLeanRandom is TestDecideRandom for rules without penalty or
// escalations, half of them of one limit: the lean scripts, the full ones
// and the model must agree.
func TestLeanRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 120
	if testing.Short() {
		sequences = 20
	}
	for seq := range sequences {
		rule := randomRule(rand.New(rand.NewPCG(7, uint64(seq))))
		rule.Penalty, rule.Escalations = 0, nil
		if seq%2 == 0 {
			rule.Limits = rule.Limits[:1]
		}
		for _, v := range variantsFor(store, &rule) {
			rng := rand.New(rand.NewPCG(7, uint64(seq)))
			randomRule(rng)
			keys := decidetest.Keys(prefix, "lean"+strconv.Itoa(seq)+string(v))
			now := 1_000_000 + rng.Int64N(1_000_000_000)
			compareSteps(t, client, as(store, v), seq, rule, keys, 60, func(c *decide.Call) {
				now = nextNow(rng, now)
				c.NowMs, c.Cost = now, randomCost(rng)
			})
		}
	}
}

// TestVariantSwitchRandom moves keys between the variants mid-sequence:
// each step drops the rule's penalty and escalations or keeps them, so the
// store sends it to a lean script or to the full one, on the same state,
// and the model decides the same calls. Counts must carry over both ways.
// A fixed window of one limit without holds goes to its script here, not
// counted as the store would: a counted call keeps its count apart.
func TestVariantSwitchRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 120
	if testing.Short() {
		sequences = 20
	}
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(11, uint64(seq)))
		rule := randomRule(rng)
		if seq%2 == 0 {
			rule.Limits = rule.Limits[:1]
		}
		if rule.Penalty == 0 && len(rule.Escalations) == 0 {
			rule.Penalty = 1500 * time.Millisecond
		}
		keys := decidetest.Keys(prefix, "switch"+strconv.Itoa(seq))
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		compareSteps(t, client, store.scriptOf, seq, rule, keys, 60, func(c *decide.Call) {
			now = nextNow(rng, now)
			c.NowMs, c.Cost = now, randomCost(rng)
			if rng.IntN(2) == 0 {
				c.Penalty, c.Escalations = 0, nil
			}
		})
	}
}

// differentialEnv is a client of the test Redis, a Store with its scripts
// loaded, and a key prefix of the test's own.
func differentialEnv(t *testing.T) (*redis.Client, *Store, string) {
	t.Helper()
	client := newClient(t, redisAddr())
	store := New(client)
	if err := store.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return client, store, testPrefix(t, client)
}

// as returns the preparation of calls for variant v of their scripts.
func as(store *Store, v lua.Variant) func(*decide.Call) scriptCall {
	return func(c *decide.Call) scriptCall { return store.prepareAs(c, v) }
}

// compareSteps decides steps calls of rule on keys through the scripts that
// prepare picks and through a fresh model, each call as step sets its time,
// cost and anything else, and fails at the first difference with the
// model's history.
func compareSteps(t *testing.T, client *redis.Client, prepare func(*decide.Call) scriptCall, seq int, rule decide.Call, keys decide.Keys, steps int, step func(*decide.Call)) {
	t.Helper()
	model := decide.NewMemory()
	var history strings.Builder
	for i := range steps {
		c := rule
		c.Keys = keys
		step(&c)
		got, err := decidePersistent(context.Background(), client, prepare, c)
		if err != nil {
			t.Fatalf("sequence %d step %d: %v", seq, i, err)
		}
		ref := model.Decide(c, 0)
		fmt.Fprintf(&history, "  now %d cost %d penalty %v escalations %d -> %+v\n", c.NowMs, c.Cost, c.Penalty, len(c.Escalations), ref)
		if got != ref {
			t.Fatalf("sequence %d step %d (key %s): redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
				seq, i, keys.State, rule, got, history.String())
		}
	}
}

// decidePersistent decides c with the script prepare picks and makes its
// keys persistent in one transaction. Apart, a key whose TTL (counted from
// the call's NowMs, often a few ms) ran out on the server's clock in
// between would lose state the model keeps, as soon as the machine is slow.
func decidePersistent(ctx context.Context, client *redis.Client, prepare func(*decide.Call) scriptCall, c decide.Call) (decide.Result, error) {
	return decideReadPersist(ctx, client, prepare, c, nil, nil)
}

// decideReadPersist is decidePersistent, queuing before's commands ahead of
// the script and read's between the script and PERSIST, in the same
// transaction: read sees the keys as the script left them, expiry included.
func decideReadPersist(ctx context.Context, client *redis.Client, prepare func(*decide.Call) scriptCall, c decide.Call,
	before, read func(redis.Pipeliner)) (decide.Result, error) {
	if err := c.Validate(); err != nil {
		return decide.Result{}, err
	}
	sc := prepare(&c)
	scKeys, scArgs := sc.keysArgs()
	var cmd *redis.Cmd
	_, err := client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		if before != nil {
			before(pipe)
		}
		cmd = sc.script.EvalSha(ctx, pipe, scKeys, scArgs...)
		if read != nil {
			read(pipe)
		}
		for _, key := range keys(&c) {
			pipe.Persist(ctx, key)
		}
		return nil
	})
	if err != nil {
		return decide.Result{}, err
	}
	return parse(cmd)
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
	c.DebitDenied = rng.IntN(2) == 0
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
// window's scripts (every variant) and the model and requires identical
// results: costs from 0 to above the largest limit, limits up to 2^53 - 1
// (running totals that wrap), bursts in one ms, more members left behind
// than a call trims, and a clock that jumps both ways. Each step makes the
// key persistent, as in TestDecideRandom.
func TestSlidingWindowRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 40
	if testing.Short() {
		sequences = 8
	}
	for seq := range sequences {
		first := randomSlidingRule(rand.New(rand.NewPCG(53, uint64(seq))))
		for _, v := range variantsFor(store, &first) { // the same steps for every variant
			rng := rand.New(rand.NewPCG(53, uint64(seq)))
			rule := randomSlidingRule(rng)
			small := seq%2 == 0 // costs of a few units: logs of hundreds of members
			keys := decidetest.Keys(prefix, "sw"+strconv.Itoa(seq)+string(v))
			var maxPer int64
			for _, l := range rule.Limits {
				maxPer = max(maxPer, l.Per.Milliseconds())
			}
			clock := slidingClock(rng, 1_000_000+rng.Int64N(1_000_000_000), maxPer)
			compareSteps(t, client, as(store, v), seq, rule, keys, 300, func(c *decide.Call) {
				c.NowMs, c.Cost = clock(), slidingCost(rng, rule.Limits, small)
			})
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
	c.DebitDenied = rng.IntN(2) == 0
	return c
}

// slidingClock returns a clock that moves mostly by a ms or two, so a
// window of a second holds hundreds of members, and now and then jumps just
// past the largest window (leaving every member behind, more than a call
// trims), steps back by up to one and a half of it, or reads that far back
// once, likeliest right after a jump, when members left behind but not yet
// trimmed count again.
func slidingClock(rng *rand.Rand, start, maxPer int64) func() int64 {
	now, jumped := start, false
	return func() int64 {
		p := rng.IntN(1000)
		if jumped && rng.IntN(2) == 0 {
			p = 925
		}
		jumped = false
		switch {
		case p < 250: // same millisecond
		case p < 925:
			now += 1 + rng.Int64N(2)
		case p < 965:
			return now - rng.Int64N(maxPer+maxPer/2)
		case p < 975:
			now -= rng.Int64N(maxPer + maxPer/2)
		default:
			now += maxPer + rng.Int64N(maxPer/2+1)
			jumped = true
		}
		return now
	}
}

// slidingCost picks 0, 1, a few units, or a cost around one of the limits:
// all of it, one more, or a random part of it. When small, the only cost
// around a limit is one more (always denied), so logs grow long.
func slidingCost(rng *rand.Rand, limits []decide.Limit, small bool) int64 {
	q := limits[rng.IntN(len(limits))].Requests
	p := rng.IntN(100)
	if small && p >= 60 {
		if p < 65 {
			return q + 1
		}
		p = rng.IntN(60)
	}
	switch {
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

// TestWindowCounterRandom runs random sequences through the sliding window
// counter's scripts (every variant) and the model, with windows of a few
// ms, so that the edges of its integer arithmetic come up: a previous
// window that lets a call in only at the window's last ms, an estimate
// exactly at the limit, waits that reach into the next window.
func TestWindowCounterRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 60
	if testing.Short() {
		sequences = 10
	}
	rule := func(rng *rand.Rand) decide.Call {
		pers := []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 7 * time.Millisecond, 20 * time.Millisecond}
		c := decide.Call{Algorithm: decide.SlidingWindowCounter}
		for range 1 + rng.IntN(2) {
			c.Limits = append(c.Limits, decide.Limit{Requests: 1 + rng.Int64N(40), Per: pers[rng.IntN(len(pers))]})
		}
		c.DebitDenied = rng.IntN(2) == 0
		return c
	}
	for seq := range sequences {
		first := rule(rand.New(rand.NewPCG(29, uint64(seq))))
		for _, v := range variantsFor(store, &first) { // the same steps for every variant
			rng := rand.New(rand.NewPCG(29, uint64(seq)))
			rule := rule(rng)
			keys := decidetest.Keys(prefix, "swc"+strconv.Itoa(seq)+string(v))
			clock := slidingClock(rng, 1_000_000+rng.Int64N(1_000_000_000), 20)
			compareSteps(t, client, as(store, v), seq, rule, keys, 200, func(c *decide.Call) {
				c.NowMs, c.Cost = clock(), slidingCost(rng, rule.Limits, seq%2 == 0)
			})
		}
	}
}

// TestDebitBoundsRandom runs calls that debit denied calls with the largest
// costs a caller can send (a hits_addend of 2^32 - 1) on windows of an hour
// and a day, and costs up to 2^52 on the sliding window's log, through every
// variant of the scripts and the model: usage reaches its caps (decide.MaxUsage
// and the caps derived from it), and the results still agree. Without the
// caps they part: the model's int64 and Lua's doubles round differently.
func TestDebitBoundsRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	pers := []time.Duration{time.Hour, 24 * time.Hour}
	for seq := range 24 {
		rng := rand.New(rand.NewPCG(97, uint64(seq)))
		alg := algs[seq%len(algs)]
		per := pers[rng.IntN(len(pers))]
		rule := decide.Call{Algorithm: alg, DebitDenied: true, Limits: []decide.Limit{
			{Requests: 1000, Rate: 1, Burst: 1000, Per: per},
			{Requests: 1 << 20, Rate: 1, Burst: 1 << 20, Per: per / 2},
		}[:1+rng.IntN(2)]}
		maxCost := int64(math.MaxUint32)
		if alg == decide.SlidingWindow {
			maxCost = 1 << 52
		}
		for _, v := range variantsFor(store, &rule) {
			rng := rand.New(rand.NewPCG(97, uint64(seq)))
			keys := decidetest.Keys(prefix, "debit"+strconv.Itoa(seq)+string(v))
			now := 1_000_000 + rng.Int64N(1_000_000_000)
			compareSteps(t, client, as(store, v), seq, rule, keys, 30, func(c *decide.Call) {
				now += rng.Int64N(5000)
				c.NowMs = now
				switch p := rng.IntN(10); {
				case p < 3:
					c.Cost = 0
				case p < 5:
					c.Cost = 1 + rng.Int64N(1000)
				case p < 8:
					c.Cost = maxCost
				default:
					c.Cost = 1 + rng.Int64N(maxCost)
				}
			})
		}
	}
}
