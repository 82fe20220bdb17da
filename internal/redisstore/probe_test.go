package redisstore

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/testkit/decidetest"
)

// TestProbeRandom runs the calls of a rule spent by outcome reports through
// every variant of the scripts, the counted fixed window, and the model:
// checks are probes of cost 1, denied once no unit is left; reports debit
// their cost whether it fits or not. Results must agree, and a probe
// decided by a script must leave the rule's state exactly as it found it.
func TestProbeRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	ctx := context.Background()
	algs := []decide.Algorithm{decide.FixedWindow, decide.SlidingWindow, decide.SlidingWindowCounter, decide.TokenBucket}
	sequences := 80
	if testing.Short() {
		sequences = 16
	}
	for seq := range sequences {
		rule := randomRule(rand.New(rand.NewPCG(71, uint64(seq))))
		rule.Algorithm, rule.Penalty, rule.Escalations, rule.DebitDenied = algs[seq%len(algs)], 0, nil, true
		if seq%3 == 0 {
			rule.Limits = rule.Limits[:1]
		}
		counted := rule.Counted()
		for _, v := range append(variantsFor(store, &rule), "counted") {
			if v == "counted" && !counted {
				continue
			}
			rng := rand.New(rand.NewPCG(71, uint64(seq)))
			keys := decidetest.Keys(prefix, "probe"+strconv.Itoa(seq)+string(v))
			now := 1_000_000 + rng.Int64N(1_000_000_000)
			model := decide.NewMemory()
			for i := range 60 {
				c := rule
				c.Keys = keys
				now += rng.Int64N(400)
				c.NowMs = now
				if rng.IntN(2) == 0 {
					c.Probe, c.DebitDenied, c.Cost = true, false, 1
				} else {
					c.Cost = randomCost(rng)
				}
				before := client.Dump(ctx, keys.State).Val()
				var got decide.Result
				var err error
				if v == "counted" {
					got, err = decideCountedPersistent(ctx, client, c)
				} else {
					got, err = decidePersistent(ctx, client, as(store, v), c)
				}
				if err != nil {
					t.Fatalf("sequence %d %s step %d: %v", seq, v, i, err)
				}
				if after := client.Dump(ctx, keys.State).Val(); c.Probe && after != before {
					t.Fatalf("sequence %d %s step %d: a probe changed the state", seq, v, i)
				}
				if ref := model.Decide(c, 0); got != ref {
					t.Fatalf("sequence %d %s step %d (now %d, cost %d, probe %v, limits %+v): redis %+v, model %+v",
						seq, v, i, c.NowMs, c.Cost, c.Probe, c.Limits, got, ref)
				}
			}
		}
	}
}
