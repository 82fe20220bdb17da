package limiter

import (
	"context"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Batch holds the decisions of CheckBatch and what they share. It is reused
// across batches (its slices keep their capacity), as Decision is.
type Batch struct {
	// Decisions[i] is the verdict on the i-th request of the last batch.
	Decisions []Decision

	calls    []decide.Call // every decision's Redis calls, in order
	results  []decide.Result
	back     holdReturns // the holds the refused requests give back
	detached detachedContext
}

// CheckBatch decides every request of reqs into b.Decisions (at the same
// index) and publishes their events, as Check would one after the other,
// except that the Redis calls of all of them go in one submission to the
// Decider: one wait and one wake-up for the batch, and with the coalescer
// one round trip per Redis node. If that round trip fails, every decision
// that needed it falls back by its rules' failure policies, as the rules
// of one request do.
func (s *Service) CheckBatch(ctx context.Context, reqs []rules.Request, b *Batch) {
	start := s.cfg.Now()
	set := s.rules.Load()
	mode := s.Mode()
	b.Decisions = grow(b.Decisions, len(reqs))
	b.calls = b.calls[:0]
	for i := range reqs {
		d := &b.Decisions[i]
		if s.admit(set, &reqs[i], d, mode, start) && s.prepare(d, start) {
			b.calls = append(b.calls, d.calls...)
		}
	}
	s.decideBatch(ctx, b, start)
	// The holds of the refused requests go back together: one more round
	// trip for the batch, not one per refused request in turn.
	for i := range reqs {
		s.settleHolds(&b.Decisions[i], start, &b.back)
	}
	s.giveHoldsBack(ctx, &b.back, &b.detached)
	for i := range reqs {
		s.complete(set, &reqs[i], &b.Decisions[i], start)
	}
}

// decideBatch decides the calls that prepare left in b's decisions,
// gathered in b.calls in the decisions' order, in one submission to the
// Decider, and settles each decision that had some. If that round trip
// fails, every decision that needed it falls back by its rules' failure
// policies.
func (s *Service) decideBatch(ctx context.Context, b *Batch, now time.Time) {
	if len(b.calls) == 0 {
		return
	}
	// Not cancelled with the request, as in decide.
	b.detached = detachedContext{parent: ctx}
	b.results = append(b.results[:0], make([]decide.Result, len(b.calls))...)
	results, err := s.decideCalls(&b.detached, b.calls, b.results)
	b.detached = detachedContext{}
	err = s.roundTrip(err)
	off := 0
	for i := range b.Decisions {
		d := &b.Decisions[i]
		if n := len(d.calls); n != 0 {
			var mine []decide.Result
			if err == nil {
				mine = results[off : off+n]
			}
			s.settle(d, mine, err, now)
			settleLate(err, d, off)
			s.settleInMemory(ctx, d, now)
			off += n
		}
	}
	clear(b.calls) // drop references to the requests' keys
}

// grow returns ds with length n, keeping the decisions (and their slices'
// capacity) it already holds.
func grow(ds []Decision, n int) []Decision {
	if n <= cap(ds) {
		return ds[:n]
	}
	return append(ds[:cap(ds)], make([]Decision, n-cap(ds))...)
}
