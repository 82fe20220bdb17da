package abuse

import (
	"context"
	"time"
)

// The one way both engines process a batch: read the detector's clock,
// time each input against its partition (skipped or late, or taken to be
// counted), record what was taken, claim what the counts trigger, issue
// it, and only then keep the partitions' new marks. What differs is the
// counting: the decisions' violation and endpoint windows (Windows), the
// outcomes' distinct sets (Distinct), each a tally.

// issuer is the state both engines share: their clock and its bounds, the
// newest time per partition (of key K), and where what they trigger goes.
type issuer[K comparable] struct {
	now   func() time.Time
	skew  time.Duration
	grace time.Duration
	parts *partitions[K]
	l     Ledger
	pub   Publisher
}

func newIssuer[K comparable](now func() time.Time, skew, grace time.Duration, l Ledger, pub Publisher) issuer[K] {
	return issuer[K]{now: clockOf(now), skew: skew, grace: grace, parts: newPartitions[K](), l: l, pub: pub}
}

// tally is one engine's counting of one batch of inputs T, read from
// partitions K.
type tally[K comparable, T any] interface {
	// place says where an input was read from, its time and the instance
	// that stamped it.
	place(in *T) (k K, ts time.Time, instance string)
	// take sees an input, decided at at and late when older than the
	// newest of its partition by more than the grace: it counts it in st
	// (skipped, late, ...) or keeps what it adds to the counts.
	take(st *Stats, in *T, at time.Time, late bool)
	// record records what was taken (nothing to do when nothing was).
	record(ctx context.Context) error
	// claims calls claim for every claim the recorded counts trigger, in
	// order, at the detector's time now at the latest.
	claims(st *Stats, now time.Time, claim func(Claim) error) error
}

// process runs one batch through t and issues what it triggers: it returns
// what was published (each ban id once), in order. On error nothing of the
// batch is kept (the partitions' marks are not moved; Windows, Distinct and
// Ledger are idempotent, so the batch can be processed again).
func process[K comparable, T any](ctx context.Context, p *issuer[K], in []T, t tally[K, T]) ([]Claimed, Stats, error) {
	st := Stats{Consumed: len(in), Warnings: map[string]int{}, Bans: map[string]int{}}
	now := p.now().UTC().Truncate(time.Microsecond) // the precision of encoded times
	clock := p.parts.clock(&st, now, p.skew, p.grace)
	for i := range in {
		at, late := clock.at(t.place(&in[i]))
		t.take(&st, &in[i], at, late)
	}
	clock.release()

	if err := t.record(ctx); err != nil {
		return nil, Stats{}, err
	}
	claims := newClaimer(p.l, &st)
	if err := t.claims(&st, now, func(c Claim) error { return claims.claim(ctx, c) }); err != nil {
		return nil, Stats{}, err
	}
	if err := issue(ctx, p.pub, p.l, claims.issued); err != nil {
		return nil, Stats{}, err
	}
	clock.commit()
	return claims.issued, st, nil
}

// clockOf returns now, or time.Now for nil.
func clockOf(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
