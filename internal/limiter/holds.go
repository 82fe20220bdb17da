package limiter

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// A check to which concurrency rules apply takes one hold on each of their
// keys, all named by one id (Decision.Hold) that the request's report
// names again to release them (ReportHold). A hold is kept only by an
// admitted request: when another rule denies it, or it cannot be decided
// (503), the holds it took are released at once (if that round trip
// fails, they lapse). A hold nobody releases lapses after its rule's hold
// lifetime.

// heldCall is a hold a check took: the index of its rule in
// Decision.Applied, and whether local-mode memory holds it rather than
// Redis.
type heldCall struct {
	index int
	local bool
}

// The results of rate_limit_holds_total.
const (
	holdTaken    = "taken"    // a check took a hold
	holdDenied   = "denied"   // a check found the key full
	holdReleased = "released" // a report or a refused check ended a hold
	holdUnknown  = "unknown"  // a report named a hold its key does not hold: unknown, released already, lapsed or another key's
	// A stream-done call naming no hold id, of a rule that releases by id
	// only: nothing released (a request Envoy refused sends none).
	holdUnnamed = "unnamed"
)

// nameHolds gives the takes of d's concurrency rules (releases name the
// hold they end), and the takes of its rules that reserve
// (decide.Call.Reserve; not their settles, which name the reservation they
// end, nor a descriptor's debit, rules.Applied.Debit), one new hold id.
func nameHolds(d *Decision) {
	for i := range d.Applied {
		a := &d.Applied[i]
		c := &a.Call
		take := c.Algorithm == decide.Concurrency && !c.Release
		reserve := c.Reserve > 0 && !c.Settle && !a.Debit
		if !take && !reserve {
			continue
		}
		if d.holdID == "" {
			d.holdID = decide.NewHoldID()
		}
		c.HoldID = d.holdID
	}
}

// probeHoldsOfRefused makes the concurrency calls of d that go to Redis
// only ask (cost 0) when an enforced rule already refused d without a
// round trip (a cached or leased denial): a request that will be refused
// takes no hold, so it never occupies a slot, not even for the round trip
// that would give it back, and costs no second round trip. prepare calls
// it once d.calls holds the calls of the rules it could not answer.
func (d *Decision) probeHoldsOfRefused() {
	refused := false
	for i := range min(len(d.Applied), 64) {
		if d.cached&(1<<i) != 0 && !d.Results[i].Allowed && !d.Applied[i].Rule.Shadow {
			refused = true
			break
		}
	}
	if !refused {
		return
	}
	j := 0 // d.calls[j] is the call of d.Applied[i]
	for i := range d.Applied {
		if i < 64 && d.cached&(1<<i) != 0 {
			continue
		}
		if c := &d.Applied[i].Call; (c.Algorithm == decide.Concurrency && !c.Release) || c.Reserves() {
			c.Cost, d.calls[j].Cost = 0, 0 // a take of 0 units reserves nothing
		}
		j++
	}
}

// tookHold records that Applied[i]'s call took its hold, in local memory
// or in Redis, when it is a take that r admitted.
func (d *Decision) tookHold(i int, r decide.Result, local bool) {
	c := &d.Applied[i].Call
	if (c.Algorithm == decide.Concurrency && !c.Release && c.Cost > 0 && r.Allowed) || (c.Reserves() && r.Reserved > 0) {
		d.held = append(d.held, heldCall{index: i, local: local})
	}
}

// endHolds settles the holds of a decided check: an admitted request
// keeps them and answers their id; a refused one gives them back, in one
// more round trip for those in Redis. It counts them.
func (s *Service) endHolds(ctx context.Context, d *Decision, now time.Time) {
	var back holdReturns
	s.settleHolds(d, now, &back)
	s.giveHoldsBack(ctx, &back, &d.detached)
}

// holdReturns gathers the holds in Redis that refused requests give back
// (settleHolds), with their rules' ids, so that those of a whole batch go
// in one round trip (giveHoldsBack).
type holdReturns struct {
	calls []decide.Call
	rules []string
}

