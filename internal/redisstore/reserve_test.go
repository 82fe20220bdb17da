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
)

// TestReserveScenarios runs the reservation scenarios as runScenarios
// does: every key left, records included, must expire.
func TestReserveScenarios(t *testing.T) { runScenarios(t, decidetest.ReserveScenarios()) }

// TestReserveRandom runs random sequences of takes (of a few ids, so that
// ids are taken again after their settle), settles (of reserved, settled,
// lapsed and never reserved ids), plain report debits and checks that
// only ask, on fixed windows and token buckets of random limits, on a
// clock that jumps both ways, through the scripts and the model: every
// result must be the same. Each step makes the keys persistent, records
// included, as TestDecideRandom's, so that only the lapse time a record
// holds decides.
func TestReserveRandom(t *testing.T) {
	client, store, prefix := differentialEnv(t)
	sequences := 100
	if testing.Short() {
		sequences = 20
	}
	ctx := context.Background()
	for seq := range sequences {
		rng := rand.New(rand.NewPCG(46, uint64(seq)))
		rule := randomRule(rng)
		rule.Penalty, rule.Escalations, rule.DebitDenied = 0, nil, false
		rule.Algorithm = []decide.Algorithm{decide.FixedWindow, decide.TokenBucket}[seq%2]
		if seq%4 < 2 {
			rule.Limits = rule.Limits[:1]
		}
		rule.Reserve = time.Duration(1+rng.Int64N(5000)) * time.Millisecond
		keys := decidetest.Keys(prefix, "reserve"+strconv.Itoa(seq))
		model := decide.NewMemory()
		now := 1_000_000 + rng.Int64N(1_000_000_000)
		var history strings.Builder
		for i := range 60 {
			c := rule
			c.Keys = keys
			now = nextNow(rng, now)
			c.NowMs, c.Cost = now, randomCost(rng)
			id := decidetest.HoldID("abcd"[rng.IntN(4)])
			switch p := rng.IntN(10); {
			case p < 4:
				c.HoldID = id
			case p < 8:
				c.HoldID, c.Settle, c.DebitDenied = id, true, true
			case p < 9:
				c.DebitDenied = true // a report naming no reservation
			default:
				c.Cost = 1 // a check that is not a take: it debits when admitted
			}
			record := decide.ReservationKey(keys.State, id)
			got, err := decideReadPersist(ctx, client, store.prepare, c, nil, func(pipe redis.Pipeliner) {
				pipe.Persist(ctx, record)
			})
			if err != nil {
				t.Fatalf("sequence %d step %d: %v", seq, i, err)
			}
			ref := model.Decide(c, 0)
			fmt.Fprintf(&history, "  now %d cost %d id %.1s settle %v -> %+v\n", c.NowMs, c.Cost, c.HoldID, c.Settle, ref)
			if got != ref {
				t.Fatalf("sequence %d step %d: redis and model differ\nrule %+v\nredis %+v\nhistory (model):\n%s",
					seq, i, rule, got, history.String())
			}
		}
	}
}
