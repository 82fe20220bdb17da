package limiter

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// TestCheckBatchEqualsChecksInTurn runs the same random traffic through
// two services deciding in the reference model, one request at a time and
// in batches of 1 to 20 made at one instant: every decision must be the
// same, every decision an event, and a batch one round trip.
func TestCheckBatchEqualsChecksInTurn(t *testing.T) {
	set := compileRules(t, cacheRules)
	clock := &fakeClock{now: time.Now()}
	newSvc := func() (*Service, *modelDecider, *capturePublisher) {
		decider := &modelDecider{mem: decide.NewMemory(), clock: clock}
		pub := &capturePublisher{}
		return New(Config{Instance: "test", Now: clock.Now}, set, decider, pub, zap.NewNop(), prometheus.NewRegistry()), decider, pub
	}
	inTurn, _, inTurnEvents := newSvc()
	batched, batchedDecider, batchedEvents := newSvc()

	rng := rand.New(rand.NewPCG(11, 11))
	endpoints := []string{"/a/1", "/b", "/c", "/d", "/e", "/none"}
	var one Decision
	var b Batch
	decisions, batches := 0, 0
	for step := range 1000 {
		clock.advance(time.Duration(rng.IntN(200)) * time.Millisecond)
		reqs := make([]rules.Request, 1+rng.IntN(20))
		for i := range reqs {
			reqs[i] = rules.Request{IP: "10.0.0." + strconv.Itoa(rng.IntN(3)), Endpoint: endpoints[rng.IntN(len(endpoints))],
				Method: "GET", Cost: 1 + int64(rng.IntN(3)/2)}
		}
		batched.CheckBatch(context.Background(), reqs, &b)
		if len(b.Decisions) != len(reqs) {
			t.Fatalf("step %d: %d decisions for %d requests", step, len(b.Decisions), len(reqs))
		}
		for i := range reqs {
			inTurn.Check(context.Background(), &reqs[i], &one)
			got := &b.Decisions[i]
			if one.Allowed != got.Allowed || one.Reason != got.Reason || one.RuleID != got.RuleID || one.Limit != got.Limit ||
				one.Remaining != got.Remaining || one.ResetAfter != got.ResetAfter || one.RetryAfter != got.RetryAfter ||
				one.Shadow != got.Shadow || one.Mode != got.Mode || got.EventID == "" {
				t.Fatalf("step %d request %d %+v:\nin turn  %v %s rule=%s remaining=%d retry=%v\nin batch %v %s rule=%s remaining=%d retry=%v id=%q",
					step, i, reqs[i], one.Allowed, one.Reason, one.RuleID, one.Remaining, one.RetryAfter,
					got.Allowed, got.Reason, got.RuleID, got.Remaining, got.RetryAfter, got.EventID)
			}
		}
		decisions += len(reqs)
		batches++
	}
	if n, m := len(inTurnEvents.events), len(batchedEvents.events); n != decisions || m != decisions {
		t.Fatalf("events: %d in turn, %d batched; want %d each", n, m, decisions)
	}
	if batchedDecider.trips == 0 || batchedDecider.trips > batches {
		t.Fatalf("%d Decide calls for %d batches: a batch must share one", batchedDecider.trips, batches)
	}
}