// settleHolds settles d's holds as endHolds says, but for those in Redis,
// which it adds to back instead of releasing them.
func (s *Service) settleHolds(d *Decision, now time.Time, back *holdReturns) {
	if d.holdID == "" {
		return
	}
	s.countHolds(d)
	s.countReservations(d)
	if len(d.held) == 0 {
		return
	}
	if d.Allowed && !d.Unavailable {
		d.Hold = d.holdID
		return
	}
	for _, h := range d.held {
		a := &d.Applied[h.index]
		c := endOf(a.Call)
		if h.local {
			s.countEnd(a.Rule.ID, s.local.decide(c, s.live.Load(), now))
			continue
		}
		back.calls, back.rules = append(back.calls, c), append(back.rules, a.Rule.ID)
	}
}

// giveHoldsBack releases the holds of back in one round trip, under
// detached (ctx without its cancellation), and counts them. When the
// round trip fails, they lapse after their lifetime instead.
func (s *Service) giveHoldsBack(ctx context.Context, back *holdReturns, detached *detachedContext) {
	if len(back.calls) == 0 {
		return
	}
	*detached = detachedContext{parent: ctx}
	results, err := s.backend.Decide(detached, back.calls)
	*detached = detachedContext{}
	if s.roundTrip(err) != nil {
		// They lapse after their lifetime instead.
		s.log.Debug("refused requests' holds not released", zap.Int("holds", len(back.calls)), zap.Error(err))
	} else {
		for i, r := range results {
			s.countEnd(back.rules[i], r)
		}
	}
	clear(back.calls) // drop references to the requests' keys
	back.calls, back.rules = back.calls[:0], back.rules[:0]
}

// endOf returns the call that gives back what c, a take, took: the
// release of a hold, or the settle of a reservation at cost 0, which
// refunds all of it and deletes its record.
func endOf(c decide.Call) decide.Call {
	if c.Reserves() {
		c.Settle, c.DebitDenied, c.Cost = true, true, 0
		return c
	}
	c.Release, c.Cost = true, 0
	return c
}

// countEnd counts what the end of a refused request's take did (endOf).
func (s *Service) countEnd(rule string, r decide.Result) {
	switch {
	case r.Released:
		s.metrics.holds.WithLabelValues(rule, holdReleased).Inc()
	case r.Settled:
		s.metrics.reservations.WithLabelValues(rule, reservationReturned).Inc()
		s.metrics.reservedUnits.WithLabelValues(rule, unitsRefunded).Add(float64(r.Refunded))
	}
}

// countHolds counts what d's takes did: taken, denied, and the holds they
// found lapsed.
func (s *Service) countHolds(d *Decision) {
	for i, a := range d.Applied {
		if a.Call.Algorithm != decide.Concurrency || a.Call.Release || i >= len(d.Results) {
			continue // releases are counted by countReleases
		}
		r := d.Results[i]
		switch {
		case d.holds(i):
			s.metrics.holds.WithLabelValues(a.Rule.ID, holdTaken).Inc()
		case !r.Allowed:
			s.metrics.holds.WithLabelValues(a.Rule.ID, holdDenied).Inc()
		}
		if r.Lapsed > 0 {
			s.metrics.holdsLapsed.WithLabelValues(a.Rule.ID).Add(float64(r.Lapsed))
		}
	}
}

// holds reports whether Applied[i]'s call took its hold.
func (d *Decision) holds(i int) bool {
	for _, h := range d.held {
		if h.index == i {
			return true
		}
	}
	return false
}

// countReleases counts what a report's releases did.
func (s *Service) countReleases(d *Decision) {
	for i, a := range d.Applied {
		if !a.Call.Release || i >= len(d.Results) {
			continue
		}
		r := d.Results[i]
		result := holdUnknown
		switch {
		case r.Released:
			result = holdReleased
		case a.NoRelease:
			result = holdUnnamed
		}
		s.metrics.holds.WithLabelValues(a.Rule.ID, result).Inc()
		if r.Lapsed > 0 {
			s.metrics.holdsLapsed.WithLabelValues(a.Rule.ID).Add(float64(r.Lapsed))
		}
	}
}

// initHoldRules starts at 0 the hold series of set's concurrency rules.
func (m *metrics) initHoldRules(set *rules.Set) {
	for _, r := range set.Rules() {
		if r.Algorithm != decide.Concurrency {
			continue
		}
		results := []string{holdTaken, holdDenied, holdReleased, holdUnknown}
		if r.Descriptor != nil {
			results = append(results, holdUnnamed)
		}
		for _, res := range results {
			m.holds.WithLabelValues(r.ID, res)
		}
		m.holdsLapsed.WithLabelValues(r.ID)
	}
}
