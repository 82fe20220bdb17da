package limiter

import (
	"context"
	"time"

	"github.com/ratewarden/ratewarden/internal/decide"
	"github.com/ratewarden/ratewarden/internal/event"
	"github.com/ratewarden/ratewarden/internal/rules"
)

// Mode is the limiter's decision mode: deciding in Redis, in local memory,
// or letting traffic through. Its values are the "mode" of answers and
// events and the mode label of rate_limit_mode.
type Mode string

// The modes (see modeMachine for when each applies).
const (
	ModeRedis      Mode = event.ModeRedis
	ModeLocal      Mode = event.ModeLocal
	ModePermissive Mode = event.ModePermissive
)

// Decision is the verdict on one request. It is reused across requests
// (Reset keeps the slices' capacity), so the hot path allocates little.
type Decision struct {
	Allowed bool
	Reason  string
	// Shadow is true when the reported limit belongs to a rule in shadow
	// mode that would have denied the request.
	Shadow bool
	Mode   Mode
	// Unavailable is true when a rule whose failure policy is deny could not
	// be decided; the request is refused with 503 and no event is emitted.
	Unavailable bool
	EventID     string
	// Hold is the id of the holds an admitted check took on the keys of its
	// concurrency rules, which its report names to release them; empty
	// when it took none.
	Hold string

	// The limit the decision reports: the denying limit with the longest
	// retry, else the one with the fewest remaining units.
	RuleID     string
	Algorithm  decide.Algorithm
	Limit      int64
	Remaining  int64
	ResetAfter time.Duration
	RetryAfter time.Duration

	// Applied lists the rules that applied, in priority order, with the
	// limits in force; Results holds their outcomes at the same index.
	Applied []rules.Applied
	Results []decide.Result
	// Enforced is the index in Applied of the non-shadow rule whose binding
	// limit the rate-limit headers describe, or -1. Shadow rules never show
	// in headers: they must not change what clients do.
	Enforced int

	calls       []decide.Call   // what prepare left for Redis
	callResults []decide.Result // the results of calls, for Deciders that write into it
	cached      uint64          // bit i: Applied[i] answered without Redis
	servedLate  uint64          // bit i: Applied[i]'s call timed out and a lease answered it
	banned      bool            // a report's client IP was banned (Report), for its event
	userBanned  bool            // a report's user was banned (Report), for its event
	report      bool            // an outcome report's debits: they stand, even answered late
	holdID      string          // the id of a check's takes of holds (nameHolds)
	held        []heldCall      // the takes that took their hold
	detached    detachedContext // the Decider's context while it decides calls

	// The descriptors of a rate limit API decision's event, while it is
	// encoded.
	eventDescs   []event.Descriptor
	eventEntries []event.Entry
}

// detachedContext is context.WithoutCancel(parent) kept in the pooled
// Decision, where context.WithoutCancel allocates on every decision: no
// deadline, never done, the parent's values.
type detachedContext struct{ parent context.Context }

func (*detachedContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedContext) Done() <-chan struct{}       { return nil }
func (*detachedContext) Err() error                  { return nil }
func (c *detachedContext) Value(key any) any         { return c.parent.Value(key) }

// Reset clears d for reuse.
func (d *Decision) Reset() {
	*d = Decision{
		Applied:      d.Applied[:0],
		Results:      d.Results[:0],
		calls:        d.calls[:0],
		callResults:  d.callResults[:0],
		eventDescs:   d.eventDescs[:0],
		eventEntries: d.eventEntries[:0],
		held:         d.held[:0],
		Enforced:     -1,
	}
}

// EnforcedLimit returns the rule and the binding result the headers
// describe, and false when no enforced rule applied.
func (d *Decision) EnforcedLimit() (rules.Applied, decide.Result, bool) {
	if d.Enforced < 0 {
		return rules.Applied{}, decide.Result{}, false
	}
	return d.Applied[d.Enforced], d.Results[d.Enforced], true
}

// aggregate combines the per-rule results: a request is denied when any
// enforced rule denies it; shadow rules only report.
func (d *Decision) aggregate() {
	report, enforced := -1, -1
	for i, a := range d.Applied {
		if better(d, i, report) {
			report = i
		}
		if !a.Rule.Shadow && better(d, i, enforced) {
			enforced = i
		}
	}
	d.Enforced = enforced
	r, a := d.Results[report], d.Applied[report]
	d.Allowed = enforced < 0 || d.Results[enforced].Allowed
	d.Reason = event.ReasonOK
	if !r.Allowed {
		d.Reason = event.ReasonRateLimited
		d.Shadow = a.Rule.Shadow
	}
	d.RuleID = a.Rule.ID
	d.Algorithm = a.Rule.Algorithm
	d.Limit = r.Limit
	d.Remaining = r.Remaining
	d.ResetAfter = r.ResetAfter
	d.RetryAfter = r.RetryAfter
	if d.Allowed {
		d.RetryAfter = 0
	}
}

// better reports whether result i should be reported rather than result j:
// enforced denials first (longest retry), then shadow denials, then the
// fewest remaining units; ties keep the earlier (higher priority) rule.
func better(d *Decision, i, j int) bool {
	if j < 0 {
		return true
	}
	ri, rj := d.Results[i], d.Results[j]
	if ri.Allowed != rj.Allowed {
		return !ri.Allowed
	}
	if !ri.Allowed {
		si, sj := d.Applied[i].Rule.Shadow, d.Applied[j].Rule.Shadow
		if si != sj {
			return !si
		}
		return ri.RetryAfter > rj.RetryAfter
	}
	return ri.Remaining < rj.Remaining
}
