package decide

import (
	"errors"
	"strconv"
	"time"
)

// Validate reports whether the call can be decided: at least one limit, every
// duration a positive whole number of milliseconds, positive quotas and
// rates, a non-negative cost; for Concurrency what validateHolds says. Both the model and the scripts assume a valid
// call; the rules validator also bounds burst*1000*per (token bucket) and
// requests*per (sliding window counter) by 2^53.
func (c Call) Validate() error {
	if len(c.Limits) == 0 {
		return errors.New("no limits")
	}
	if c.Cost < 0 {
		return errors.New("negative cost")
	}
	if c.NowMs < 0 {
		return errors.New("negative now")
	}
	if c.Probe && (c.Penalty > 0 || len(c.Escalations) > 0 || c.DebitDenied) {
		return errors.New("a probe has no penalty, escalations or debit of denied calls")
	}
	if c.Leased && (c.Probe || c.Penalty > 0 || len(c.Escalations) > 0 || c.Algorithm == SlidingWindow) {
		return errors.New("a leased call has no probe, penalty or escalations, and no sliding window log")
	}
	if l := c.Lease; l.Ask < 0 || l.Until < 0 || l.Spent < 0 || l.Unspent < 0 || (l != Lease{} && !c.Leased) {
		return errors.New("lease: negative numbers, or a lease on a call that is not leased")
	}
	if err := c.validateHolds(); err != nil {
		return err
	}
	if err := c.validateReserve(); err != nil {
		return err
	}
	if c.Penalty < 0 || c.Penalty%time.Millisecond != 0 {
		return errors.New("penalty is not a whole number of milliseconds")
	}
	for i, l := range c.Limits {
		if l.Per < time.Millisecond || l.Per%time.Millisecond != 0 {
			return errors.New("limit " + strconv.Itoa(i) + ": per is not a positive whole number of milliseconds")
		}
		switch c.Algorithm {
		case FixedWindow, SlidingWindow, SlidingWindowCounter:
			if l.Requests <= 0 {
				return errors.New("limit " + strconv.Itoa(i) + ": requests must be positive")
			}
		case TokenBucket:
			if l.Rate <= 0 || l.Burst <= 0 {
				return errors.New("limit " + strconv.Itoa(i) + ": rate and burst must be positive")
			}
		case Concurrency:
			if l.Requests <= 0 || l.Rate != 0 || l.Burst != 0 {
				return errors.New("limit " + strconv.Itoa(i) + ": requests (holds at once) must be positive, without rate or burst")
			}
		default:
			return errors.New("unknown algorithm")
		}
	}
	for i, e := range c.Escalations {
		if e.Triggers <= 0 || e.Within < time.Millisecond || e.Penalty < time.Millisecond ||
			e.Within%time.Millisecond != 0 || e.Penalty%time.Millisecond != 0 {
			return errors.New("escalation " + strconv.Itoa(i) + ": triggers, within and penalty must be positive (whole milliseconds)")
		}
	}
	return nil
}

// MaxUsage is the most units a window counts: debits of denied calls
// (Call.DebitDenied) stop adding there, so that every count stays an exact
// Lua number (below 2^53). The sliding window counter stops at
// MaxUsage/per instead, where its weighted products reach 2^53, and a token
// bucket's debt at MaxUsage/per milli-tokens below full, where its refill
// time does.
const MaxUsage = 1 << 53

// debits reports whether the call's cost is written to its state: when
// admitted, and when denied too for a call that debits denied calls; never
// for a probe.
func (c *Call) debits(admitted bool) bool {
	return !c.Probe && (admitted || (c.DebitDenied && c.Cost > 0))
}

// cappedAdd returns a + b, at most limit, for 0 <= a and 0 <= b.
func cappedAdd(a, b, limit int64) int64 {
	if b > limit-a {
		return limit
	}
	return a + b
}

// quota is the quota of l under the algorithm: Burst for the token bucket,
// Requests for the window algorithms.
func quota(alg Algorithm, l Limit) int64 {
	if alg == TokenBucket {
		return l.Burst
	}
	return l.Requests
}

// divmod returns floor(a/b) and a-b*floor(a/b) for b > 0, as Lua computes
// them (Go's / and % truncate toward zero).
func divmod(a, b int64) (int64, int64) {
	q, r := a/b, a%b
	if r < 0 {
		q--
		r += b
	}
	return q, r
}

// ceilDiv returns ceil(a/b) for b > 0.
func ceilDiv(a, b int64) int64 {
	q, r := divmod(a, b)
	if r > 0 {
		q++
	}
	return q
}
