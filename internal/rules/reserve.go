package rules

import (
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
)

// A rule spent by reports may reserve (Rule.Reserve): its checks take an
// estimate of the request's cost, admitted only if it fits, instead of
// asking whether one unit is left, and the request's report settles it
// with the actual cost (see decide's reserve.go). Concurrent requests then
// overrun the budget by at most what is reserved and unsettled, not by
// their number times the cost.

// DefaultReserveHold is how long a reservation lasts unsettled when the
// rule leaves reserve_hold out: long enough for a slow LLM response, short
// enough that a lost report's estimate does not stay reserved past the
// windows of most budgets. A reservation that lapses keeps its units spent.
const DefaultReserveHold = 10 * time.Minute

// The bounds of reserve_hold.
const (
	minReserveHold = time.Second
	maxReserveHold = 24 * time.Hour
)

// MaxReserve bounds a rule's reserve and a check's own estimate: as a
// check's cost is bounded.
const MaxReserve = 1_000_000

// Reserves reports whether the rule's checks take reservations.
func (r *Rule) Reserves() bool { return r.Reserve > 0 }

// ReserveLifetime is how long the rule's reservations last unsettled:
// ReserveHold, or DefaultReserveHold when absent.
func (r *Rule) ReserveLifetime() time.Duration {
	if r.ReserveHold > 0 {
		return r.ReserveHold.Std()
	}
	return DefaultReserveHold
}

// estimate returns what a check of r reserves on the rule: the check's own
// estimate when it gives one, else the rule's.
func (rule *Rule) estimate(r *Request) int64 {
	if r.Reserve > 0 {
		return r.Reserve
	}
	return rule.Reserve
}

// validateReserve checks reserve and reserve_hold: only on a rule priced
// after the response (a request rule spent by reports, or a descriptor
// rule, whose stream-done call's hits_addend is the cost: see
// descriptorreserve.go), of fixed_window or token_bucket, at least 1 and
// at most the smallest quota of its limits (a larger estimate would never
// be admitted).
func validateReserve(r *Rule, p problems, algOK bool) {
	if r.Reserve == 0 {
		if r.ReserveHold != 0 {
			p.add("reserve_hold", "only with reserve")
		}
		return
	}
	switch {
	case r.Reserve < 0 || r.Reserve > MaxReserve:
		p.add("reserve", "must be 1 to %d units", MaxReserve)
		return
	case r.Descriptor != nil:
		if !validateDescriptorReserve(r, p) {
			return
		}
	case r.SpentBy != SpentByReport:
		p.add("reserve", "only with spent_by: report: a rule spent by checks takes the cost at the check already")
		return
	}
	switch {
	case !algOK:
		return
	case r.Algorithm != decide.FixedWindow && r.Algorithm != decide.TokenBucket:
		p.add("reserve", "not with algorithm %s: a settle's refund is exact only for fixed_window (into the reservation's own "+
			"window) and token_bucket (up to the burst); a sliding window would have to rewrite what it recorded", r.Algorithm)
		return
	}
	if q, ok := smallestQuota(r, algOK); ok && r.Reserve > q {
		p.add("reserve", "%d is more than %d, the smallest quota of the rule's limits "+
			"(requests, or burst for token_bucket; tiers and schedule entries included): no check would ever be admitted", r.Reserve, q)
	}
	if r.ReserveHold != 0 {
		validateMillis(p, "reserve_hold", r.ReserveHold, minReserveHold)
		if r.ReserveHold.Std() > maxReserveHold {
			p.add("reserve_hold", "must be at most %s", maxReserveHold)
		}
	}
}
