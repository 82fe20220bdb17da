package abuse

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratewarden/ratewarden/internal/event"
)

// What both engines do with a batch besides counting: time each input,
// tell the late ones, and claim what the counts trigger.

// partitions remembers the newest event time seen per partition (of type
// K: a partition, or a topic's partition), never past the detector's
// clock, for lateness. It is safe for concurrent use.
type partitions[K comparable] struct {
	mu     sync.Mutex
	newest map[K]int64 // ms
}

func newPartitions[K comparable]() *partitions[K] {
	return &partitions[K]{newest: map[K]int64{}}
}

// batchClock times the inputs of one batch: it bounds event time by the
// detector's clock and the skew, counting the inputs ahead in st, and
// tells whether an input is late on its partition. The partitions' marks
// move as the batch reads them, and are kept by commit once the batch is
// done (a batch that fails keeps none).
type batchClock[K comparable] struct {
	p       *partitions[K]
	st      *Stats
	now     time.Time
	nowMs   int64
	skew    time.Duration
	graceMs int64
	marks   map[K]int64
}

// clock returns the clock of a batch read at now; p is locked until commit
// or release.
func (p *partitions[K]) clock(st *Stats, now time.Time, skew, grace time.Duration) *batchClock[K] {
	p.mu.Lock()
	return &batchClock[K]{p: p, st: st, now: now, nowMs: now.UnixMilli(), skew: skew, graceMs: grace.Milliseconds(), marks: map[K]int64{}}
}

// at returns the time an input stamped ts by instance, read from partition
// k, is decided at (see boundTime), and whether it is late: older than the
// newest seen on k by more than the grace.
func (c *batchClock[K]) at(k K, ts time.Time, instance string) (time.Time, bool) {
	at, ahead := boundTime(ts, c.now, c.skew)
	if ahead > 0 {
		c.st.Future++
		if c.st.Ahead == nil {
			c.st.Ahead = map[string]time.Duration{}
		}
		c.st.Ahead[instance] = max(c.st.Ahead[instance], ahead)
	}
	ms := at.UnixMilli()
	mark, ok := c.marks[k]
	if !ok {
		mark, ok = c.p.newest[k]
	}
	if m := min(ms, c.nowMs); !ok || m > mark {
		c.marks[k] = m
	}
	return at, ok && ms < mark-c.graceMs
}

// release unlocks the partitions while the batch is counted.
func (c *batchClock[K]) release() { c.p.mu.Unlock() }

// commit keeps the batch's marks.
func (c *batchClock[K]) commit() {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	for k, ts := range c.marks {
		if old, ok := c.p.newest[k]; !ok || ts > old {
			c.p.newest[k] = ts
		}
	}
}

// claimer claims a batch's bans and warnings in the ledger and gathers
// those to publish, each ban id once, counted by reason in st.
type claimer struct {
	l         Ledger
	st        *Stats
	published map[string]bool
	issued    []Claimed
}

func newClaimer(l Ledger, st *Stats) *claimer {
	return &claimer{l: l, st: st, published: map[string]bool{}}
}

func (c *claimer) claim(ctx context.Context, cl Claim) error {
	out, err := c.l.Claim(ctx, cl)
	if err != nil {
		return fmt.Errorf("claim %s %s for %s: %w", cl.Ban.Action, cl.Ban.Reason, cl.Ban.Key(), err)
	}
	if !out.Publish || c.published[out.Ban.BanID] {
		return nil
	}
	c.published[out.Ban.BanID] = true
	c.issued = append(c.issued, out)
	if out.Ban.Action == event.ActionWarn {
		c.st.Warnings[out.Ban.Reason]++
	} else {
		c.st.Bans[out.Ban.Reason]++
	}
	return nil
}

// boundTime returns the time at which an event stamped ts is decided, given
// the detector's clock now: ts itself, unless ts is more than skew ahead
// of now; such an event (a limiter's clock jumped ahead) is decided at now,
// and ahead says by how much it was ahead (0 otherwise).
func boundTime(ts, now time.Time, skew time.Duration) (at time.Time, ahead time.Duration) {
	if d := ts.Sub(now); d > skew {
		return now, d
	}
	return ts, 0
}

// issue publishes the bans and warnings issued, then settles each in
// the ledger (enforcing a ban unless dry run), in that order: a crash in
// between leaves the record pending, so the next claim publishes it again
// under the same id and settles it, rather than enforcing a ban nobody was
// told of or losing one.
func issue(ctx context.Context, pub Publisher, l Ledger, issued []Claimed) error {
	if len(issued) == 0 {
		return nil
	}
	bans := make([]event.Ban, len(issued))
	for i, o := range issued {
		bans[i] = o.Ban
	}
	if err := pub.Publish(ctx, bans...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	for _, b := range bans {
		if err := l.Settle(ctx, b, !b.DryRun); err != nil {
			return fmt.Errorf("settle %s %s %s: %w", b.Action, b.Scope, b.BanID, err)
		}
	}
	return nil
}
