// Package decide is the decision model: the parameters of one rate-limit
// decision, its result, and a pure Go reference implementation of every
// algorithm. The Lua scripts in lua/ implement the same semantics inside Redis;
// differential tests run both on the same scenarios and require identical
// results. The reference model also serves as the in-memory limiter when Redis
// is unavailable.
package decide

import "time"

// Algorithm names a rate-limiting algorithm as written in the rules file.
type Algorithm string

// The supported algorithms. SlidingWindowCounter approximates
// SlidingWindow from the counts of two aligned fixed windows, in constant
// memory per limit. Concurrency limits the requests of a key in flight
// rather than a rate (see concurrency.go).
const (
	FixedWindow          Algorithm = "fixed_window"
	SlidingWindow        Algorithm = "sliding_window"
	SlidingWindowCounter Algorithm = "sliding_window_counter"
	TokenBucket          Algorithm = "token_bucket"
	Concurrency          Algorithm = "concurrency"
)

// Limit is one limit of a rule. Window algorithms use Requests per Per; the
// token bucket refills Rate tokens every Per up to a capacity of Burst;
// Concurrency admits Requests holds at once, each lapsing Per after it was
// taken.
type Limit struct {
	Requests int64
	Rate     int64
	Burst    int64
	Per      time.Duration
}

// Quota is the number of units the limit admits when fully replenished:
// Requests for window algorithms, Burst for the token bucket.
func (l Limit) Quota() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.Requests
}

// Escalation denies a key for Penalty once it has been denied by its limits
// Triggers times within Within.
type Escalation struct {
	Triggers int64
	Within   time.Duration
	Penalty  time.Duration
}

// Keys are the Redis keys of one rule and subject. All three share one
// Redis Cluster hash tag so a script touching them stays on one slot.
type Keys struct {
	State string // counters, log or bucket of the algorithm
	Hold  string // penalty: denied until this time (ms)
	Hits  string // escalation: times of recent limit denials
}

// Call is everything needed to decide one request against one rule.
type Call struct {
	Keys        Keys
	Algorithm   Algorithm
	Limits      []Limit
	Cost        int64
	Penalty     time.Duration // 0: no penalty
	Escalations []Escalation
	// DebitDenied debits the cost of a denied call too, as
	// envoyproxy/ratelimit counts every hit: usage can pass a limit, and
	// calls are denied while it is past (a call of cost 0 checks whether it
	// is). Without it a denied call writes nothing. A call held by a penalty
	// is never debited. Usage is capped where the arithmetic would stop
	// being exact (see MaxUsage and the algorithms).
	DebitDenied bool
	// Probe asks whether Cost more units would be admitted and writes
	// nothing: the check of a rule whose budget only outcome reports spend
	// (a probe of cost 1 is denied once no unit is left). A probe has no
	// penalty or escalations and does not debit denied calls.
	Probe bool
	// Leased marks a call of a rule whose budget instances lease (see
	// Lease): the lease script decides it, with Lease, and a one-limit fixed
	// window keeps its hash rather than a counter of its own per window.
	Leased bool
	// Lease is what a leased call asks of the key's budget besides its cost.
	Lease Lease
	// HoldID names the hold a Concurrency call takes or releases (see
	// NewHoldID); empty for other algorithms, and optional for a
	// Concurrency call of cost 0.
	HoldID string
	// Release ends the hold HoldID instead of taking one (Concurrency).
	Release bool
	// Reserve, when non-zero, marks a call of a rule that reserves an
	// estimate of a cost known only after the response, and is how long
	// a reservation lasts unsettled (see reserve.go). With HoldID, the
	// call takes a reservation named HoldID (its Cost the estimate) or,
	// with Settle, settles it (its Cost the actual cost). The state of
	// such a rule is never counted (Counted).
	Reserve time.Duration
	// Settle settles the reservation HoldID with the actual Cost instead
	// of taking one (Reserve).
	Settle bool
	// NowMs, when non-zero, replaces the server clock (tests only); zero means
	// the script reads redis.call('TIME').
	NowMs int64
}

// Result is the outcome of one Call.
type Result struct {
	Allowed bool
	// Held is true when the key was denied by a penalty or escalation hold
	// rather than by a limit. A held call's ResetAfter and RetryAfter are
	// the time until a call is admitted again as the denial that started
	// the hold said: the hold's end, or the limits' retry when later.
	Held bool
	// LimitIndex is the index in Call.Limits of the binding limit: the one
	// that denied (the longest retry among those that denied), or when
	// allowed the one with the fewest remaining units. -1 when Held.
	LimitIndex int
	// Limit is the quota of the binding limit.
	Limit int64
	// Remaining units of the binding limit after this decision.
	Remaining int64
	// ResetAfter is the time until the binding limit is fully replenished;
	// for a denial that starts or extends a penalty or escalation hold, at
	// least the hold's time, as the held calls after it report.
	ResetAfter time.Duration
	// RetryAfter is the time until this request could be admitted; 0 when
	// allowed.
	RetryAfter time.Duration
	// Granted is the units a leased call (Call.Leased) was lent beyond its
	// cost (Remaining is what the key has left before them), to be spent
	// before LeaseUntil (server ms). LeaseFor is how long from when the
	// caller sent the call: LeaseUntil less the end of the millisecond the
	// server decided in, so a caller counting it from its send time never
	// spends a unit past LeaseUntil on the server's clock, whatever the
	// part of that millisecond it decided in. LeaseUntil also names the
	// lease in later calls (Lease.Until).
	Granted    int64
	LeaseUntil int64
	LeaseFor   time.Duration
	// Released is true when a release (Call.Release) ended a hold the key
	// held; false for an unknown id, one released already, or one lapsed.
	// A release is always Allowed.
	Released bool
	// Lapsed is the holds of the key (Concurrency) found lapsed and dropped
	// by this call.
	Lapsed int64
	// Reserved is the units a reservation holds: what a take reserved
	// (0 when it reserved nothing), or what the reservation a settle
	// found held. Settled is true when a settle found its reservation
	// (false: unknown, settled already, lapsed, or another key's);
	// Refunded is the units it gave back and Excess the units it debited
	// beyond the reservation.
	Reserved int64
	Settled  bool
	Refunded int64
	Excess   int64
	// At is the server's time (ms) the call was decided at (a counted call:
	// the NowMs it was stamped with), which a give-back needs to find the
	// window or log member the call counted in (see GiveBack).
	At int64
}
